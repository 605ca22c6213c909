"""The packing smoke test: prove, by running code, that a packing path trains like unpacked data.

``run_packing_smoke_test(path, config=None, data=None, ...)`` builds real canonical THD batches
through the path's own code (the smoke adapter its :class:`~reference_impl.packing_paths.PackingPath`
names; offline: ``prepare_packed_dataset`` -> packed Parquet -> ``PackedParquetDataset``;
in-batch: ``build_in_batch_loader``; Energon and global-batch likewise), converts each batch to a
real Megatron-Core ``PackedSeqParams`` (the model reads its boundaries from that object), runs the
tiny reference GPT forward and backward in float64, and checks, with numbers:

1. ``packed_equals_unpacked``: every sequence's loss in the packed row equals the loss of the same
   sample run alone, unpadded, and the gradient of the packed loss equals the sum of the per-sample
   gradients (tolerance ``TOLERANCE``);
2. ``no_cross_sequence_leakage``: perturbing one sequence's tokens leaves every other position's
   logits unchanged, while its own change;
3. ``position_ids_restart``: position ids run 0, 1, ... inside every physical sequence (rotary
   embeddings depend on position *differences*, so a loss check alone cannot see this);
4. ``loss_tokens_preserved``: supervised-token count of the batches equals that of the samples;
5. ``samples_exactly_once``: the multiset of packed sequences equals the multiset of samples;
6. ``cp_matches_cp1``: with ``context_parallel_size`` CP > 1, the same batches run for real on CP
   gloo processes (Megatron-Core parallel state, K/V exchange) give the CP=1 loss and gradients;
7. ``config_valid``: the run's config passes every rule of the registry.

Each check is ``passed``, ``failed`` or ``skipped`` (with the reason); the report's ``result`` is
``pass`` only when every check ran and passed (a skipped check makes it ``incomplete``). The
default config and data of every path make every check run.

The reference samples (for 1, 4, 5) are tokenized independently of the packing code, from the
same rows, with the same tokenization rules. ``faults`` deliberately breaks one thing (used by
the negative controls in the test-suite): ``no_boundaries`` (attention ignores ``cu_seqlens``),
``shift_loss_mask``, ``drop_sample``, ``no_position_reset``.

``model`` turns on options of the reference model (fields of
:class:`~reference_impl.training.model.TinyGPTConfig`: ``moe``, ``mtp``); each adds its own check
(:mod:`reference_impl.verbs.smoke_options`: ``moe_router_statistics``, ``mtp_equals_unpacked``) with
the negative controls ``router_counts_padding`` and ``mtp_cross_boundary``.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from reference_impl.errors import UsageError
from reference_impl.limits import SMOKE_ROWS
from reference_impl.packing_paths import PathBatches, get_path, path_names
from reference_impl.results import Result

log = logging.getLogger(__name__)

TOLERANCE = 1e-9
SIZES = SMOKE_ROWS
FAULTS = ("no_boundaries", "shift_loss_mask", "drop_sample", "no_position_reset", "router_counts_padding",
          "mtp_cross_boundary")
CHECK_NAMES = (
    "config_valid",
    "samples_exactly_once",
    "loss_tokens_preserved",
    "position_ids_restart",
    "packed_equals_unpacked",
    "no_cross_sequence_leakage",
    "cp_matches_cp1",
)
#: Outcomes of one check, and of a whole report.
CHECK_STATUSES = ("passed", "failed", "skipped")
RESULTS = ("pass", "fail", "incomplete")


def default_config(path: str) -> dict[str, Any]:
    """The default smoke config of a registered path (CP=2, per-token loss): a fresh copy."""
    import copy

    return copy.deepcopy(dict(get_path(path).smoke_config))


def __getattr__(name: str) -> Any:
    # the path registry is the source; these names stay for callers of the first version
    if name == "PATHS":
        return path_names()
    if name == "DEFAULT_CONFIGS":
        return {p: default_config(p) for p in path_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


@dataclass
class Check(Result):
    """One check: passed, failed or skipped (``passed`` True/False/None), with numbers.

    ``status`` spells the outcome out; a skipped check carries the ``reason`` it did not run.
    """

    name: str
    passed: bool | None
    value: Any
    threshold: Any
    message: str
    fix: str | None = None
    rule_id: str | None = None
    reason: str | None = None
    status: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.status = {True: "passed", False: "failed", None: "skipped"}[self.passed]
        if self.passed is None and not self.reason:
            self.reason = self.message


@dataclass
class SmokeReport(Result):
    """Result of :func:`run_packing_smoke_test`.

    ``result`` is ``pass`` only when every check ran and passed, ``fail`` when one failed, and
    ``incomplete`` when none failed but some were skipped (``skipped`` names them); ``ok`` is
    ``result == "pass"``.
    """

    path: str
    ok: bool
    checks: list[Check]
    config: dict[str, Any]
    data: dict[str, Any]
    timings: dict[str, float]
    faults: list[str] = field(default_factory=list)
    result: str = field(init=False, default="")
    skipped: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.skipped = [c.name for c in self.checks if c.passed is None]
        failed = any(c.passed is False for c in self.checks)
        self.result = "fail" if failed else ("incomplete" if self.skipped else "pass")
        self.ok = self.result == "pass"

    def check(self, name: str) -> Check:
        """The check with this name."""
        return next(c for c in self.checks if c.name == name)


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------


def _key(tokens: Any, labels: Any, loss: Any) -> tuple:
    import numpy as np

    return (
        np.asarray(tokens, dtype=np.int64).tobytes(),
        np.asarray(labels, dtype=np.int64).tobytes(),
        np.asarray(loss, dtype=np.float32).tobytes(),
    )


def _sequences(batch: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(physical start, physical length, real length) of every sequence of a canonical batch."""
    import numpy as np

    logical = np.asarray(batch["cu_seqlens_q"], dtype=np.int64)
    physical = np.asarray(batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]), dtype=np.int64)
    return [
        (int(physical[i]), int(physical[i + 1] - physical[i]), int(logical[i + 1] - logical[i]))
        for i in range(logical.size - 1)
    ]


def _batch_from_params(batch: Mapping[str, Any], params: Any) -> dict[str, Any]:
    """The per-token tensors of ``batch`` with boundaries taken from the ``PackedSeqParams`` object."""
    out = {k: batch[k] for k in ("tokens", "labels", "loss_mask", "position_ids")}
    out["cu_seqlens_q"] = params.cu_seqlens_q
    out["cu_seqlens_kv"] = params.cu_seqlens_kv
    if params.cu_seqlens_q_padded is not None:
        out["cu_seqlens_q_padded"] = params.cu_seqlens_q_padded
        out["cu_seqlens_kv_padded"] = params.cu_seqlens_kv_padded
    out["max_seqlen_q"], out["max_seqlen_kv"] = params.max_seqlen_q, params.max_seqlen_kv
    return out


def _single(sample: Mapping[str, Any]) -> dict[str, Any]:
    """One sample as its own unpadded micro-batch (built here, not by the THD builder)."""
    import torch

    n = len(sample["tokens"])
    cu = torch.tensor([0, n], dtype=torch.int32)
    return {
        "tokens": torch.as_tensor(sample["tokens"], dtype=torch.int64)[None],
        "labels": torch.as_tensor(sample["labels"], dtype=torch.int64)[None],
        "loss_mask": torch.as_tensor(sample["loss_mask"], dtype=torch.float32)[None],
        "position_ids": torch.arange(n, dtype=torch.int64)[None],
        "cu_seqlens_q": cu, "cu_seqlens_kv": cu, "max_seqlen_q": n, "max_seqlen_kv": n,
    }


def _apply_faults(batches: list[dict[str, Any]], faults: Sequence[str]) -> list[dict[str, Any]]:
    import torch

    out = [dict(b) for b in batches]
    if "drop_sample" in faults and out:
        out = out[:-1] if len(out) > 1 else out
        if len(batches) == 1:
            raise UsageError("drop_sample needs at least two batches")
    for b in out:
        if "shift_loss_mask" in faults:
            b["loss_mask"] = torch.roll(b["loss_mask"], 1, dims=1)
        if "no_position_reset" in faults:
            b["position_ids"] = torch.arange(b["tokens"].shape[1], dtype=torch.int64)[None]
    return out


def _config_check(cfg: Any) -> Check:
    from reference_impl.config import validate_config

    report = validate_config(cfg)
    if report.ok:
        return Check("config_valid", True, f"{report.rules_checked} rules", "no error", "config passes every rule")
    first = report.violations[0]
    return Check(
        "config_valid", False, [f.rule_id for f in report.violations], "no error",
        "; ".join(f.one_line() for f in report.violations), first.fix, first.rule_id,
    )


def _exactly_once(pb: PathBatches, batches: list[dict[str, Any]]) -> Check:
    expected = Counter(_key(s["tokens"], s["labels"], s["loss_mask"]) for s in pb.samples)
    seen: Counter = Counter()
    for b in batches:
        for start, _, real in _sequences(b):
            if real == 0:
                continue
            sl = slice(start, start + real)
            seen[_key(b["tokens"][0, sl], b["labels"][0, sl], b["loss_mask"][0, sl])] += 1
    missing = sum((expected - seen).values())
    extra = sum((seen - expected).values())
    ok = missing == 0 and extra == 0
    return Check(
        "samples_exactly_once", ok, {"samples": sum(expected.values()), "missing": missing, "unexpected": extra},
        "missing = unexpected = 0",
        f"{sum(seen.values())} packed sequences vs {sum(expected.values())} samples "
        f"({pb.rows_skipped} of {pb.rows_in} rows rejected by tokenization, accounted)",
        None if ok else "a sample was dropped, duplicated or altered between tokenization and the packed batch",
    )


def _loss_tokens(pb: PathBatches, batches: list[dict[str, Any]]) -> Check:
    expected = float(sum(float(s["loss_mask"].sum()) for s in pb.samples))
    got = float(sum(float(b["loss_mask"].sum()) for b in batches))
    ok = expected == got
    return Check("loss_tokens_preserved", ok, {"samples": expected, "batches": got}, "equal",
                 f"supervised tokens: {got:.0f} in batches, {expected:.0f} in samples",
                 None if ok else "the loss mask changed between the rows and the batches (shifted or dropped)")


def _positions(batches: list[dict[str, Any]]) -> Check:
    import torch

    bad = []
    for n, b in enumerate(batches):
        pos = b["position_ids"][0]
        for k, (start, length, real) in enumerate(_sequences(b)):
            # a sequence's real tokens and its alignment gap count 0, 1, ...; width padding (no real token) is free
            if real and not torch.equal(pos[start : start + length], torch.arange(length, dtype=pos.dtype)):
                bad.append((n, k))
    ok = not bad
    return Check("position_ids_restart", ok, {"bad_sequences": len(bad), "first": bad[:3]}, 0,
                 "position ids restart at 0 in every sequence" if ok else f"{len(bad)} sequence(s) do not restart at 0",
                 None if ok else "reset position ids at every cu_seqlens boundary (the THD builder does)")


def _max_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _equivalence(
    model: Any, pb: PathBatches, batches: list[dict[str, Any]], mode: str,
    notify: Callable[[str, float], None] = lambda stage, fraction: None,
) -> tuple[Check, Check]:
    import torch

    from reference_impl.training.packed_seq_params import to_packed_seq_params
    from reference_impl.training.step import packed_forward, reference_step

    by_key = {}
    for s in pb.samples:
        by_key.setdefault(_key(s["tokens"], s["labels"], s["loss_mask"]), s)
    alone_cache: dict[int, Any] = {}
    loss_diff, grad_diff, compared = 0.0, 0.0, 0
    unmatched = 0
    leak_max, own_min, leak_tested = 0.0, float("inf"), 0
    for n, batch in enumerate(batches):
        notify(f"forward/backward batch {n + 1}/{len(batches)}", 0.3 + 0.4 * n / max(len(batches), 1))
        view = _batch_from_params(batch, to_packed_seq_params(batch))
        packed = reference_step(model, view, mode=mode)
        total_alone = None
        for k, (start, _, real) in enumerate(_sequences(batch)):
            if real == 0:
                continue
            sl = slice(start, start + real)
            sample = by_key.get(_key(batch["tokens"][0, sl], batch["labels"][0, sl], batch["loss_mask"][0, sl]))
            if sample is None:
                unmatched += 1
                continue
            if sample["id"] not in alone_cache:
                alone_cache[sample["id"]] = reference_step(model, _single(sample), mode="thd")
            alone = alone_cache[sample["id"]]
            loss_diff = max(loss_diff, abs(packed.sequences[k].loss_sum - alone.loss_sum))
            total_alone = alone.grads if total_alone is None else {g: total_alone[g] + alone.grads[g] for g in total_alone}
            compared += 1
        if total_alone is not None:
            grad_diff = max(grad_diff, _max_diff(packed.grads, total_alone))
        # leakage: perturb the first real sequence of a batch that holds at least two
        seqs = [s for s in _sequences(batch) if s[2] > 0]
        if len(seqs) >= 2 and leak_tested < 4:
            start, length, real = seqs[0]
            with torch.no_grad():
                base = packed_forward(model, view, mode=mode)
            poked = dict(view)
            tokens = view["tokens"].clone()
            tokens[0, start : start + real] = (tokens[0, start : start + real] + 7) % model.config.vocab_size
            poked["tokens"] = tokens
            other = torch.ones(tokens.shape[1], dtype=torch.bool)
            other[start : start + length] = False
            with torch.no_grad():
                changed = packed_forward(model, poked, mode=mode)
            leak_max = max(leak_max, float((changed[other] - base[other]).abs().max()))
            own_min = min(own_min, float((changed[~other] - base[~other]).abs().max()))
            leak_tested += 1
    ok = compared > 0 and unmatched == 0 and loss_diff <= TOLERANCE and grad_diff <= TOLERANCE
    eq = Check(
        "packed_equals_unpacked", ok,
        {"sequences": compared, "unmatched": unmatched, "max_loss_diff": loss_diff, "max_grad_diff": grad_diff},
        TOLERANCE,
        f"{compared} sequences: max |loss diff| {loss_diff:.2e}, max |grad diff| {grad_diff:.2e} (float64)",
        None if ok else "attention must stay inside each sequence (pass cu_seqlens / PackedSeqParams to attention) "
        "and the loss mask must stay aligned to the labels",
    )
    if leak_tested == 0:
        leak = Check("no_cross_sequence_leakage", None, None, 0.0, "no batch holds two sequences; nothing to test")
    else:
        leak_ok = leak_max <= TOLERANCE and own_min > 0
        leak = Check(
            "no_cross_sequence_leakage", leak_ok,
            {"batches": leak_tested, "max_other_logit_change": leak_max, "min_own_logit_change": own_min},
            TOLERANCE,
            f"perturbing one sequence moved other sequences' logits by at most {leak_max:.2e}",
            None if leak_ok else "tokens attend across sequence boundaries: use THD attention with cu_seqlens",
            None,
        )
    return eq, leak


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cp_check(model: Any, cfg: Any, batches: list[dict[str, Any]], workdir: Path, seed: int,
              max_batches: int, timeout: float) -> Check:
    import torch

    from reference_impl.training.step import reference_step

    cp = cfg.model.context_parallel_size
    if cp < 2:
        return Check("cp_matches_cp1", None, None, TOLERANCE,
                     "skipped: context_parallel_size=1 (set it to 2+ to check the CP split)")
    # the batches with the most sequences exercise the most boundaries
    ranked = sorted(range(len(batches)), key=lambda i: (-len(_sequences(batches[i])), i))
    chosen = [batches[i] for i in sorted(ranked[:max_batches])]
    job = workdir / "cp_job.pt"
    out = workdir / "cp_result.pt"
    keep = ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens_q", "cu_seqlens_kv",
            "cu_seqlens_q_padded", "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv", "padding_mask")
    torch.save({
        "batches": [{k: b[k] for k in keep if k in b} for b in chosen],
        "model_config": model.config.to_dict(),
        "seed": seed,
        "dtype": "float64",
        "calculate_per_token_loss": cfg.model.calculate_per_token_loss,
        "average_in_collective": cfg.ddp.average_in_collective,
    }, job)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(cp),
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           "-m", "reference_impl.training.cp_check", "--job", str(job), "--out", str(out)]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Check("cp_matches_cp1", False, None, TOLERANCE, f"the CP={cp} run did not finish in {timeout:.0f} s",
                     "rerun with a smaller size or without the CP check (cp_check=False)")
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return Check("cp_matches_cp1", False, None, TOLERANCE, f"the CP={cp} run failed: {' | '.join(tail)}")
    result = torch.load(out, weights_only=True)
    loss_diff, grad_diff, errors = 0.0, 0.0, []
    for batch, res in zip(chosen, result["results"]):
        if "error" in res:
            errors.append(res["error"])
            continue
        # at CP=1 one micro-batch's per-token loss and its mean loss coincide: sum / supervised tokens
        ref = reference_step(model, batch)
        loss_diff = max(loss_diff, abs(res["objective"] - ref.loss_sum / ref.token_count))
        grad_diff = max(grad_diff, _max_diff(res["grads"], {k: g / ref.token_count for k, g in ref.grads.items()}))
        seq = [s.loss_sum for s in ref.sequences]
        loss_diff = max(loss_diff, max((abs(a - b) for a, b in zip(res["sequence_sums"], seq)), default=0.0))
    if errors:
        return Check("cp_matches_cp1", False, {"errors": len(errors)}, TOLERANCE,
                     f"CP={cp} could not split the batches: {errors[0]}",
                     "pad every sequence to the alignment `seqpack align` derives (pad_seq_to_mult)",
                     "PACK-OFFLINE-PAD-MULT-TOPOLOGY")
    ok = loss_diff <= TOLERANCE and grad_diff <= TOLERANCE
    return Check("cp_matches_cp1", ok, {"cp": cp, "batches": len(chosen), "max_loss_diff": loss_diff,
                                        "max_grad_diff": grad_diff}, TOLERANCE,
                 f"CP={cp} on {cp} gloo processes vs CP=1: max |loss diff| {loss_diff:.2e}, max |grad diff| {grad_diff:.2e}",
                 None if ok else "use calculate_per_token_loss=true and average_in_collective=false with CP",
                 None if ok else "CP-FT-PER-TOKEN-LOSS")


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------


def _subset(data: Path, n: int, workdir: Path) -> Path:
    from reference_impl.data.jsonl import JsonlFile

    jf = JsonlFile(data)
    out = workdir / "smoke_input.jsonl"
    with open(out, "wb") as fh:
        for i in range(min(n, len(jf))):
            fh.write(jf.raw(i) + b"\n")
    return out


def run_packing_smoke_test(
    path: str = "offline",
    config: Any = None,
    data: str | os.PathLike[str] | None = None,
    *,
    overrides: Iterable[str] = (),
    size: str = "small",
    seed: int = 1234,
    cp_check: bool = True,
    cp_max_batches: int = 2,
    cp_timeout: float = 120.0,
    faults: Sequence[str] = (),
    progress: Callable[[str, float], None] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    model: Mapping[str, Any] | None = None,
) -> SmokeReport:
    """Run the packing smoke test for one path (see the module docstring for the checks)."""
    import torch

    from reference_impl.config import load_config
    from reference_impl.data import ByteTokenizer
    from reference_impl.training.model import TinyGPT, TinyGPTConfig
    from reference_impl.verbs.smoke_options import option_checks

    spec = get_path(path)
    try:
        model_cfg = TinyGPTConfig(**{"vocab_size": ByteTokenizer().vocab_size, **(model or {})})
    except TypeError as exc:
        raise UsageError(f"unknown reference model option: {exc}", field="model") from None
    if size not in SIZES:
        raise UsageError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}", field="size")
    bad = [f for f in faults if f not in FAULTS]
    if bad:
        raise UsageError(f"unknown fault {bad[0]!r}; known: {', '.join(FAULTS)}", field="faults")
    cfg = load_config(config if config is not None else default_config(path), overrides)
    if path not in cfg.active_paths():
        raise UsageError(f"the config does not turn on the {path} path (active: {cfg.active_paths() or 'none'})",
                         field="dataset")
    notify = progress or (lambda stage, fraction: None)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        scratch = Path(tmp)
        source = Path(data) if data is not None else spec.load("smoke_data")(scratch, SIZES[size], seed)
        jsonl = _subset(source, SIZES[size], scratch)
        checks = [_config_check(cfg)]
        notify("build batches", 0.1)
        t0 = time.perf_counter()
        pb = spec.load("smoke_adapter")(cfg, jsonl, scratch)
        timings["build_batches_s"] = time.perf_counter() - t0
        batches = _apply_faults(pb.batches, faults)
        checks.append(_exactly_once(pb, batches))
        checks.append(_loss_tokens(pb, batches))
        checks.append(_positions(batches))
        notify("forward/backward", 0.3)
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        net = TinyGPT(model_cfg, seed=seed)
        mode = "causal" if "no_boundaries" in faults else "thd"
        checks.extend(_equivalence(net, pb, batches, mode, notify))
        checks.extend(option_checks(net, pb, batches, faults, TOLERANCE))
        timings["equivalence_s"] = time.perf_counter() - t0
        if cp_check:
            notify("context parallel", 0.7)
            t0 = time.perf_counter()
            checks.append(_cp_check(net, cfg, batches, scratch, seed, cp_max_batches, cp_timeout))
            timings["cp_check_s"] = time.perf_counter() - t0
        else:
            checks.append(Check("cp_matches_cp1", None, None, TOLERANCE, "skipped: the caller turned the CP check off "
                                "(cp_check=False / --no-cp)"))
    timings["total_s"] = time.perf_counter() - started
    notify("done", 1.0)
    tokens = sum(int(b["tokens"].shape[1]) for b in batches)
    real = sum(sum(r for _, _, r in _sequences(b)) for b in batches)
    return SmokeReport(
        path=path,
        ok=False,  # set from the checks
        checks=checks,
        config={"pad_seq_to_mult": cfg.dataset.offline_packing_specs.pad_seq_to_mult
                if path == "offline" and cfg.dataset.offline_packing_specs else None,
                "context_parallel_size": cfg.model.context_parallel_size,
                "seq_length": cfg.seq_length, "micro_batch_size": cfg.train.micro_batch_size,
                "reference_model": model_cfg.to_dict()},
        data={"source": str(source), "rows": pb.rows_in, "rows_rejected": pb.rows_skipped,
              "samples": len(pb.samples), "batches": len(batches), "tokens": tokens, "real_tokens": real,
              **pb.details},
        timings=timings,
        faults=list(faults),
    )


__all__ = ["CHECK_NAMES", "CHECK_STATUSES", "FAULTS", "RESULTS", "Check", "SmokeReport", "default_config",
           "run_packing_smoke_test"]



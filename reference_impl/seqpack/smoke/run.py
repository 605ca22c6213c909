"""The packing smoke test: prove, by running code, that a packing path trains like unpacked data.

``run_packing_smoke_test(path, config=None, data=None, ...)`` builds real canonical THD batches
through the path's own code (the smoke adapter its :class:`~seqpack.core.packing_paths.PackingPath`
names; offline: ``prepare_packed_dataset`` -> packed Parquet -> ``PackedParquetDataset``;
in-batch: ``build_in_batch_loader``; Energon and global-batch likewise), reads each batch's
boundaries through the ``PackedSeqParams`` field mapping Megatron-Bridge's step uses (the model
sees only those), runs the tiny reference GPT forward and backward in float64, and checks, with
numbers:

1. ``packed_equals_unpacked``: every packed sequence, against its sample run alone (positions from
   0, plain causal attention, built without packing code), has the same outputs at every token, the
   same loss sum and supervised-token count, no supervised token lies outside a sequence, and the
   gradients agree (tolerance ``TOLERANCE``). Both sides run as padded stacks of rows, one forward
   and backward per side; the gradient compared is that of a random weighted sum of the
   per-sequence losses, which equal per-sequence gradients reproduce and unequal ones do not
   (:mod:`seqpack.training.equivalence`);
2. ``no_cross_sequence_leakage``: perturbing one sequence's tokens leaves every other position's
   outputs unchanged, while its own change;
3. ``position_ids_restart``: position ids run 0, 1, ... inside every physical sequence (rotary
   embeddings depend on position *differences*, so a loss check alone cannot see this); for VLM
   batches also the M-RoPE ids: (0, 0, 0) at every sequence start and, on the real tokens, the ids
   of the sample alone on all three axes;
4. ``loss_tokens_preserved``: supervised-token count of the batches equals that of the samples;
5. ``samples_exactly_once``: every sample is in exactly one packed sequence, unaltered (matched by its
   row; missing, duplicated, altered and unknown sequences counted apart);
6. ``cp_matches_cp1``: with ``context_parallel_size`` CP > 1, the same batches run for real on CP
   gloo processes (real Megatron-Core ``PackedSeqParams``, parallel state, K/V exchange) give the
   CP=1 loss and gradients;
7. ``config_valid``: the run's config passes every rule of the registry.

Each check is ``passed``, ``failed`` or ``skipped`` (with the reason); the report's ``result`` is
``pass`` only when every check ran and passed (a skipped check makes it ``incomplete``). The
default config and data of every path make every check run.

:func:`run_packing_smoke_tests` runs several paths in one go: their CP checks share one launch of
CP ranks, which is where Megatron-Core is imported and real ``PackedSeqParams`` are built (the
import's cost is reported as ``timings["megatron_core_import_s"]``); the process that runs the
smoke test imports Megatron-Core only for the MTP option, to roll packed rows with Megatron-Core's own
``roll_tensor`` (``mtp_roll="megatron_core"``, the default). The ranks are forked from a rank server
(:mod:`seqpack.training.rank_server`) started before the in-process checks, so torch and
Megatron-Core are imported once, while those checks run. Torch runs on one thread per worker
meanwhile (the tiny model's operations are too small for intra-op threads to pay); the model's
forward and backward of one path run on a worker thread while the next path builds its batches.

The reference samples (for 1, 4, 5) are tokenized independently of the packing code, from the
same rows, with the same tokenization rules and tokenizer (``tokenizer``; the byte tokenizer by default;
the ids of a real tokenizer are renumbered for the reference model, :mod:`seqpack.smoke.vocab`), and
matched to the packed sequences by their source row (:func:`~seqpack.smoke.checks.match_sequences`).
A run whose tokenization rejected more than half the rows is ``incomplete``. ``faults`` deliberately breaks one thing (used by
the negative controls in the test-suite): ``no_boundaries`` (attention ignores ``cu_seqlens``),
``shift_loss_mask``, ``drop_sample``, ``no_position_reset``, and for VLM batches
``misaligned_image_tokens`` (every image token shows the next merged patch window) and
``mrope_no_restart`` (M-RoPE ids computed over the whole row as one sequence).

VLM data (rows with images: the default data of the in-batch and Energon paths) runs the reference
model with its vision stem and M-RoPE (:mod:`seqpack.smoke.vlm`). The images and M-RoPE ids
reach the batched comparison as the model's per-token inputs (``token_inputs``, built from each
batch and each sample alone by ``TinyGPT.batch_inputs``), so packed equals unpacked covers the
stem's gradients, and the leakage check also perturbs the images of the first sequence that has
some.

``model`` turns on options of the reference model (fields of
:class:`~seqpack.training.model.TinyGPTConfig`: ``moe``, ``mtp``). Their per-token outputs and
losses (MTP logits and losses) join check 1 through the model's hooks; each option also adds its
own check (:mod:`seqpack.smoke.options`: ``moe_router_statistics``,
``mtp_equals_unpacked``) with the negative controls ``router_counts_padding`` and
``mtp_cross_boundary``. MTP inputs and targets of packed rows are rolled by the installed
Megatron-Core's own ``roll_tensor`` (:func:`~seqpack.training.mtp.upstream_roll_source`), so the MTP
check fails where that roll trains wrong targets (across alignment padding: MTP-PACKED-ALIGNMENT-ROLL);
``mtp_roll="reference"`` rolls inside each sequence instead (what a fixed Megatron-Core does). The router check also needs every batch's ``padding_mask`` to agree with
its boundaries (negative control ``wrong_padding_mask``).


Results and names live in :mod:`.report`, the checks in :mod:`.checks`.
"""

from __future__ import annotations

import inspect
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from seqpack.core.arguments import positive_int
from seqpack.core.errors import UsageError
from seqpack.core.packing_paths import PathBatches, get_path, visual_paths
from seqpack.data.tokenizers import tokenizer_label
from seqpack.io import confine
from seqpack.smoke.checks import (
    apply_faults,
    attention_budget,
    batch_sequences,
    compared_rows,
    config_check,
    count_padding_mask_mismatches,
    cp_job,
    cp_verdict,
    equivalence_checks,
    exactly_once_check,
    loss_tokens_check,
    match_sequences,
    positions_check,
)
from seqpack.smoke.report import FAULTS, SIZES, TOLERANCE, Check, SmokeReport, default_config, model_config
from seqpack.smoke.vlm import (
    model_options,
    report_details,
)
from seqpack.smoke.vocab import compact_vocabulary

#: How the smoke test rolls MTP inputs and targets of packed rows (:class:`SmokeRequest`).
MTP_ROLLS = ("megatron_core", "reference")
#: Data whose largest token id reaches this is renumbered for the reference model (:mod:`seqpack.smoke.vocab`).
COMPACT_ABOVE = 4096

__all__ = ["PSP_FIELDS_ONLY", "SmokeRequest", "run_packing_smoke_test", "run_packing_smoke_tests"]


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------


def _cp_checks(runs: list[_Run], scratch: Path, timeout: float, server: Any = None) -> None:
    """Run the CP jobs of ``runs`` in one launch per CP size (ranks forked from ``server``, a
    :class:`~seqpack.training.rank_server.RankServer`, when given) and set each run's ``cp`` check."""
    import torch

    from seqpack.training.cp_check import launch

    by_size: dict[int, list[_Run]] = {}
    for run in runs:
        if run.cp_job is not None:
            by_size.setdefault(run.cfg.model.context_parallel_size, []).append(run)
    for cp, group in by_size.items():
        started = time.perf_counter()
        job, out = scratch / f"cp{cp}_job.pt", scratch / f"cp{cp}_result.pt"
        torch.save({"jobs": [r.cp_job for r in group]}, job)
        outcome = launch(job, out, cp, timeout, server)
        result = torch.load(out, weights_only=True) if outcome.returncode == 0 and out.exists() else None
        shared = {"launch_paths": [r.request.path for r in group]}
        for i, run in enumerate(group):
            if outcome.timed_out:
                run.cp = Check("cp_matches_cp1", False, None, TOLERANCE,
                               f"the CP={cp} run did not finish in {timeout:.0f} s",
                               "rerun with a smaller size or without the CP check (cp_check=False)")
            elif result is None:
                run.cp = Check("cp_matches_cp1", False, None, TOLERANCE,
                               f"the CP={cp} run failed: {' | '.join(outcome.tail)}")
            else:
                run.cp = cp_verdict(run.model, cp, run.cp_job, result["jobs"][i], shared)
                run.timings["megatron_core_import_s"] = float(result["megatron_core_import_s"])
                run.packed_seq_params = str(result["packed_seq_params"])
        elapsed = time.perf_counter() - started
        for run in group:
            run.timings["cp_check_s"] = elapsed


def _subset(data: Path, n: int, workdir: Path) -> Path:
    """The rows the run reads: ``data`` itself when it has at most ``n`` rows (read in place: relative
    image and video paths resolve against its folder, errors name it), else a copy of its first ``n`` rows
    (:func:`seqpack.smoke.adapters.copy_rows`)."""
    from seqpack.data.jsonl import JsonlFile
    from seqpack.smoke.adapters import copy_rows

    with JsonlFile(data) as jf:
        rows = len(jf)
    return data if rows <= n else copy_rows(data, range(n), workdir / "smoke_input.jsonl")


@dataclass(frozen=True)
class SmokeRequest:
    """One path's run in :func:`run_packing_smoke_tests`: the path, its config (None: the path's
    default CP=2 config) with dotted overrides, its data (None: the path's smoke data), the
    deliberate ``faults`` of a negative control, ``model`` options of the reference model
    (:func:`model_config`), the ``tokenizer`` (a ``tokenizer.json`` or its folder; None: the byte
    tokenizer) and the ``bridge_version`` the config is checked for (None: the release ``seqpack
    validate`` checks by default; the demo config of a path only Bridge main has is checked for main).
    ``mtp_roll`` (with the ``mtp`` model option): ``"megatron_core"`` rolls each packed row's MTP inputs
    and targets with the installed Megatron-Core's own ``roll_tensor`` (what training runs; imports
    Megatron-Core in this process), ``"reference"`` with seqpack's roll inside each sequence (what a
    Megatron-Core with the fix does)."""

    path: str = "offline"
    config: Any = None
    data: str | os.PathLike[str] | None = None
    overrides: Sequence[str] = ()
    faults: Sequence[str] = ()
    model: Mapping[str, Any] = field(default_factory=dict)
    tokenizer: str | os.PathLike[str] | None = None
    bridge_version: str | None = None
    mtp_roll: str = "megatron_core"


@dataclass
class _Run:
    """One path between its in-process checks and its CP check."""

    request: SmokeRequest
    cfg: Any
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    pb: PathBatches | None = None
    batches: list[dict[str, Any]] = field(default_factory=list)
    source: Path | None = None
    model: Any = None
    matches: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tokenizer: Any = None
    mtp_roll: str | None = None
    cp_job: dict[str, Any] | None = None
    cp: Check | None = None
    packed_seq_params: str = ""


def _checked_request(request: SmokeRequest) -> _Run:
    """The request's run, its config loaded and checked (the model options are checked by :func:`_check_model`)."""
    from seqpack.config import load_config

    get_path(request.path)
    if request.mtp_roll not in MTP_ROLLS:
        raise UsageError(f"unknown MTP roll {request.mtp_roll!r}; choose one of {', '.join(MTP_ROLLS)}",
                         field="mtp_roll")
    bad = [f for f in request.faults if f not in FAULTS]
    if bad:
        raise UsageError(f"unknown fault {bad[0]!r}; known: {', '.join(FAULTS)}", field="faults")
    cfg = load_config(request.config if request.config is not None else default_config(request.path),
                      request.overrides)
    if request.path not in cfg.active_paths():
        raise UsageError(f"the config does not turn on the {request.path} path (active: {cfg.active_paths() or 'none'})",
                         field="dataset")
    if request.data is not None and not get_path(request.path).visual_rows:
        from seqpack.data.vlm.sample import file_has_visuals

        if file_has_visuals(request.data):
            raise UsageError(
                f"{request.data} holds rows with images or videos, which the {request.path} path does not read",
                field="data", fix=f"run the smoke test on a path that reads VLM rows: {', '.join(visual_paths())}")
    run = _Run(request, cfg)
    if request.tokenizer is not None:
        from seqpack.data import load_tokenizer

        run.tokenizer = load_tokenizer(request.tokenizer)
    return run


def _check_model(request: SmokeRequest) -> None:
    """Refuse unknown reference model options (imports torch)."""
    try:
        model_config(**request.model)
    except TypeError as exc:
        raise UsageError(f"unknown reference model option: {exc}", field="model") from None


def _needs_cp(run: _Run, cp_check: bool) -> bool:
    return cp_check and run.cfg.model.context_parallel_size >= 2


def _start_rank_server(runs: list[_Run], cp_check: bool, log: Path) -> Any:
    """A rank server for the CP checks, started now so that its imports (torch, Megatron-Core) run while
    the in-process checks do (its errors go to ``log``); None when no run has a CP check or ranks cannot be
    forked here."""
    if not any(_needs_cp(run, cp_check) for run in runs):
        return None
    from seqpack.training.cp_check import rank_server

    return rank_server(log)


def _in_process(runs: list[_Run], build: Callable[[int, _Run], None], compute: Callable[[int, _Run], None],
                workers: int) -> None:
    """Every run's in-process part: ``build`` (data to batches: tokenizers, Parquet, Energon, which may fork
    worker processes) one run after the other in the calling thread, and ``compute`` (the model's forward
    and backward on the built batches, pure torch) on ``workers`` threads, each on one torch thread, while
    the next run builds (torch releases the interpreter lock in its operations, so two runs share two
    CPUs). The error a one-by-one loop would raise first (in run order) is raised; no run builds after it.
    """
    import concurrent.futures as cf

    from seqpack.data.interrupt import with_stop_check

    if workers <= 1 or len(runs) <= 1:
        for i, run in enumerate(runs):
            build(i, run)
            compute(i, run)
        return

    def one(i: int, run: _Run) -> None:
        with _torch_threads(1):  # a thread's own setting: a new thread starts from the process default
            compute(i, run)

    futures: list[cf.Future] = []
    failed: BaseException | None = None
    with cf.ThreadPoolExecutor(workers, thread_name_prefix="smoke") as pool:
        for i, run in enumerate(runs):
            if any(f.done() and f.exception() is not None for f in futures):
                break
            try:
                build(i, run)
            except BaseException as exc:  # noqa: BLE001 - raised below unless an earlier run's error comes first
                failed = exc
                break
            futures.append(pool.submit(with_stop_check(one), i, run))
    for f in futures:
        if f.exception() is not None:
            raise f.exception()  # type: ignore[misc]
    if failed is not None:
        raise failed


def _build(run: _Run, scratch: Path, size: str, seed: int, notify: Callable[[str, float], None]) -> None:
    """Build the path's batches (through its smoke adapter) and run the checks on the data."""
    started = time.perf_counter()
    spec, faults = get_path(run.request.path), run.request.faults
    data = run.request.data
    run.source = Path(data) if data is not None else spec.load("smoke_data")(scratch, SIZES[size], seed)
    jsonl = _subset(run.source, SIZES[size], scratch)
    if data is not None and run.request.tokenizer is None:  # the user's rows, measured in bytes: say so
        from seqpack.data.tokenizers import byte_tokenizer_warning
        from seqpack.smoke.adapters import schema_for

        note = byte_tokenizer_warning(None, schema_for(jsonl).kind)
        run.notes.append(note + "; the smoke test then checks another token stream than the one that will train")
    run.checks.append(config_check(run.cfg, run.request.bridge_version, demo=run.request.config is None))
    notify("build batches", 0.1)
    adapter = spec.load("smoke_adapter")
    if run.request.tokenizer is not None:
        if "tokenizer" not in inspect.signature(adapter).parameters:
            raise UsageError(f"the smoke adapter of the {run.request.path} path takes no tokenizer", field="tokenizer",
                             fix="give the adapter a `tokenizer=None` parameter, or leave the tokenizer out")
        run.pb = adapter(run.cfg, jsonl, scratch, tokenizer=run.tokenizer)
    else:
        run.pb = adapter(run.cfg, jsonl, scratch)
    run.timings["build_batches_s"] = time.perf_counter() - started
    run.batches = apply_faults(run.pb.batches, faults, run.pb.details.get("vlm"))
    run.matches = match_sequences(run.pb.samples, run.batches)
    run.checks.append(exactly_once_check(run.pb, run.matches))
    run.checks.append(loss_tokens_check(run.pb, run.batches))
    run.checks.append(positions_check(run.batches, run.pb, run.matches))
    run.timings["in_process_s"] = time.perf_counter() - started


def _compute(run: _Run, seed: int, cp_check: bool, cp_max_batches: int, notify: Callable[[str, float], None]) -> None:
    """Run the reference model on the built batches: every check but the CP one (prepared as a job)."""
    import torch

    from seqpack.smoke.options import option_checks
    from seqpack.training.model import TinyGPT

    assert run.pb is not None
    faults = run.request.faults
    notify("forward/backward, packed and unpacked (batched)", 0.4)
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    # ids of a real tokenizer renumbered into a small vocabulary, the same map on both sides (smoke.vocab)
    run.pb, run.batches, vocab = compact_vocabulary(run.pb, run.batches, COMPACT_ABOVE)
    # VLM data: the vision stem, M-RoPE and a vocabulary with the vision tokens (smoke_vlm.model_options)
    vlm = {**({"vocab_size": vocab} if vocab else {}), **model_options(run.pb, model_config(**run.request.model))}
    run.model = TinyGPT(model_config(**{**vlm, **run.request.model}), seed=seed)
    mode = "causal" if "no_boundaries" in faults else "thd"
    upstream = run.model.config.mtp is not None and run.request.mtp_roll == "megatron_core"
    if upstream:
        from seqpack.training.mtp import upstream_roll_name, upstream_roll_source

        notify("MTP roll by Megatron-Core (imports it)", 0.3)
        run.mtp_roll = upstream_roll_name()
    rows, unpacked, match, full = compared_rows(run.model, run.pb, run.batches, mode, run.model.token_inputs,
                                                run.matches, upstream_roll_source if upstream else None)
    if "mtp_cross_boundary" in faults:  # packed rows roll MTP across boundaries (a one-sequence row cannot)
        run.model.mtp_roll = "row"
    elif upstream:  # packed rows roll as the installed Megatron-Core's roll_tensor does
        run.model.mtp_roll = "given"
    eq, leak, res = equivalence_checks(run.model, rows, unpacked, match, full, seed)
    run.model.mtp_roll = "sequence"
    run.checks.extend((eq, leak))
    run.checks.extend(option_checks(run.model, rows, unpacked, match, res, faults, TOLERANCE, attention_budget(run.model),
                                    padding_mask_mismatches=count_padding_mask_mismatches(run.batches),
                                    mtp_roll=run.mtp_roll))
    run.timings["equivalence_s"] = time.perf_counter() - t0
    cp = run.cfg.model.context_parallel_size
    if not cp_check:
        run.cp = Check("cp_matches_cp1", None, None, TOLERANCE,
                       "skipped: the caller turned the CP check off (cp_check=False / --no-cp)")
    elif cp < 2:
        run.cp = Check("cp_matches_cp1", None, None, TOLERANCE,
                       "skipped: context_parallel_size=1 (set it to 2+ to check the CP split)")
    else:
        run.cp_job = cp_job(run.model, run.cfg, run.batches, seed, cp_max_batches)
    run.timings["in_process_s"] += time.perf_counter() - t0


def _report(run: _Run) -> SmokeReport:
    pb, cfg, batches = run.pb, run.cfg, run.batches
    assert pb is not None and run.cp is not None
    run.timings["total_s"] = run.timings["in_process_s"] + run.timings.get("cp_check_s", 0.0)
    tokens = sum(int(b["tokens"].shape[1]) for b in batches)
    real = sum(sum(r for _, _, r in batch_sequences(b)) for b in batches)
    path = run.request.path
    return SmokeReport(
        path=path,
        ok=False,  # set from the checks
        checks=[*run.checks, run.cp],
        config={"pad_seq_to_mult": cfg.dataset.offline_packing_specs.pad_seq_to_mult
                if path == "offline" and cfg.dataset.offline_packing_specs else None,
                "context_parallel_size": cfg.model.context_parallel_size,
                "seq_length": cfg.seq_length, "micro_batch_size": cfg.train.micro_batch_size,
                "reference_model": run.model.config.to_dict()},
        data={"source": str(run.source), "tokenizer": tokenizer_label(run.request.tokenizer), "rows": pb.rows_in, "rows_rejected": pb.rows_skipped,
              "samples": len(pb.samples), "batches": len(batches), "tokens": tokens, "real_tokens": real,
              "packed_seq_params": run.packed_seq_params or PSP_FIELDS_ONLY, **report_details(pb.details),
              **({"mtp_roll": run.mtp_roll or "reference (inside each sequence)"} if run.model.config.mtp else {})},
        timings=run.timings,
        faults=list(run.request.faults),
        notes=list(run.notes),
    )


#: ``data["packed_seq_params"]`` of a run whose CP check did not run.
PSP_FIELDS_ONLY = ("field mapping only: Megatron-Core is imported, and real PackedSeqParams built, "
                   "only by the CP check's ranks")


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run torch ops on ``n`` threads, then restore the caller's setting (the tiny model's ops are too small
    for threads to pay; on a busy machine spinning threads cost 10x)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_packing_smoke_tests(
    requests: Sequence[SmokeRequest | str],
    *,
    size: str = "small",
    seed: int = 1234,
    cp_check: bool = True,
    cp_max_batches: int = 2,
    cp_timeout: float = 120.0,
    progress: Callable[[str, float], None] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    workers: int | None = None,
) -> list[SmokeReport]:
    """Run the smoke test of several paths (a name stands for its default request); one report each.

    Every request is checked before any work starts. Each path's batches are built in the calling
    thread, one path after the other; the reference model runs on them on ``workers`` threads
    (default: two, or one on a one-CPU machine; ``progress`` may then be called from them, one call
    at a time) while the next path builds. The CP checks of all paths then run in one launch of CP
    ranks (one per distinct CP size), forked from a process that started importing torch and
    Megatron-Core before the in-process checks began.
    """
    import threading

    reqs = [SmokeRequest(r) if isinstance(r, str) else r for r in requests]
    if size not in SIZES:
        raise UsageError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}", field="size")
    if progress is not None:
        progress("configs and tokenizers", 0.0)
    runs = [_checked_request(r) for r in reqs]
    workers = min(2, os.cpu_count() or 1) if workers is None else positive_int("workers", workers)
    lock = threading.Lock()

    def notify(stage: str, fraction: float) -> None:
        if progress is not None:
            with lock:
                progress(stage, fraction)

    share = 0.7 / max(len(runs), 1)
    with confine.scratch_directory("seqpack-smoke-", parent=workdir) as tmp:
        server = _start_rank_server(runs, cp_check, Path(tmp) / "rank_server.log")
        try:
            notify("reference model (imports torch)" + (", rank server" if server is not None else ""), 0.02)
            for r in reqs:
                _check_model(r)

            def label(i: int) -> Callable[[str, float], None]:
                prefix = f"{runs[i].request.path}: " if len(runs) > 1 else ""
                return lambda stage, f: notify(prefix + stage, share * (i + f))

            def build(i: int, run: _Run) -> None:
                scratch = Path(tmp) / f"{i}_{run.request.path}"
                scratch.mkdir()
                _build(run, scratch, size, seed, label(i))

            def compute(i: int, run: _Run) -> None:
                _compute(run, seed, cp_check, cp_max_batches, label(i))

            with _torch_threads(1):
                _in_process(runs, build, compute, workers)
                if any(r.cp_job is not None for r in runs):
                    notify("context parallel", 0.7)
                    _cp_checks(runs, Path(tmp), cp_timeout, server)
        finally:
            if server is not None:
                server.close()
    notify("done", 1.0)
    return [_report(run) for run in runs]


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
    tokenizer: str | os.PathLike[str] | None = None,
    bridge_version: str | None = None,
    mtp_roll: str = "megatron_core",
) -> SmokeReport:
    """Run the packing smoke test for one path (see the module docstring for the checks)."""
    request = SmokeRequest(path, config, data, tuple(overrides), tuple(faults), dict(model or {}), tokenizer,
                           bridge_version, mtp_roll)
    return run_packing_smoke_tests([request], size=size, seed=seed, cp_check=cp_check, cp_max_batches=cp_max_batches,
                                   cp_timeout=cp_timeout, progress=progress, workdir=workdir)[0]

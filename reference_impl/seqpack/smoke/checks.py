"""The smoke test's checks on the batches of one path: samples exactly once, supervised tokens preserved,
position ids restart, packed equals unpacked and no leakage (one batched computation), the config's rules,
and the CP=2 run's verdict.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from seqpack.core.errors import UsageError
from seqpack.core.packing_paths import PathBatches
from seqpack.smoke.report import TOLERANCE, Check
from seqpack.smoke.vlm import (
    VISUAL_KEYS,
    apply_vlm_faults,
    leak_inputs,
    mrope_check,
    sample_inputs,
)

__all__ = ["apply_faults", "attention_budget", "batch_sequences", "compared_rows", "config_check", "match_sequences", "SequenceMatch", "count_padding_mask_mismatches", "cp_job", "cp_verdict", "equivalence_checks", "exactly_once_check", "loss_tokens_check", "max_diff", "positions_check", "sequence_key"]


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------


def sequence_key(tokens: Any, labels: Any, loss: Any) -> tuple:
    import numpy as np

    return (
        np.asarray(tokens, dtype=np.int64).tobytes(),
        np.asarray(labels, dtype=np.int64).tobytes(),
        np.asarray(loss, dtype=np.float32).tobytes(),
    )


def batch_sequences(batch: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(physical start, physical length, real length) of every sequence of a canonical batch."""
    import numpy as np

    logical = np.asarray(batch["cu_seqlens_q"], dtype=np.int64)
    physical = np.asarray(batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]), dtype=np.int64)
    return [
        (int(physical[i]), int(physical[i + 1] - physical[i]), int(logical[i + 1] - logical[i]))
        for i in range(logical.size - 1)
    ]


def apply_faults(batches: list[dict[str, Any]], faults: Sequence[str], vlm: Any = None) -> list[dict[str, Any]]:
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
        if "wrong_padding_mask" in faults and "padding_mask" in b:  # padding handed to the router as real tokens
            b["padding_mask"] = torch.zeros_like(b["padding_mask"])
    return apply_vlm_faults(out, faults, vlm)


def count_padding_mask_mismatches(batches: list[dict[str, Any]]) -> int:
    """Batches whose ``padding_mask`` (what Megatron-Core's MoE router reads) is not "outside every
    sequence's real tokens" by the boundaries; the reference router derives padding from those."""
    import numpy as np

    from seqpack.packing.thd import padding_mask_from_lengths

    bad = 0
    for b in batches:
        if "padding_mask" not in b:
            continue
        seqs = batch_sequences(b)
        expected = padding_mask_from_lengths(np.array([s for s, _, _ in seqs]), np.array([r for _, _, r in seqs]),
                                             int(b["tokens"].shape[1]))
        bad += not np.array_equal(b["padding_mask"][0].cpu().numpy().astype(bool), expected)
    return bad


def config_check(cfg: Any, bridge_version: str | None = None, *, demo: bool = False) -> Check:
    """The config against every rule for ``bridge_version``: by default the release ``seqpack validate``
    checks too; the smoke test's own demo config of a path that only Bridge main has (``demo``) is checked
    for main, and the message says so. Warnings are carried into the message and the value."""
    from seqpack.config import validate_config
    from seqpack.config.validate import version_target
    from seqpack.core.versions import DEFAULT_BRIDGE_TARGET

    lacking: list[str] = []
    if bridge_version is not None:
        target = bridge_version
    elif demo:
        target, lacking = version_target(cfg)  # the Bridge whose path the demo config follows
    else:
        target = DEFAULT_BRIDGE_TARGET
    report = validate_config(cfg, bridge_version=target)
    warnings = [f.rule_id for f in report.warnings]
    noted = f"; warnings: {'; '.join(f.one_line() for f in report.warnings)}" if warnings else ""
    if report.ok:
        where = f"for Megatron-Bridge {target}" + (
            f" (the demo config's path needs main: {', '.join(lacking)} under the release)" if lacking else "")
        return Check("config_valid", True, {"rules": report.rules_checked, "bridge_version": target,
                                            "warnings": warnings}, "no error",
                     f"config passes every rule {where}{noted}")
    first = report.violations[0]
    version_only = all(f.rule_id.endswith("-BRIDGE-VERSION") for f in report.violations)
    return Check(
        "config_valid", False, [f.rule_id for f in report.violations], "no error",
        f"for Megatron-Bridge {target}: " + "; ".join(f.one_line() for f in report.violations) + noted,
        first.fix + (" (or check the config for Bridge main: bridge_version='main', --bridge-version main)"
                     if version_only else ""), first.rule_id,
    )


@dataclass(frozen=True)
class SequenceMatch:
    """One packed sequence with real tokens and the reference sample it holds.

    ``sample`` indexes ``PathBatches.samples`` (-1: none); ``compared`` is the number of positions
    compared with the sample (their common length); ``status`` is ``same``, ``tail`` (equal on the
    common length, the longer side untrained beyond it: Megatron-Bridge's offline reader ends a sequence at its last input that
    is not EOS: a template that closes with another token keeps that token as an untrained input,
    and a sample whose last input is EOS loses that untrained position), ``altered`` (the sample's
    row, other content) or ``unknown`` (no sample has it).
    """

    batch: int
    start: int
    real: int
    sample: int
    compared: int
    status: str

    @property
    def usable(self) -> bool:
        """The sequence holds its sample (with, at most, an unsupervised tail)."""
        return self.status in ("same", "tail")


def _as_array(values: Any, dtype: Any) -> Any:
    import numpy as np

    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values).astype(dtype, copy=False).reshape(-1)


def _compare(sample: Mapping[str, Any], tokens: Any, labels: Any, loss: Any) -> tuple[str, int]:
    """(status, positions compared) of a packed sequence against the sample it should hold: equal on
    their common length, and whatever one side has beyond it untrained."""
    import numpy as np

    mask = _as_array(sample["loss_mask"], np.float32)
    n = mask.size
    k = min(n, tokens.size)
    same = (np.array_equal(tokens[:k], _as_array(sample["tokens"], np.int64)[:k])
            and np.array_equal(labels[:k], _as_array(sample["labels"], np.int64)[:k])
            and np.array_equal(loss[:k], mask[:k]))
    if not same or k == 0 or np.any(loss[k:]) or np.any(mask[k:]):
        return "altered", 0
    return ("same" if tokens.size == n else "tail"), k


def match_sequences(samples: Sequence[Mapping[str, Any]], batches: list[dict[str, Any]]) -> list[list[SequenceMatch]]:
    """Every packed sequence with real tokens, per batch, matched to its reference sample.

    A batch that names the source row of each sequence (``row_indices``, one per sequence with real
    tokens: every built-in path's batches do) is matched by row, then its content compared (see
    :class:`SequenceMatch`); a batch without them is matched by content alone (tokens, labels and
    loss mask equal).
    """
    import numpy as np

    by_row = {int(s["id"]): j for j, s in enumerate(samples) if "id" in s}
    by_key: dict[tuple, list[int]] = {}
    for j, s in enumerate(samples):
        by_key.setdefault(sequence_key(s["tokens"], s["labels"], s["loss_mask"]), []).append(j)
    out: list[list[SequenceMatch]] = []
    for n, b in enumerate(batches):
        seqs = [(start, real) for start, _, real in batch_sequences(b) if real > 0]
        rows = b.get("row_indices")
        named = rows is not None and len(rows) == len(seqs)
        tokens = _as_array(b["tokens"][0], np.int64)
        labels = _as_array(b["labels"][0], np.int64)
        loss = _as_array(b["loss_mask"][0], np.float32)
        matched = []
        for k, (start, real) in enumerate(seqs):
            sl = slice(start, start + real)
            if named:
                j = by_row.get(int(rows[k]), -1)
                status, compared = _compare(samples[j], tokens[sl], labels[sl], loss[sl]) if j >= 0 else ("unknown", 0)
            else:
                found = by_key.get(sequence_key(tokens[sl], labels[sl], loss[sl]))
                j = found[0] if found else -1
                status, compared = ("same", real) if found else ("unknown", 0)
            matched.append(SequenceMatch(n, start, real, j, compared, status))
        out.append(matched)
    return out


def exactly_once_check(pb: PathBatches, matches: list[list[SequenceMatch]]) -> Check:
    """Every sample in exactly one packed sequence, unaltered; every packed sequence some sample's."""
    seen = Counter(m.sample for ms in matches for m in ms if m.sample >= 0)
    total = sum(len(ms) for ms in matches)
    flat = [m for ms in matches for m in ms]
    missing = sum(1 for j in range(len(pb.samples)) if seen[j] == 0)
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    altered = sum(1 for m in flat if m.status == "altered")
    unknown = sum(1 for m in flat if m.status == "unknown")
    tails = [m for m in flat if m.status == "tail"]
    ok = missing == duplicated == altered == unknown == 0
    tail_note = (f"; {len(tails)} sequence(s) differ from their sample only by untrained positions at the end "
                 "(the reader ends a sequence at its last input that is not EOS, as Megatron-Bridge's does)"
                 if tails else "")
    problems = [f"{v} {k}" for k, v in (("missing", missing), ("duplicated", duplicated), ("altered", altered),
                                         ("unknown", unknown)) if v]
    return Check(
        "samples_exactly_once", ok,
        {"samples": len(pb.samples), "sequences": total, "missing": missing, "duplicated": duplicated,
         "altered": altered, "unexpected": unknown + duplicated, "unsupervised_tail_sequences": len(tails)},
        "missing = duplicated = altered = unexpected = 0",
        f"{total} packed sequences for {len(pb.samples)} samples: "
        f"{', '.join(problems) if problems else 'each sample exactly once, unaltered'} "
        f"({pb.rows_skipped} of {pb.rows_in} rows rejected by tokenization, accounted){tail_note}",
        None if ok else "a sample was " + " / ".join(
            w for w, v in (("dropped", missing), ("duplicated", duplicated), ("altered", altered),
                           ("replaced by a sequence no row gives", unknown)) if v)
        + " between tokenization and the packed batch",
    )


def loss_tokens_check(pb: PathBatches, batches: list[dict[str, Any]]) -> Check:
    expected = float(sum(float(s["loss_mask"].sum()) for s in pb.samples))
    got = float(sum(float(b["loss_mask"].sum()) for b in batches))
    ok = expected == got
    return Check("loss_tokens_preserved", ok, {"samples": expected, "batches": got}, "equal",
                 f"supervised tokens: {got:.0f} in batches, {expected:.0f} in samples",
                 None if ok else "the loss mask changed between the rows and the batches (shifted or dropped)")


def positions_check(batches: list[dict[str, Any]], pb: PathBatches | None = None,
                    matches: list[list[SequenceMatch]] | None = None) -> Check:
    import torch

    bad = []
    for n, b in enumerate(batches):
        pos = b["position_ids"][0]
        for k, (start, length, real) in enumerate(batch_sequences(b)):
            # a sequence's real tokens and its alignment gap count 0, 1, ...; width padding (no real token) is free
            if real and not torch.equal(pos[start : start + length], torch.arange(length, dtype=pos.dtype)):
                bad.append((n, k))
    samples = pb.samples if pb is not None else []
    if matches is None:
        matches = match_sequences(samples, batches)
    mrope_bad, mrope_checked = mrope_check(batches, matches, samples)
    ok = not bad and not mrope_bad
    value = {"bad_sequences": len(bad), "first": bad[:3]}
    if mrope_checked:
        value.update(mrope_sequences=mrope_checked, mrope_bad_sequences=len(mrope_bad), mrope_first=mrope_bad[:3])
    axes = " and the M-RoPE ids on all three axes" if mrope_checked else ""
    return Check("position_ids_restart", ok, value, 0,
                 f"position ids{axes} restart at 0 in every sequence" if ok
                 else f"{len(bad) + len(mrope_bad)} sequence(s) do not restart at 0{axes and ' (1-D or M-RoPE)'}",
                 None if ok else "reset position ids (and M-RoPE ids) at every cu_seqlens boundary (the THD builder "
                 "and attach_visual_inputs do)")


def compared_rows(model: Any, pb: PathBatches, batches: list[dict[str, Any]], mode: str,
                  extra_keys: tuple[str, ...] = (), matches: list[list[SequenceMatch]] | None = None,
                  mtp_source: Any = None) -> tuple[list[Any], list[Any], list[int], list[dict[str, Any]]]:
    """The packed rows (boundaries read through the ``PackedSeqParams`` field mapping, as Megatron-Core's
    attention would receive them), the unpacked rows of the samples they hold, the unpacked row of
    every packed sequence (-1: no sample), and every batch with the model's per-token inputs.

    A sequence matched with an unsupervised tail (:class:`SequenceMatch`) is compared on its sample's
    positions; the tail stays in the row (attention sees it) but belongs to no compared sequence, so
    a loss on it would count as supervised tokens outside every sequence. ``mtp_source(batch)`` (optional)
    gives each packed row the map its MTP inputs and targets are rolled by (Megatron-Core's own roll)."""
    from seqpack.training.equivalence import packed_row, unpacked_row
    from seqpack.training.packed_seq_params import batch_with_params, packed_seq_params_kwargs

    if matches is None:
        matches = match_sequences(pb.samples, batches)
    rows, match, full = [], [], []
    keep: dict[int, int] = {}  # sample -> positions compared (a sample longer than its sequence is cut there)
    for batch, matched in zip(batches, matches):
        batch = {**batch, **model.batch_inputs(batch)}  # the model's per-token inputs (images, M-RoPE ids)
        full.append(batch)
        view = batch_with_params(batch, packed_seq_params_kwargs(batch), extra_keys)
        row = packed_row(view, mode=mode, first_segment=len(match), extra_keys=extra_keys)
        if mtp_source is not None:
            row.mtp_source = mtp_source(batch)
        for k, m in enumerate(matched):
            if m.status == "tail":  # compare the common positions; a packed tail belongs to no sequence
                row.segments[m.start + m.compared : m.start + m.real] = -1
                start, length, _ = row.sequences[k]
                row.sequences[k] = (start, length, m.compared)
                keep.setdefault(m.sample, m.compared)
            match.append(m.sample if m.usable else -1)
        rows.append(row)
    used = sorted({m for m in match if m >= 0})
    slot = {j: n for n, j in enumerate(used)}
    unpacked = [unpacked_row(_cut(sample_inputs(model, pb.samples[j]), keep.get(j), extra_keys), n, extra_keys=extra_keys)
                for n, j in enumerate(used)]
    return rows, unpacked, [slot.get(m, -1) for m in match], full


def _cut(sample: Mapping[str, Any], length: int | None, keys: Sequence[str]) -> Mapping[str, Any]:
    """The sample with its per-token ``keys`` cut to ``length`` positions (None: whole)."""
    if length is None or length >= len(sample["tokens"]):
        return sample
    return {**sample, **{k: sample[k][:length] for k in ("tokens", "labels", "loss_mask", *keys)}}


def attention_budget(model: Any) -> int:
    """Query-key pairs per stack of rows: one row a stack when the MoE router drops tokens (its capacity
    counts every position of the micro-batch, so a stack's right padding would change it)."""
    from seqpack.training.equivalence import DEFAULT_BUDGET

    moe = model.config.moe
    return 1 if moe is not None and moe.capacity_factor is not None else DEFAULT_BUDGET


def equivalence_checks(model: Any, rows: list[Any], unpacked: list[Any], match: list[int], full: list[dict[str, Any]],
                 seed: int) -> tuple[Check, Check, Any]:
    """Packed against unpacked in one batched computation per side, and the leakage probe
    (:mod:`seqpack.training.equivalence`); the comparison's result comes last."""
    from seqpack.training.equivalence import compare_packed_unpacked, perturbation_leak

    budget = attention_budget(model)
    res = compare_packed_unpacked(model, rows, unpacked, match, seed=seed, budget=budget)
    ok = res.ok(TOLERANCE)
    eq = Check(
        "packed_equals_unpacked", ok,
        {"sequences": res.sequences, "unmatched": res.unmatched, "max_loss_diff": res.max_loss_diff,
         "max_grad_diff": res.max_grad_diff, "max_output_diff": res.max_output_diff,
         "max_count_diff": res.max_count_diff, "outside_loss_tokens": res.outside_loss_tokens,
         "outputs": list(res.outputs), "losses": list(res.losses)},
        TOLERANCE,
        f"{res.sequences} sequences: max |loss diff| {res.max_loss_diff:.2e}, max |grad diff| {res.max_grad_diff:.2e}, "
        f"max |output diff| {res.max_output_diff:.2e} (float64; {'/'.join(res.losses)} loss)",
        None if ok else "attention must stay inside each sequence (pass cu_seqlens / PackedSeqParams to attention) "
        "and the loss mask must stay aligned to the labels",
    )
    probe = [i for i, r in enumerate(rows) if len(r.sequences) >= 2][:4]
    if not probe:
        return eq, Check("no_cross_sequence_leakage", None, None, 0.0,
                         "no batch holds two sequences; nothing to test"), res
    # a VLM row perturbs the first sequence with images, images included (smoke_vlm.leak_inputs)
    targets, poked = zip(*(leak_inputs(model, full[i], [s[0] for s in batch_sequences(full[i])],
                                       [s[0] for s in rows[i].sequences]) for i in probe))
    leak = perturbation_leak(model, [rows[i] for i in probe], model.config.vocab_size, targets=targets,
                             perturbed_extras=poked, budget=budget)
    leak_ok = leak.max_other_change <= TOLERANCE and leak.min_own_change > 0
    return eq, Check(
        "no_cross_sequence_leakage", leak_ok,
        {"batches": leak.rows, "max_other_output_change": leak.max_other_change,
         "min_own_output_change": leak.min_own_change},
        TOLERANCE,
        f"perturbing one sequence moved other sequences' outputs by at most {leak.max_other_change:.2e}",
        None if leak_ok else "tokens attend across sequence boundaries: use THD attention with cu_seqlens",
    ), res


def max_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Largest difference over the named tensors of both (a name one side lacks counts as zeros there)."""
    def diff(k: str) -> float:
        x, y = a.get(k), b.get(k)
        return float((x if y is None else (y if x is None else x - y)).abs().max())

    return max(diff(k) for k in {*a, *b})


_CP_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
            "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv", "padding_mask", *VISUAL_KEYS)


def cp_job(model: Any, cfg: Any, batches: list[dict[str, Any]], seed: int, max_batches: int) -> dict[str, Any]:
    """The CP worker's job for one path: the batches with the most sequences (the most boundaries)."""
    ranked = sorted(range(len(batches)), key=lambda i: (-len(batch_sequences(batches[i])), i))
    return {
        "batches": [{k: batches[i][k] for k in _CP_KEYS if k in batches[i]} for i in sorted(ranked[:max_batches])],
        "model_config": model.config.to_dict(),
        "seed": seed,
        "dtype": "float64",
        "calculate_per_token_loss": cfg.model.calculate_per_token_loss,
        "average_in_collective": cfg.ddp.average_in_collective,
    }


def cp_verdict(model: Any, cp: int, job: dict[str, Any], results: list[dict[str, Any]], shared: dict[str, Any]) -> Check:
    """Compare one path's CP results with the same batches at CP=1 in this process."""
    from seqpack.training.step import reference_step

    loss_diff, grad_diff, errors = 0.0, 0.0, []
    for batch, res in zip(job["batches"], results):
        if "error" in res:
            errors.append(res["error"])
            continue
        # at CP=1 one micro-batch's per-token loss and its mean loss coincide: sum / supervised tokens
        ref = reference_step(model, batch)
        loss_diff = max(loss_diff, abs(res["objective"] - ref.loss_sum / ref.token_count))
        grad_diff = max(grad_diff, max_diff(res["grads"], {k: g / ref.token_count for k, g in ref.grads.items()}))
        seq = [s.loss_sum for s in ref.sequences]
        loss_diff = max(loss_diff, max((abs(a - b) for a, b in zip(res["sequence_sums"], seq)), default=0.0))
    if errors:
        return Check("cp_matches_cp1", False, {"errors": len(errors)}, TOLERANCE,
                     f"CP={cp} could not split the batches: {errors[0]}",
                     "pad every sequence to the alignment `seqpack align` derives (pad_seq_to_mult)",
                     "PACK-OFFLINE-PAD-MULT-TOPOLOGY")
    ok = loss_diff <= TOLERANCE and grad_diff <= TOLERANCE
    return Check("cp_matches_cp1", ok, {"cp": cp, "batches": len(job["batches"]), "max_loss_diff": loss_diff,
                                        "max_grad_diff": grad_diff, **shared}, TOLERANCE,
                 f"CP={cp} on {cp} gloo processes vs CP=1: max |loss diff| {loss_diff:.2e}, max |grad diff| {grad_diff:.2e}",
                 None if ok else "use calculate_per_token_loss=true and average_in_collective=false with CP",
                 None if ok else "CP-FT-PER-TOKEN-LOSS")

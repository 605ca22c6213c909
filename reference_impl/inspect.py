"""``inspect_packed_dataset``: integrity, statistics and topology fitness of packed Parquet.

Works on artifacts written by seqpack (settings read from the manifest) and by Megatron-Bridge
(same three columns; pass ``pack_size``/``eos_id`` or let them be inferred).

Checks per row: structure (equal lengths, segment starts from 0 and strictly increasing, within
the row, 0/1 loss mask), runtime tokens (stored length minus one per segment) within the pack
size, and *loss only where a label exists*: the stored mask is rolled, so the last stored token of
a segment has no label inside the segment and must carry 0.

Statistics: packs, segments, sequences-per-pack histogram, real / aligned / slot tokens, packing
efficiency, alignment padding share, width padding share, inferred alignment (gcd of physical
segment lengths).

Topology: given TP/CP/SP (and eval CP), the packs are usable when every physical segment is a
multiple of the derived ``pad_seq_to_mult`` and the row width is too (``pack_size`` with fixed
width, else the width rounding multiple).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from reference_impl.alignment import Alignment, Topology
from reference_impl.errors import UsageError
from reference_impl.reports import InspectReport

MAX_ISSUES = 20


class _Issues:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.count = 0

    def add(self, check: str, row: int, message: str, segment: int | None = None) -> None:
        self.count += 1
        if len(self.items) < MAX_ISSUES:
            item = {"check": check, "row": row, "message": message}
            if segment is not None:
                item["segment"] = segment
            self.items.append(item)


def _as_topology(topology: Any) -> Topology | None:
    if topology is None or isinstance(topology, Topology):
        return topology
    if isinstance(topology, dict):
        return Topology(**topology)
    if isinstance(topology, Alignment):
        return Topology(topology.tp, topology.cp, topology.sp, topology.eval_cp)
    raise UsageError(f"topology must be a Topology, a dict or an Alignment, got {type(topology).__name__}")


def inspect_packed_dataset(
    path: str | os.PathLike[str],
    topology: Topology | dict[str, Any] | Alignment | None = None,
    *,
    pack_size: int | None = None,
    eos_id: int | None = None,
    pad_to_max_length: bool | None = None,
    pad_seq_length_to_mult: int = 16,
    vision: Any = "auto",
) -> InspectReport:
    """Check and describe a packed Parquet artifact (file, glob or directory), or a prepared Energon
    dataset directory (:func:`reference_impl.packing.energon.inspect.inspect_energon_dataset`: samples,
    images and image tokens under ``vision``; ``pack_size`` is then the Energon ``seq_length``)."""
    from reference_impl.packing.energon.inspect import inspect_energon_dataset, is_energon_dataset
    from reference_impl.packing.offline import find_manifest
    from reference_impl.packing.parquet import PackedParquetReader

    topo = _as_topology(topology)
    if is_energon_dataset(path):
        return inspect_energon_dataset(path, topo, seq_length=pack_size, vision=vision)
    reader = PackedParquetReader(path)
    manifest = find_manifest(reader.paths[0])
    opts = (manifest or {}).get("options", {})
    pack_size = pack_size or opts.get("pack_size")
    if eos_id is None and manifest is not None:
        eos_id = manifest.get("tokenizer", {}).get("eos_id")
    issues = _Issues()
    seg_counts, phys_all, logical_all, row_runtime, row_ids = [], [], [], [], []
    try:
        for r, row in reader.iter_rows():
            ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
            if not _structure_ok(r, ids, mask, starts, issues):
                continue
            bounds = np.append(starts, ids.size)
            stored = np.diff(bounds)
            phys = stored - 1
            if np.any(phys < 1):
                issues.add("segment_length", r, "a segment has fewer than 2 stored tokens", int(np.flatnonzero(phys < 1)[0]))
                continue
            last = bounds[1:] - 1
            bad = np.flatnonzero(mask[last] != 0)
            if bad.size:
                issues.add("loss_without_label", r, "loss mask is 1 on a segment's last token, which has no label",
                           int(bad[0]))
            seg_counts.append(phys.size)
            phys_all.append(phys)
            row_runtime.append(int(phys.sum()))
            row_ids.append(r)
            logical_all.append(_logical(ids, bounds, eos_id))
    finally:
        reader.close()
    if pack_size is None:
        pack_size = max(row_runtime) if row_runtime else 0
    runtime = np.asarray(row_runtime, dtype=np.int64)
    for k in np.flatnonzero(runtime > pack_size).tolist():
        issues.add("over_capacity", row_ids[k], f"{int(runtime[k])} runtime tokens exceed pack_size={pack_size}")

    phys = np.concatenate(phys_all) if phys_all else np.zeros(0, np.int64)
    logical = np.concatenate(logical_all) if logical_all else np.zeros(0, np.int64)
    counts = np.asarray(seg_counts, dtype=np.int64)
    rows = len(reader)
    slots = rows * pack_size
    inferred = int(np.gcd.reduce(phys)) if phys.size else 0
    fixed = bool(opts.get("pad_to_max_length")) if pad_to_max_length is None else pad_to_max_length
    hist = {int(k): int(v) for k, v in zip(*np.unique(counts, return_counts=True))} if counts.size else {}
    stats = {
        "rows": rows,
        "segments": int(phys.size),
        "sequences_per_pack": {
            "min": int(counts.min()) if counts.size else 0,
            "mean": float(counts.mean()) if counts.size else 0.0,
            "max": int(counts.max()) if counts.size else 0,
            "histogram": hist,
        },
        "real_tokens": int(logical.sum()),
        "aligned_tokens": int(phys.sum()),
        "token_slots": int(slots),
        "packing_efficiency": float(phys.sum() / slots) if slots else 0.0,
        "real_token_efficiency": float(logical.sum() / slots) if slots else 0.0,
        "alignment_padding_share": float((phys.sum() - logical.sum()) / slots) if slots else 0.0,
        "width_padding_share": float((slots - phys.sum()) / slots) if slots else 0.0,
        "inferred_pad_seq_to_mult": inferred,
        "min_row_fill": int(runtime.min()) if runtime.size else 0,
        "max_row_fill": int(runtime.max()) if runtime.size else 0,
    }
    settings = {
        "pack_size": int(pack_size),
        "pad_seq_to_mult": opts.get("pad_seq_to_mult"),
        "eos_id": eos_id,
        "from_manifest": manifest is not None,
        "fingerprint": (manifest or {}).get("fingerprint"),
    }
    if manifest is not None:
        _check_manifest(manifest, reader.paths, rows, counts, issues)
    topo_out = None
    if topo is not None:
        topo_out = _check_topology(topo, phys, counts, int(pack_size), fixed, pad_seq_length_to_mult)
    report = InspectReport(
        path=str(path),
        files=[str(p) for p in reader.paths],
        ok=issues.count == 0,
        issues=issues.items,
        issue_count=issues.count,
        stats=stats,
        settings=settings,
        topology=topo_out,
    )
    return report.attach(manifest=manifest)


def _structure_ok(r: int, ids: np.ndarray, mask: np.ndarray, starts: np.ndarray, issues: _Issues) -> bool:
    from reference_impl.errors import ArtifactError
    from reference_impl.packing.parquet import validate_stored_row

    try:
        validate_stored_row(r, {"input_ids": ids, "loss_mask": mask, "seq_start_id": starts})
    except ArtifactError as err:
        issues.add("structure", r, err.message)
        return False
    return True


def _logical(ids: np.ndarray, bounds: np.ndarray, eos_id: int | None) -> np.ndarray:
    """Real tokens per segment: inputs up to the last non-EOS one (all inputs when EOS is unknown)."""
    out = np.empty(bounds.size - 1, dtype=np.int64)
    for k, (s, e) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        inputs = ids[s : e - 1]
        if eos_id is None:
            out[k] = inputs.size
        else:
            real = np.flatnonzero(inputs != eos_id)
            out[k] = int(real[-1]) + 1 if real.size else 0
    return out


def _check_manifest(manifest: dict[str, Any], paths: list[Any], rows: int, counts: np.ndarray, issues: _Issues) -> None:
    names = {os.path.basename(str(p)) for p in paths}
    for split, info in manifest.get("splits", {}).items():
        if info.get("file") in names and len(paths) == 1:
            if info.get("packs") != rows:
                issues.add("manifest", -1, f"manifest says {info.get('packs')} packs for {split}, file has {rows}")
            packed = info.get("accounting", {}).get("packed")
            if packed is not None and packed != int(counts.sum()):
                issues.add("manifest", -1, f"manifest says {packed} packed samples, file has {int(counts.sum())}")


def _check_topology(
    topo: Topology, phys: np.ndarray, counts: np.ndarray, pack_size: int, fixed: bool, width_mult: int
) -> dict[str, Any]:
    al = topo.alignment()
    need = al.pad_seq_to_mult
    bad = np.flatnonzero(phys % need) if phys.size else np.zeros(0, np.int64)
    examples = []
    if bad.size:
        row_of = np.repeat(np.arange(counts.size), counts)
        seg_of = np.arange(phys.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        for i in bad[:5].tolist():
            examples.append({"row": int(row_of[i]), "segment": int(seg_of[i]), "length": int(phys[i])})
    width_ok = pack_size % need == 0 if fixed else (width_mult % need == 0 and pack_size % need == 0)
    usable = bad.size == 0 and width_ok
    reasons = []
    if bad.size:
        reasons.append(
            f"{bad.size} of {phys.size} physical segments are not multiples of {need} "
            f"(repack with pad_seq_to_mult={need})"
        )
    if not width_ok:
        what = f"pack_size={pack_size}" if fixed else f"the width rounding multiple {width_mult} or pack_size={pack_size}"
        reasons.append(f"{what} is not a multiple of {need}")
    return {
        "alignment": al.to_dict(),
        "usable": usable,
        "misaligned_segments": int(bad.size),
        "examples": examples,
        "reasons": reasons,
    }

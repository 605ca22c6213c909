"""``inspect_packs``: integrity, statistics and topology fitness of packed Parquet (ours or Megatron-Bridge's).

The verb (:func:`inspect_packs`, :class:`InspectOptions`) and the library function behind it,
:func:`inspect_packed_dataset`.

Works on artifacts written by seqpack (settings read from the manifest) and by Megatron-Bridge
(same three columns; pass ``pack_size``/``eos_id`` or let them be inferred).

Checks per row: token ids within the vocabulary (never negative; below the manifest's
``vocab_size`` when it records one), structure (equal lengths, segment starts from 0 and strictly
increasing, within the row, 0/1 loss mask), runtime tokens (stored length minus one per segment)
within the pack size, and *what the format's reader trains* (:mod:`seqpack.packing.reader_loss`, per
``bridge_version``): Megatron-Bridge's packed reader cuts every segment at its last token, so a label
never crosses into the next sequence and the stored mask on that token is never read (Bridge's legacy
prompt-template packs store 1 there, quirk Q3; ``loss_on_segment_end`` counts such segments, no
issue); a trained label that is alignment padding is the ``loss_on_padding`` issue. The padding is
found by the pre-padding id (``pad_id``: the manifest's ``eod_id``, default the EOS id); without an EOS
id the check is reported as skipped.

With a seqpack manifest beside the files (a corrupt or foreign one is itself an issue): only the
files it lists are data (any other Parquet file there is a ``stray_file`` issue, not counted), a
listed file that is missing is an issue, and every split read is compared with the manifest (packs,
packed samples, size and SHA-256), as is the metadata file (present, parseable, one entry per
split with the manifest's pack size).

Statistics: packs, segments, sequences-per-pack histogram, real / aligned / slot tokens, packing
efficiency, alignment padding share, width padding share, inferred alignment (gcd of physical
segment lengths), the longest physical segment and the sum of squared physical segment lengths (the
inputs of Megatron-Bridge's ``calculate_avg_seqlen``), and ``bridge_metadata``: the entry
Megatron-Bridge's preparation records in its metadata file for these packs (its six keys, its
rounding), so a metadata file can be checked against the data it describes.

Topology: given TP/CP/SP (and eval CP), the packs are usable when every physical segment is a
multiple of what the Megatron-Bridge version *requires* (2*CP; :func:`seqpack.core.alignment.alignment_requirement`)
and the row width a multiple of the required width multiple (``pack_size`` with fixed width, else the
width rounding multiple); ``recommended_met`` says whether they also follow the recommended value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.core.alignment import Alignment, Topology
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_PACK_LEN, MAX_TOKEN_ID
from seqpack.core.glossary import glossary_line
from seqpack.core.reports import InspectReport
from seqpack.core.versions import DEFAULT_BRIDGE_TARGET, resolve_target
from seqpack.verbs.common import (
    TOKENIZER_HELP,
    TopologyOptions,
    bridge_version_option,
    pixels_option,
    tokenizer_option,
    vision_option,
)
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["INSPECT", "InspectOptions", "Topology", "inspect_packed_dataset", "inspect_packs", "render_inspection"]

if TYPE_CHECKING:
    import numpy as np

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
    pad_id: int | None = None,
    bridge_version: str | None = None,
    answer_only_loss: bool = True,
    tokenizer: Any = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> InspectReport:
    """Check and describe a packed Parquet artifact (file, glob or directory), or a prepared Energon
    dataset directory (:func:`seqpack.packing.energon.inspect.inspect_energon_dataset`: samples,
    images and image tokens under ``vision``; ``pack_size`` is then the Energon ``seq_length``)."""
    import numpy as np

    from seqpack.packing.energon.inspect import inspect_energon_dataset, is_energon_dataset
    from seqpack.packing.parquet import PackedParquetReader, resolve_parquet_paths

    topo = _as_topology(topology)
    if is_energon_dataset(path):
        return inspect_energon_dataset(path, topo, seq_length=pack_size, vision=vision, tokenizer=tokenizer,
                                       min_pixels=min_pixels, max_pixels=max_pixels)
    if tokenizer is not None:
        raise UsageError("packed Parquet holds token ids already: --tokenizer applies to Energon datasets only",
                         field="tokenizer")
    issues = _Issues()
    paths = resolve_parquet_paths(path)
    manifest = _manifest(paths[0], issues)
    if manifest is not None:
        paths = _data_files(path, paths, manifest, issues)
    reader = PackedParquetReader(paths)
    opts = (manifest or {}).get("options", {})
    pack_size = pack_size or opts.get("pack_size")
    tok = (manifest or {}).get("tokenizer") or {}
    if eos_id is None and manifest is not None:
        eos_id = tok.get("eos_id")
    vocab = tok.get("vocab_size") if isinstance(tok.get("vocab_size"), int) else None
    if pad_id is None and manifest is not None and isinstance(tok.get("eod_id"), int):
        pad_id = tok.get("eod_id")
    rule = {"eos_id": eos_id, "pad_id": pad_id, "answer_only_loss": bool(answer_only_loss),
            "bridge_version": resolve_target(bridge_version)}
    scan = _scan_rows(reader, vocab, eos_id, issues, rule)
    row_runtime, row_ids, per_file, shape = scan.row_runtime, scan.row_ids, scan.per_file, scan.shape
    if pack_size is None:
        pack_size = max(row_runtime) if row_runtime else 0
    runtime = np.asarray(row_runtime, dtype=np.int64)
    for k in np.flatnonzero(runtime > pack_size).tolist():
        issues.add("over_capacity", row_ids[k], f"{int(runtime[k])} runtime tokens exceed pack_size={pack_size}")

    stats, phys, counts = _statistics(scan, runtime, len(reader), int(pack_size))
    stats["reader"] = {
        **rule, "trained_labels": scan.trained if eos_id is not None else None,
        "loss_on_padding": scan.loss_on_padding if eos_id is not None else None,
        "padding_check": "ran" if eos_id is not None else "skipped: the EOS id is unknown (pass eos_id)",
    }
    by_file = {str(info.get("file")): split for split, info in (manifest or {}).get("splits", {}).items()}
    stats["splits"] = _split_statistics(scan, [by_file.get(Path(p).name, Path(p).name) for p in reader.paths],
                                        int(pack_size))
    fixed = bool(opts.get("pad_to_max_length")) if pad_to_max_length is None else pad_to_max_length
    settings = {
        "pack_size": int(pack_size),
        "pad_seq_to_mult": opts.get("pad_seq_to_mult"),
        "eos_id": eos_id,
        "vocab_size": vocab,
        "from_manifest": manifest is not None,
        "fingerprint": (manifest or {}).get("fingerprint"),
    }
    if manifest is not None:
        _check_manifest(manifest, reader.paths, per_file, shape, issues)
    else:
        _check_foreign_metadata(reader.paths, int(pack_size), shape, issues)
    topo_out = None
    if topo is not None:
        topo_out = _check_topology(topo, phys, counts, int(pack_size), fixed, pad_seq_length_to_mult,
                                   rule["bridge_version"])
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


@dataclass
class _Scan:
    """What one pass over the rows collects: per-row fill and segments, per-file shape, token range."""

    files: int
    seg_counts: list[int] = field(default_factory=list)
    phys_all: list[Any] = field(default_factory=list)
    logical_all: list[Any] = field(default_factory=list)
    row_runtime: list[int] = field(default_factory=list)
    row_ids: list[int] = field(default_factory=list)
    row_files: list[int] = field(default_factory=list)
    row_supervised: list[int] = field(default_factory=list)
    loss_on_end: int = 0
    trained: int = 0
    loss_on_padding: int = 0
    lowest: int | None = None
    highest: int | None = None
    per_file: Any = None
    shape: dict[str, Any] = field(default_factory=dict)


def _reader_check(r: int, ids: Any, mask: Any, bounds: Any, rule: dict[str, Any], scan: _Scan, issues: _Issues) -> None:
    """The labels the format's reader trains in row ``r`` (:mod:`seqpack.packing.reader_loss`): a trained label
    that is alignment padding is an issue; a stored 1 on a segment's last token (never read) is only counted."""
    import numpy as np

    from seqpack.packing.reader_loss import reader_loss

    if rule["eos_id"] is None:  # without the EOS id the reader's rule cannot be applied: skipped, not passed
        scan.loss_on_end += int(np.count_nonzero(mask[bounds[1:] - 1]))
        return
    got = reader_loss(ids, mask, bounds, eos_id=rule["eos_id"], pad_id=rule["pad_id"],
                      bridge_version=rule["bridge_version"], answer_only_loss=rule["answer_only_loss"])
    scan.loss_on_end += got.mask_on_end
    scan.trained += got.trained
    scan.loss_on_padding += got.on_padding
    if got.on_padding:
        issues.add("loss_on_padding", r, f"{got.on_padding} trained label(s) are alignment padding (pad id "
                   f"{rule['pad_id'] if rule['pad_id'] is not None else rule['eos_id']}) under megatron-bridge "
                   f"{rule['bridge_version']}'s packed reader", got.first_bad)


def _scan_rows(reader: Any, vocab: int | None, eos_id: int | None, issues: _Issues,
               reader_rule: dict[str, Any] | None = None) -> _Scan:
    """Read every row once: token range, structure, segments, what the reader trains, fill."""
    import numpy as np

    reader_rule = reader_rule or {"eos_id": eos_id, "pad_id": None, "bridge_version": DEFAULT_BRIDGE_TARGET,
                                  "answer_only_loss": True}
    scan = _Scan(files=len(reader.paths))
    seg_counts, phys_all, logical_all, row_runtime, row_ids = (scan.seg_counts, scan.phys_all, scan.logical_all,
                                                               scan.row_runtime, scan.row_ids)
    scan.per_file = per_file = np.zeros((len(reader.paths), 2), dtype=np.int64)  # rows and segments per file
    # per file: most segments in a row, longest physical segment, least-filled row (Bridge's metadata keys)
    scan.shape = shape = {"max_samples_per_bin": np.zeros(len(reader.paths), np.int64),
                          "dataset_max_seqlen": np.zeros(len(reader.paths), np.int64),
                          "min_packed_seqlen": np.full(len(reader.paths), np.iinfo(np.int64).max, np.int64)}
    lowest, highest = None, None
    try:
        for r, row in reader.iter_rows():
            ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
            per_file[reader.locate(r)[0], 0] += 1
            if ids.size:
                lo, hi = int(ids.min()), int(ids.max())
                lowest = lo if lowest is None else min(lowest, lo)
                highest = hi if highest is None else max(highest, hi)
                if lo < 0 or (vocab is not None and hi >= vocab):
                    bad = lo if lo < 0 else hi
                    issues.add("token_id", r, f"token id {bad} is outside the vocabulary "
                               f"(0..{vocab - 1 if vocab is not None else 'vocab_size-1'})")
            if not _structure_ok(r, ids, mask, starts, issues):
                continue
            bounds = np.append(starts, ids.size)
            stored = np.diff(bounds)
            phys = stored - 1
            if np.any(phys < 1):
                issues.add("segment_length", r, "a segment has fewer than 2 stored tokens", int(np.flatnonzero(phys < 1)[0]))
                continue
            _reader_check(r, ids, mask, bounds, reader_rule, scan, issues)
            f = reader.locate(r)[0]
            per_file[f, 1] += phys.size
            shape["max_samples_per_bin"][f] = max(shape["max_samples_per_bin"][f], phys.size)
            shape["dataset_max_seqlen"][f] = max(shape["dataset_max_seqlen"][f], int(phys.max()))
            shape["min_packed_seqlen"][f] = min(shape["min_packed_seqlen"][f], int(phys.sum()))
            seg_counts.append(phys.size)
            phys_all.append(phys)
            row_runtime.append(int(phys.sum()))
            row_ids.append(r)
            scan.row_files.append(f)
            last = bounds[1:] - 1  # a segment's last token: no label follows it
            scan.row_supervised.append(int(mask.sum()) - int(mask[last].sum()))  # a label follows each of them
            logical_all.append(_logical(ids, bounds, eos_id))
    finally:
        reader.close()
    scan.lowest, scan.highest = lowest, highest
    return scan


def _statistics(scan: _Scan, runtime: Any, rows: int, pack_size: int) -> tuple[dict[str, Any], Any, Any]:
    """The report's statistics of a scan (and the physical segment lengths and per-row counts)."""
    import numpy as np

    phys_all, logical_all, seg_counts = scan.phys_all, scan.logical_all, scan.seg_counts
    lowest, highest, loss_on_end = scan.lowest, scan.highest, scan.loss_on_end
    phys = np.concatenate(phys_all) if phys_all else np.zeros(0, np.int64)
    logical = np.concatenate(logical_all) if logical_all else np.zeros(0, np.int64)
    counts = np.asarray(seg_counts, dtype=np.int64)
    slots = rows * pack_size
    inferred = int(np.gcd.reduce(phys)) if phys.size else 0
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
        "token_id_range": [lowest, highest],
        "loss_on_segment_end": loss_on_end,
        "segment_length": {"max": int(phys.max()) if phys.size else 0,
                           "sum_of_squares": int(np.square(phys).sum()) if phys.size else 0},
        "bridge_metadata": _bridge_metadata(runtime, counts, pack_size, phys),
        "supervised_tokens": int(sum(scan.row_supervised)),
        "supervised_share": float(sum(scan.row_supervised) / logical.sum()) if logical.sum() else 0.0,
    }
    return stats, phys, counts


def _split_statistics(scan: _Scan, names: list[str], pack_size: int) -> dict[str, dict[str, Any]]:
    """Per split (the manifest's name of each file; the file name without one): packs, sequences, tokens, the
    efficiencies of the glossary, the supervised share and the split's own Megatron-Bridge metadata."""
    import numpy as np

    files = np.asarray(scan.row_files, dtype=np.int64)
    out: dict[str, dict[str, Any]] = {}
    for f, name in enumerate(names):
        rows = np.flatnonzero(files == f)
        if not rows.size:
            continue
        phys = [scan.phys_all[i] for i in rows]
        real = int(sum(int(scan.logical_all[i].sum()) for i in rows))
        aligned = int(sum(int(p.sum()) for p in phys))
        slots = int(rows.size) * pack_size
        supervised = int(sum(scan.row_supervised[i] for i in rows))
        counts = np.asarray([scan.seg_counts[i] for i in rows], dtype=np.int64)
        out[name] = {
            "packs": int(rows.size), "sequences": int(counts.sum()), "real_tokens": real, "aligned_tokens": aligned,
            "token_slots": slots, "packing_efficiency": aligned / slots if slots else 0.0,
            "token_efficiency": real / slots if slots else 0.0, "supervised_tokens": supervised,
            "supervised_share": supervised / real if real else 0.0,
            "bridge_metadata": _bridge_metadata(np.asarray([scan.row_runtime[i] for i in rows], dtype=np.int64),
                                                counts, pack_size, np.concatenate(phys)),
        }
    return out


def _bridge_metadata(row_fill: np.ndarray, counts: np.ndarray, pack_size: int, phys: np.ndarray) -> dict[str, Any] | None:
    """Megatron-Bridge's metadata entry for these packs (None when there is no row or no pack size)."""
    from seqpack.packing.offline.bridge_compat import bridge_pack_metadata

    if not row_fill.size or pack_size < 1:
        return None
    return bridge_pack_metadata(row_fill, counts, pack_size, int(phys.max()))


def _manifest(first: Any, issues: _Issues) -> dict[str, Any] | None:
    """The seqpack manifest beside the files; a corrupt or foreign one is an issue (and ignored)."""
    from seqpack.core.errors import ArtifactError
    from seqpack.packing.offline.prepare import find_manifest

    try:
        return find_manifest(first)
    except ArtifactError as err:
        issues.add("manifest", -1, f"{err.file}: {err.message}")
        return None


def _data_files(spec: Any, paths: list[Any], manifest: dict[str, Any], issues: _Issues) -> list[Any]:
    """The files a manifest lists, out of what ``spec`` names; a listed file that is absent, or a Parquet
    file beside them that the manifest does not list (stray, not counted as data), is an issue."""
    listed = {str(info.get("file")): split for split, info in manifest.get("splits", {}).items()
              if isinstance(info, dict)}
    directory = os.path.dirname(str(paths[0]))
    keep = [p for p in paths if os.path.basename(str(p)) in listed]
    for p in paths:
        if os.path.basename(str(p)) not in listed:
            issues.add("stray_file", -1, f"{p}: not listed in the manifest; not counted as data")
    whole = os.path.isdir(os.fspath(spec))
    for name, split in listed.items():
        if not os.path.exists(os.path.join(directory, name)) and (whole or not keep):
            issues.add("missing_file", -1, f"{split} split: {name} is listed in the manifest but missing")
    if not keep:
        from seqpack.core.errors import ArtifactError

        raise ArtifactError("none of the files the manifest lists is there", file=directory)
    return keep


def _check_manifest(
    manifest: dict[str, Any], paths: list[Any], per_file: np.ndarray, shape: dict[str, np.ndarray], issues: _Issues
) -> None:
    """Every split whose file was read: row and sample counts, the accounting, size and SHA-256; the metadata
    file against the packs."""
    from seqpack.io.ownership import file_record

    by_name = {os.path.basename(str(p)): k for k, p in enumerate(paths)}
    records = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for split, info in manifest.get("splits", {}).items():
        k = by_name.get(str(info.get("file")))
        if k is None:
            continue
        rows, segments = (int(x) for x in per_file[k])
        if info.get("packs") != rows:
            issues.add("manifest", -1, f"manifest says {info.get('packs')} packs for {split}, file has {rows}")
        acc = info.get("accounting") if isinstance(info.get("accounting"), dict) else {}
        packed = acc.get("packed")
        if packed is not None and packed != segments:
            issues.add("manifest", -1, f"manifest says {packed} packed samples for {split}, file has {segments}")
        elif acc and acc.get("rows_in") != (packed or 0) + (acc.get("skipped_total") or 0):
            issues.add("manifest", -1, f"{split}: the manifest's accounting does not add up (rows_in "
                       f"{acc.get('rows_in')} != packed {packed} + skipped {acc.get('skipped_total')})")
        want = records.get(str(info.get("file")))
        if want is not None and file_record(paths[k]) != {"size": want.get("size"), "sha256": want.get("sha256")}:
            issues.add("manifest", -1, f"{split} split: {info.get('file')} differs from the size and SHA-256 the "
                       "manifest recorded")
    measured = {split: {key: int(values[by_name[str(info.get("file"))]]) for key, values in shape.items()}
                for split, info in manifest.get("splits", {}).items() if str(info.get("file")) in by_name}
    _check_metadata(manifest, os.path.dirname(str(paths[0])), issues, measured)


def _check_metadata(
    manifest: dict[str, Any], directory: str, issues: _Issues, measured: dict[str, dict[str, int]] | None = None
) -> None:
    """The metadata file: one entry per split with the manifest's pack size, and (``measured``: per split, what
    the packs hold) ``max_samples_per_bin``, ``dataset_max_seqlen`` and ``min_packed_seqlen`` as the packs say:
    Megatron-Bridge sizes its buffers from them, so an understated value breaks training."""
    from seqpack.core.errors import ArtifactError
    from seqpack.packing.parquet import read_metadata

    name = manifest.get("metadata_file")
    if not name:
        issues.add("metadata", -1, "the manifest names no metadata file")
        return
    try:
        entries = read_metadata(os.path.join(directory, str(name)))
    except ArtifactError as err:
        issues.add("metadata", -1, f"{name}: {err.message}")
        return
    splits = manifest.get("splits", {})
    if len(entries) != len(splits):
        issues.add("metadata", -1, f"{name} has {len(entries)} entries for {len(splits)} splits")
    pack_size = manifest.get("options", {}).get("pack_size")
    for k, (entry, split) in enumerate(zip(entries, list(splits) + [None] * len(entries))):
        if entry.get("pack_size") != pack_size:
            issues.add("metadata", -1, f"{name} entry {k}: pack_size {entry.get('pack_size')!r}, the manifest says "
                       f"{pack_size}")
        for key, actual in (measured or {}).get(split, {}).items():
            stated = entry.get(key)
            if stated != actual:
                what = "understates" if isinstance(stated, (int, float)) and stated < actual else "misstates"
                issues.add("metadata", -1, f"{name} entry {k} ({split}) {what} {key}: {stated!r}, the packs hold "
                           f"{actual}" + (" (Megatron-Bridge sizes buffers from it)" if what == "understates" else ""))


def _check_foreign_metadata(paths: list[Any], pack_size: int, shape: dict[str, np.ndarray], issues: _Issues) -> None:
    """Packs without a seqpack manifest (written by Megatron-Bridge or by hand): the metadata file beside them
    (``<pack_size>_metadata.jsonl``, or the only ``*_metadata.jsonl`` there) against what the packs hold. Bridge
    sizes its buffers from the largest entry, so an entry set below the packs breaks training."""
    import glob

    from seqpack.core.errors import ArtifactError
    from seqpack.packing.parquet import read_metadata

    directory = os.path.dirname(str(paths[0]))
    named = os.path.join(directory, f"{pack_size}_metadata.jsonl")
    found = [named] if os.path.exists(named) else glob.glob(os.path.join(glob.escape(directory), "*_metadata.jsonl"))
    if len(found) != 1:
        return  # none, or several pack sizes side by side: nothing says which one these packs follow
    name = os.path.basename(found[0])
    try:
        entries = read_metadata(found[0])
    except ArtifactError as err:
        issues.add("metadata", -1, f"{name}: {err.message}")
        return
    actual = {key: int(values.max()) for key, values in shape.items() if key != "min_packed_seqlen" and values.size}
    for key, held in actual.items():
        stated = [e.get(key) for e in entries if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool)]
        if not stated:
            issues.add("metadata", -1, f"{name} states no {key} (Megatron-Bridge sizes buffers from it)")
        elif max(stated) < held:
            issues.add("metadata", -1, f"{name} understates {key}: {max(stated)!r}, the packs hold {held} "
                       "(Megatron-Bridge sizes buffers from it)")


def _structure_ok(r: int, ids: np.ndarray, mask: np.ndarray, starts: np.ndarray, issues: _Issues) -> bool:
    from seqpack.core.errors import ArtifactError
    from seqpack.packing.parquet import validate_stored_row

    try:
        validate_stored_row(r, {"input_ids": ids, "loss_mask": mask, "seq_start_id": starts})
    except ArtifactError as err:
        issues.add("structure", r, err.message)
        return False
    return True


def _logical(ids: np.ndarray, bounds: np.ndarray, eos_id: int | None) -> np.ndarray:
    """Real tokens per segment: inputs up to the last non-EOS one (all inputs when EOS is unknown)."""
    import numpy as np
    out = np.empty(bounds.size - 1, dtype=np.int64)
    for k, (s, e) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        inputs = ids[s : e - 1]
        if eos_id is None:
            out[k] = inputs.size
        else:
            real = np.flatnonzero(inputs != eos_id)
            out[k] = int(real[-1]) + 1 if real.size else 0
    return out


def _check_topology(
    topo: Topology, phys: np.ndarray, counts: np.ndarray, pack_size: int, fixed: bool, width_mult: int,
    bridge_version: str | None = None,
) -> dict[str, Any]:
    """Usable = every physical segment a multiple of what the release *requires* (2*CP over train/eval CP) and
    the row width a multiple of the required width multiple (CP*TP under SP too); ``recommended_met`` says
    whether the segments also follow the skill's recommended multiple
    (:func:`seqpack.core.alignment.alignment_requirement`, offline path)."""
    import numpy as np

    from seqpack.core.alignment import alignment_requirement

    req = alignment_requirement("offline", topo.tp, topo.cp, topo.sp, topo.eval_cp, bridge_version=bridge_version)
    need, width_need = int(req.required), int(req.required_width)
    bad = np.flatnonzero(phys % need) if phys.size else np.zeros(0, np.int64)
    examples = []
    if bad.size:
        row_of = np.repeat(np.arange(counts.size), counts)
        seg_of = np.arange(phys.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        for i in bad[:5].tolist():
            examples.append({"row": int(row_of[i]), "segment": int(seg_of[i]), "length": int(phys[i])})
    width_ok = pack_size % width_need == 0 if fixed else (width_mult % width_need == 0 and pack_size % width_need == 0)
    usable = bad.size == 0 and width_ok
    reasons = []
    if bad.size:
        reasons.append(
            f"{bad.size} of {phys.size} physical segments are not multiples of {need}, which megatron-bridge "
            f"{req.bridge_version} needs (repack with pad_seq_to_mult={req.recommended}, the recommended value)"
        )
    if not width_ok:
        what = f"pack_size={pack_size}" if fixed else f"the width rounding multiple {width_mult} or pack_size={pack_size}"
        reasons.append(f"{what} is not a multiple of {width_need}")
    off = int(np.count_nonzero(phys % int(req.recommended))) if phys.size else 0
    return {
        "alignment": topo.alignment().to_dict(),
        "requirement": req.to_dict(),
        "required": need,
        "required_width": width_need,
        "recommended": int(req.recommended),
        "usable": usable,
        "recommended_met": usable and off == 0,
        "misaligned_segments": int(bad.size),
        "segments_off_recommended": off,
        "examples": examples,
        "reasons": reasons,
    }


@verb_options
class InspectOptions(TopologyOptions):
    """The artifact (file, glob or directory), an optional topology to check it against, and what a
    foreign artifact cannot tell (``pack_size``, ``eos_id``); ``fixed_width``: the run pads rows to
    ``pack_size`` (None: as the manifest says). A prepared Energon dataset directory is inspected
    too: ``vision`` (``auto``: ``qwen2_vl`` when it holds images) measures its image tokens and
    ``pack_size`` is the ``seq_length`` every sample must fit."""

    path: str | os.PathLike[str] = option(
        help="packed Parquet file, glob or directory (MCP: no glob), or a prepared Energon dataset directory",
        positional=True, path="artifact")
    pack_size: int | None = option(None, help="needed for artifacts without a seqpack manifest; for an Energon "
                                   "dataset: the seq_length every sample must fit", minimum=1, maximum=MAX_PACK_LEN)
    eos_id: int | None = option(None, help="EOS id (real-token counts of foreign packs)", minimum=0,
                                maximum=MAX_TOKEN_ID)
    fixed_width: bool | None = option(None, help="the run pads rows to pack_size (pad_to_max_length)")
    vision: str = vision_option("Energon datasets: the vision preset that counts image tokens (auto: qwen2_vl when "
                                "the dataset holds images)")
    pad_id: int | None = option(None, help="the id samples were pre-padded with (Bridge's tokenizer eod; default: "
                                "the manifest's, else the EOS id)", minimum=0, maximum=MAX_TOKEN_ID)
    bridge_version: str = bridge_version_option("whose packed reader trains the packs")
    answer_only_loss: bool = option(True, help="the reader trains the stored loss mask (false: every label whose "
                                    "input is not EOS)", flag="--no-answer-only-loss", inverse=True,
                                    cli_help="the reader trains every label whose input is not EOS (Bridge's "
                                    "answer_only_loss=False)")
    tokenizer: Any = tokenizer_option(TOKENIZER_HELP + "; Energon datasets: counts their text tokens (packed Parquet "
                                      "holds token ids already)")
    min_pixels: int | None = pixels_option("min")
    max_pixels: int | None = pixels_option("max")


def inspect_packs(options: InspectOptions) -> InspectReport:
    """Inspect the packs (:func:`seqpack.verbs.inspection.inspect_packed_dataset`); the topology check
    runs when any topology field is set."""
    check_options(options)
    return inspect_packed_dataset(
        options.path,
        options.topology if options.topology_given else None,
        pack_size=options.pack_size,
        eos_id=options.eos_id,
        pad_to_max_length=options.fixed_width,
        vision=options.vision,
        pad_id=options.pad_id,
        bridge_version=options.bridge_version,
        answer_only_loss=options.answer_only_loss,
        tokenizer=options.tokenizer,
        min_pixels=options.min_pixels,
        max_pixels=options.max_pixels,
    )


def _inspect_failed(report: InspectReport, options: InspectOptions) -> int:
    """1 when integrity issues were found or the topology does not fit, else 0."""
    return 1 if not report.ok or (report.topology is not None and not report.topology["usable"]) else 0


def render_inspection(report: InspectReport, options: InspectOptions) -> str:
    """The CLI's text: integrity, statistics, issues, the topology verdict and the result."""
    failed = _inspect_failed(report, options)
    s = report.stats
    if s.get("kind") == "energon":
        return _render_energon(report, failed)
    spp = s["sequences_per_pack"]
    out = [f"integrity {'OK' if report.ok else 'ISSUES'}: {s['rows']} packs, {s['segments']} sequences in "
           f"{len(report.files)} file(s)",
           f"  packing efficiency {s['packing_efficiency']:.2%}, token efficiency {s['real_token_efficiency']:.2%}, "
           f"alignment padding {s['alignment_padding_share']:.2%}, width padding {s['width_padding_share']:.2%}; "
           f"supervised tokens {s['supervised_tokens']} ({s['supervised_share']:.1%} of real tokens)",
           f"  sequences per pack: min {spp['min']}, mean {spp['mean']:.1f}, max {spp['max']}; "
           f"inferred pad_seq_to_mult {s['inferred_pad_seq_to_mult']}; pack_size {report.settings['pack_size']}"]
    rd = s["reader"]
    trained = "" if rd["trained_labels"] is None else f"{rd['trained_labels']} trained labels, "
    out.append(f"  megatron-bridge {rd['bridge_version']}'s packed reader: {trained}"
               f"{s['loss_on_segment_end']} segment(s) store loss on their last token (never read); "
               f"padding check {rd['padding_check']}")
    for split, v in s.get("splits", {}).items():
        if len(s.get("splits", {})) > 1:
            meta = v["bridge_metadata"] or {}
            out.append(f"  {split}: {v['packs']} packs, {v['sequences']} sequences, packing efficiency "
                       f"{v['packing_efficiency']:.2%}, token efficiency {v['token_efficiency']:.2%}, supervised "
                       f"{v['supervised_share']:.1%}; min_packed_seqlen {meta.get('min_packed_seqlen')}, "
                       f"max_samples_per_bin {meta.get('max_samples_per_bin')}")
    out.append("  " + glossary_line("packing efficiency", "token efficiency", "supervised share"))
    out += _issue_lines(report, lambda issue: f" row {issue['row']}" if issue["row"] >= 0 else "")
    if report.topology is not None:
        t = report.topology
        al = t["alignment"]
        met = "met" if t["recommended_met"] else "not met"
        out.append(f"  topology TP{al['tp']}/CP{al['cp']}/{'SP' if al['sp'] else 'no SP'}: "
                   f"{'usable' if t['usable'] else 'NOT usable'} (megatron-bridge {t['requirement']['bridge_version']} "
                   f"requires multiples of {t['required']}, width of {t['required_width']}; recommended "
                   f"{t['recommended']}: {met})")
        out += [f"    - {reason}" for reason in t["reasons"]]
    out.append("RESULT: " + ("usable" if not failed else "NOT usable" if report.ok else "integrity issues"))
    return "\n".join(out)


def _issue_lines(report: InspectReport, where: Any) -> list[str]:
    out = [f"  issue [{issue['check']}]{where(issue)}: {issue['message']}" for issue in report.issues]
    if report.issue_count > len(report.issues):
        out.append(f"  ... {report.issue_count - len(report.issues)} more issue(s)")
    return out


def _render_energon(report: InspectReport, failed: int) -> str:
    s, st = report.stats, report.settings
    counts = ", ".join(f"{split} {n}" for split, n in s["samples"].items())
    ln = s["length"]
    out = [f"Energon dataset {'OK' if report.ok else 'ISSUES'}: {sum(s['samples'].values())} samples ({counts}) in "
           f"{len(report.files)} shard(s), schema {st['schema']}, vision {st['vision'] or 'none'}",
           f"  {s['rows_with_visuals']} samples carry {s['images']} image(s) and {s['videos']} video(s): "
           f"{s['vision_tokens']} image tokens, {s['text_tokens']} text tokens ({s['vision_token_share']:.1%} image)",
           f"  sample length min {ln['min']} / p50 {ln['p50']} / max {ln['max']} tokens; aligned to "
           f"{st['pad_seq_to_mult']}: {s['aligned_tokens']} tokens"]
    out += _issue_lines(report, lambda issue: f" {issue['sample']}")
    if report.topology is not None:
        t = report.topology
        out.append(f"  topology: {'usable' if t['usable'] else 'NOT usable'} (needs multiples of "
                   f"{t['required']}: Bridge derives and pads to it on the in-batch path)")
        out += [f"    - {reason}" for reason in t["reasons"]]
    out.append("RESULT: " + ("usable" if not failed else "NOT usable"))
    return "\n".join(out)


INSPECT = Verb(
    name="inspect_packs", options=InspectOptions, function=inspect_packs, render=render_inspection,
    exit_code=_inspect_failed,
    help="check a packed Parquet artifact (ours or Megatron-Bridge's) or a prepared Energon dataset, and whether "
         "it fits a TP/CP/SP topology",
    tools=(Tool(
        "inspect_packed_dataset", job=True,
        title="Inspect packed Parquet or a prepared Energon dataset (integrity, stats, topology fit)",
        description="""Check a packed artifact (seqpack's or Megatron-Bridge's) and, given tp/cp/sp, whether it fits.

Reports integrity issues (segment structure, labels the packed reader trains that are
alignment padding (loss_on_padding: bridge_version picks the reader; pad_id the pre-padding
id), rows over capacity, manifest mismatches), statistics (efficiency, padding shares,
sequences per pack, inferred alignment; loss_on_segment_end counts a stored mask of 1 on a
segment's last token, which the reader never reads), and with a topology whether every
physical segment is a multiple of what that Megatron-Bridge version requires
(topology.usable, required, required_width, reasons) and of the recommended value
(topology.recommended_met). For a prepared
Energon dataset: shard checksums, samples, images, videos and image tokens, sample lengths,
and with pack_size (its seq_length) the samples that would not fit.""",
    ),),
)

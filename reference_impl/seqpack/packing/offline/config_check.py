"""A training config against the offline packs it will read (``seqpack validate CONFIG --packs DIR``).

The config's rules say whether the config is consistent in itself; this says whether it fits the packs on
disk: the pack size against ``offline_packing_specs.packed_sequence_size`` and ``seq_length``, the packs'
per-sequence alignment against the config's and against what the topology needs, the metadata file
Megatron-Bridge's reader wants, and how many optimizer steps one epoch of the packs gives at the config's
global batch size (each pack is one micro-batch sample, micro-batch size 1), with the ``train_iters``
that gives ``train.num_epochs`` epochs (and how many epochs a ``train_iters`` already in the config runs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from seqpack.core.alignment import derive_alignment
from seqpack.core.results import Result

__all__ = ["PacksCheck", "check_packs"]


@dataclass(frozen=True)
class PacksCheck(Result):
    """What :func:`check_packs` found: ``findings`` (``{"id", "severity", "message", "fix"}``; ``ok`` is false
    when one is an error), the packs per split, their pack size, alignment and tokenizer, and the steps."""

    pack_dir: str
    ok: bool
    findings: list[dict[str, Any]]
    packs: dict[str, int]
    pack_size: int | None
    pad_seq_to_mult: int | None
    tokenizer: str | None
    global_batch_size: int
    steps_per_epoch: float | None
    full_steps_per_epoch: int | None
    num_epochs: int
    suggested_train_iters: int | None
    train_iters: int | None = None
    epochs_of_train_iters: float | None = None
    notes: list[str] = field(default_factory=list)


def _finding(check_id: str, severity: str, message: str, fix: str) -> dict[str, Any]:
    return {"id": check_id, "severity": severity, "message": message, "fix": fix}


def _manifest_facts(pack_dir: Path) -> tuple[dict[str, Any] | None, dict[str, int], Path | None]:
    from seqpack.packing.offline.artifact import MANIFEST_NAME, read_manifest
    from seqpack.packing.parquet import PackedParquetReader

    manifest = read_manifest(pack_dir / MANIFEST_NAME) if (pack_dir / MANIFEST_NAME).is_file() else None
    packs: dict[str, int] = {}
    if manifest is not None:
        packs = {split: int(info["packs"]) for split, info in manifest["splits"].items()}
        meta = pack_dir / manifest["metadata_file"]
        return manifest, packs, meta if meta.is_file() else None
    for path in sorted(pack_dir.glob("*.idx.parquet")):  # packs another tool wrote: count the rows
        reader = PackedParquetReader(path)
        try:
            packs[path.name.split("_")[0]] = len(reader)
        finally:
            reader.close()
    meta = next(iter(sorted(pack_dir.glob("*_metadata.jsonl"))), None)
    return None, packs, meta


def check_packs(cfg: Any, pack_dir: str | os.PathLike[str], *, given: Mapping[str, Any] | None = None) -> PacksCheck:
    """Check the config ``cfg`` (a :class:`~seqpack.config.TrainingConfig`) against the packs in ``pack_dir``
    (a pack folder, or an output root holding one). ``given``: Megatron-Bridge fields of the config that
    seqpack's model does not hold (``train.train_iters``, ``dataset.dataset_root``), as the loader reported them."""
    from seqpack.packing.parquet import resolve_parquet_paths

    given = dict(given or {})
    folder = resolve_parquet_paths(pack_dir)[0].parent
    manifest, packs, metadata = _manifest_facts(folder)
    options = (manifest or {}).get("options", {})
    pack_size, m = options.get("pack_size"), options.get("pad_seq_to_mult")
    findings: list[dict[str, Any]] = []
    notes: list[str] = []
    specs = cfg.dataset.offline_packing_specs
    want = specs.packed_sequence_size if specs is not None else None
    if pack_size is not None and want and want != pack_size:
        findings.append(_finding("PACKS-PACK-SIZE", "error",
                                 f"the packs are {pack_size} tokens wide but offline_packing_specs.packed_sequence_size="
                                 f"{want}", f"set dataset.offline_packing_specs.packed_sequence_size={pack_size}, or "
                                 f"repack with --pack-size {want}"))
    if pack_size is not None and cfg.seq_length and pack_size > cfg.seq_length:
        findings.append(_finding("PACKS-SEQ-LENGTH", "error",
                                 f"the packs are {pack_size} tokens wide, longer than seq_length={cfg.seq_length}",
                                 f"set model.seq_length and dataset.seq_length to {pack_size}, or repack"))
    if m is not None:
        findings += _alignment_findings(cfg, int(m))
    if metadata is None:
        findings.append(_finding("PACKS-METADATA", "error", f"no pack metadata file in {folder}",
                                 "keep <pack_size>_metadata.jsonl next to the Parquet files (Megatron-Bridge reads it)"))
    if manifest is None:
        notes.append("no seqpack manifest: the packs' alignment and tokenizer are not recorded, only counted")
    gbs = int(cfg.train.global_batch_size)
    training = packs.get("training")
    steps = full = suggested = None
    epochs = int(getattr(cfg.train, "num_epochs", None) or 1)
    if training is not None:
        steps, full = training / gbs, training // gbs
        suggested = full * epochs
        if full == 0:
            findings.append(_finding("PACKS-TOO-FEW", "error", f"{training} training pack(s) fill no global batch of {gbs}",
                                     "lower train.global_batch_size, or pack more data"))
    iters = given.get("train.train_iters")
    ran = None
    if isinstance(iters, int) and not isinstance(iters, bool) and training:
        ran = iters * gbs / training
        notes.append(f"train.train_iters={iters} at GBS {gbs} runs {ran:.2f} epoch(s) of {training} packs"
                     + (f" ({epochs} epoch(s): train_iters={suggested})" if suggested else ""))
    root = given.get("dataset.dataset_root")
    if isinstance(root, str) and Path(root).resolve() not in (folder.resolve(), folder.parent.resolve()):
        findings.append(_finding("PACKS-DATASET-ROOT", "warning",
                                 f"the config reads packs from dataset.dataset_root={root}, not from {folder}",
                                 f"set dataset.dataset_root={folder}, or check the packs it names"))
    return PacksCheck(
        pack_dir=str(folder), ok=not any(f["severity"] == "error" for f in findings), findings=findings, packs=packs,
        pack_size=pack_size, pad_seq_to_mult=m, tokenizer=(manifest or {}).get("tokenizer", {}).get("name"),
        global_batch_size=gbs, steps_per_epoch=steps, full_steps_per_epoch=full, num_epochs=epochs,
        suggested_train_iters=suggested, train_iters=iters if isinstance(iters, int) else None,
        epochs_of_train_iters=ran, notes=notes,
    )


def _alignment_findings(cfg: Any, m: int) -> list[dict[str, Any]]:
    """The packs' alignment against the config's ``pad_seq_to_mult`` and against the topology's."""
    out = []
    specs = cfg.dataset.offline_packing_specs
    if specs is not None and specs.pad_seq_to_mult and specs.pad_seq_to_mult != m:
        out.append(_finding("PACKS-PAD-MULT", "error",
                            f"the packs were aligned to {m} but offline_packing_specs.pad_seq_to_mult="
                            f"{specs.pad_seq_to_mult} (the reader splits sequences by the config's value)",
                            f"set dataset.offline_packing_specs.pad_seq_to_mult={m}, or repack with "
                            f"--pad-seq-to-mult {specs.pad_seq_to_mult}"))
    mo = cfg.model
    align = derive_alignment(mo.tensor_model_parallel_size, mo.context_parallel_size, mo.sequence_parallel,
                             cfg.dist.eval_context_parallel_size)
    if m % align.cp_multiple:
        out.append(_finding("PACKS-PAD-MULT-TOPOLOGY", "error",
                            f"the packs were aligned to {m}; context parallelism needs a multiple of "
                            f"{align.cp_multiple} ({align.explanation})",
                            f"repack with --pad-seq-to-mult {align.pad_seq_to_mult} (seqpack align --tp "
                            f"{mo.tensor_model_parallel_size} --cp {mo.context_parallel_size}"
                            f"{' --sp' if mo.sequence_parallel else ''})"))
    elif m % align.pad_seq_to_mult:
        out.append(_finding("PACKS-PAD-MULT-TOPOLOGY", "warning",
                            f"the packs were aligned to {m}; the topology's alignment is {align.pad_seq_to_mult} "
                            f"({align.explanation})", f"repack with --pad-seq-to-mult {align.pad_seq_to_mult}"))
    return out

"""Smoke-test adapters of the built-in packing paths, and their default smoke data.

An adapter ``(cfg, jsonl, workdir) -> PathBatches`` builds canonical THD batches through its
path's own code and tokenizes the same rows independently (:func:`reference_samples`), so the
smoke test (:mod:`seqpack.smoke.run`) can compare the two. The path registry
(:mod:`seqpack.core.packing_paths`) names these functions; a new path writes its adapter in
its own module the same way.

Default data functions ``(scratch_dir, rows, seed) -> Path`` give JSONL whose first rows put at
least two sequences into one batch, so every check of the smoke test runs.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from seqpack.core.errors import UsageError
from seqpack.core.packing_paths import PathBatches

__all__ = [
    "demo_chat",
    "demo_prompt_completion",
    "demo_vlm_chat",
    "energon_batches",
    "global_batch_batches",
    "in_batch_batches",
    "offline_batches",
    "reference_samples",
    "copy_rows",
    "schema_for",
    "stored_rows",
    "synthetic_short_rows",
]


def demo_prompt_completion(scratch: Path, rows: int, seed: int) -> Path:
    """The bundled prompt/completion demo data."""
    from seqpack.data import demo_path

    return demo_path("prompt_completion")


def demo_chat(scratch: Path, rows: int, seed: int) -> Path:
    """The bundled chat demo data."""
    from seqpack.data import demo_path

    return demo_path("chat")


def demo_vlm_chat(scratch: Path, rows: int, seed: int) -> Path:
    """The bundled VLM chat demo: rows without images, with one or two images and with a video."""
    from seqpack.data.vlm.demo import vlm_demo_path

    return vlm_demo_path()


def synthetic_short_rows(scratch: Path, rows: int, seed: int) -> Path:
    """Short text rows (Energon never truncates, so every sample must fit seq_length)."""
    from seqpack.packing.energon.media import MediaSpec
    from seqpack.packing.energon.prepare import write_synthetic_vlm_jsonl

    return write_synthetic_vlm_jsonl(scratch / "synthetic.jsonl", rows, seed=seed, media=MediaSpec(probability=0.0))


def reference_samples(
    jsonl: Path, schema: Any, tokenizer: Any, max_ids: int, truncation: str = "right",
    reasons: Counter | None = None,
) -> tuple[list[dict[str, Any]], int, int]:
    """Tokenize every row independently of any packing code: (samples, rows, rejected); ``reasons``
    (optional) counts the rejections by reason."""
    from seqpack.data import to_training_example, tokenize_row
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.rejections import SampleRejected

    jf = JsonlFile(jsonl)
    samples, rejected = [], 0
    for i in range(len(jf)):
        try:
            sample = tokenize_row(jf.row(i), schema, tokenizer, max_length=max_ids, truncation=truncation)
        except SampleRejected as why:
            rejected += 1
            if reasons is not None:
                reasons[why.reason] += 1
            continue
        ex = to_training_example(sample)
        samples.append({"id": i, "tokens": ex.tokens, "labels": ex.labels, "loss_mask": ex.loss_mask})
    return samples, len(jf), rejected


def _tokenizer(tokenizer: Any) -> Any:
    from seqpack.data import load_tokenizer

    return load_tokenizer(tokenizer)


def _dp_size(cfg: Any) -> int:
    from seqpack.config.resolve import resolve

    return int(resolve(cfg).dp or 1)


def _details(reasons: Counter, **details: Any) -> dict[str, Any]:
    return {**details, **({"rejected": dict(reasons)} if reasons else {})}


def schema_for(jsonl: Path) -> Any:
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.schemas import default_schema, detect_schema
    from seqpack.data.vlm.sample import normalize_visual_row

    return default_schema(detect_schema(normalize_visual_row(JsonlFile(jsonl).row(0))[0]))


def stored_rows(samples: list[dict[str, Any]], multiple: int, pad_id: int) -> Any:
    """A function ``(stored packed row, eos id) -> source row of each of its sequences with real tokens``.

    Offline packs carry no row ids (Megatron-Bridge's format), so a stored segment is identified by
    its stored ids: the sample's ids padded with ``pad_id`` to its aligned length + 1, exactly as the
    offline pipeline writes them. A segment no sample gives is -1; identical rows are handed out in
    order, each once."""
    import numpy as np

    from seqpack.packing.thd_collate import stored_row_segments

    owners: dict[bytes, list[int]] = {}
    for s in samples:
        ids = np.append(np.asarray(s["tokens"], np.int64), int(np.asarray(s["labels"])[-1]))
        aligned = -(-(ids.size - 1) // multiple) * multiple
        stored = np.concatenate([ids, np.full(aligned + 1 - ids.size, pad_id, np.int64)])
        owners.setdefault(stored.tobytes(), []).append(int(s["id"]))

    def rows(item: dict[str, Any], eos_id: int) -> list[int]:
        ids = np.asarray(item["input_ids"], np.int64)
        starts = np.append(np.asarray(item["seq_start_id"], np.int64), ids.size)
        segments = stored_row_segments(item, eos_id=eos_id, pad_seq_to_mult=multiple)
        out = []
        for k, seg in enumerate(segments):
            if seg.get("valid_length", len(seg["tokens"])) > 0:
                given = owners.get(ids[starts[k] : starts[k + 1]].tobytes())
                out.append(given.pop(0) if given else -1)
        return out

    return rows


def offline_batches(cfg: Any, jsonl: Path, workdir: Path, tokenizer: Any = None) -> PathBatches:
    """The packs of the offline path (one pack set serves every DP rank: its sampler only splits them)."""
    from seqpack.packing.offline.prepare import pre_pad_id, prepare_packed_dataset
    from seqpack.packing.packed_dataset import PackedParquetDataset

    specs = cfg.dataset.offline_packing_specs
    if specs is None or specs.packed_sequence_size <= 0 or not specs.pad_seq_to_mult:
        raise UsageError(
            "the offline smoke test needs dataset.offline_packing_specs with packed_sequence_size and pad_seq_to_mult",
            rule_id="PACK-OFFLINE-SPECS-REQUIRED",
        )
    tok = _tokenizer(tokenizer)
    schema = schema_for(jsonl)
    max_len = specs.max_single_sequence_length or min(cfg.seq_length, specs.packed_sequence_size)
    result = prepare_packed_dataset(
        jsonl, workdir / "packs", pack_size=specs.packed_sequence_size, pad_seq_to_mult=specs.pad_seq_to_mult,
        max_seq_length=max_len, schema=schema, tokenizer=tok, seed=cfg.dataset.seed,
    )
    ds = PackedParquetDataset(result.files["training"], pad_to_max_length=cfg.pad_to_max_length)
    cap = (max_len // specs.pad_seq_to_mult) * specs.pad_seq_to_mult
    reasons: Counter = Counter()
    samples, rows, rejected = reference_samples(jsonl, schema, tok, cap + 1, reasons=reasons)
    rows_of = stored_rows(samples, specs.pad_seq_to_mult, pre_pad_id(tok))
    batches = []
    for i in range(len(ds)):
        item = ds[i]
        batch = ds.collate([item])
        batch["row_indices"] = rows_of(item, ds.eos_id)
        batches.append(batch)
    ds.close()
    acc = result.manifest["splits"]["training"]["accounting"]
    return PathBatches(batches, samples, rows, rejected, _details(reasons, packs=len(batches), accounting=acc,
                                                                  pad_seq_to_mult=specs.pad_seq_to_mult))


def in_batch_batches(cfg: Any, jsonl: Path, workdir: Path, tokenizer: Any = None) -> PathBatches:
    """The micro-batches of every DP rank (each rank's loader over the same rows), in rank order."""
    from seqpack.packing.in_batch import build_in_batch_loader, scan_rows
    from seqpack.packing.sft_dataset import SFTJsonlDataset

    from seqpack.smoke.vlm_data import vlm_reference_samples, vlm_settings_for

    tok = _tokenizer(tokenizer)
    schema = schema_for(jsonl)
    vlm = vlm_settings_for(jsonl, tok)
    ds = SFTJsonlDataset(jsonl, seq_length=cfg.seq_length, tokenizer=tok, schema=schema, cache_dir=workdir, vision=vlm)
    scan = scan_rows(ds)
    dp = _dp_size(cfg)
    batches = [b for rank in range(dp)
               for b in build_in_batch_loader(cfg, ds, dp_rank=rank, row_scan=scan, num_workers=0, drop_last=False)]
    reasons: Counter = Counter()
    if vlm is not None:
        samples, rows, rejected = vlm_reference_samples(jsonl, schema, tok, vlm, cfg.seq_length, reasons=reasons)
    else:
        samples, rows, rejected = reference_samples(jsonl, schema, tok, cfg.seq_length, reasons=reasons)
    return PathBatches(batches, samples, rows, rejected, _details(
        reasons, micro_batches=len(batches), dp_size=dp, simulated_dp_ranks=dp > 1,
        **({"vlm": vlm} if vlm is not None else {})))


def energon_batches(cfg: Any, jsonl: Path, workdir: Path, tokenizer: Any = None) -> PathBatches:
    """The packs of every DP rank. Energon never truncates: rows longer than ``seq_length`` are left out
    (counted as rejected, ``too_long``) before the dataset is prepared, as a user would drop them."""
    from seqpack.packing.energon.loader import iter_energon_batches

    from seqpack.smoke.vlm_data import vlm_reference_samples, vlm_settings_for

    tok = _tokenizer(tokenizer)
    schema = schema_for(jsonl)
    vlm = vlm_settings_for(jsonl, tok)
    reasons: Counter = Counter()
    if vlm is not None:
        samples, rows, rejected = vlm_reference_samples(jsonl, schema, tok, vlm, _energon_cap(cfg), reasons=reasons)
    else:
        samples, rows, rejected = reference_samples(jsonl, schema, tok, _energon_cap(cfg), truncation="reject",
                                                    reasons=reasons)
    source, kept = jsonl, [int(s["id"]) for s in samples]
    if rejected:
        source = copy_rows(jsonl, kept, workdir / "energon_input.jsonl")
    dp = _dp_size(cfg)
    micro: list[Any] = []
    for rank in range(dp):
        micro += iter_energon_batches(cfg, source, dp_rank=rank, tokenizer=tok, schema=schema,
                                      work_dir=workdir / "energon", vision=vlm)
        source = workdir / "energon" / "energon"  # prepared once, read by every rank
    for m in micro:
        m.batch["row_indices"] = [kept[r] if rejected else r for r in m.source_rows]
    return PathBatches([m.batch for m in micro], samples, rows, rejected, _details(
        reasons, packs=len(micro), packing_buffer_size=cfg.dataset.packing_buffer_size, dp_size=dp,
        simulated_dp_ranks=dp > 1, **({"vlm": vlm} if vlm is not None else {})))


def _energon_cap(cfg: Any) -> int:
    """The longest sample Energon packs: its aligned length must fit ``seq_length``."""
    from seqpack.config.resolve import resolve

    multiple = resolve(cfg).alignment.pad_seq_to_mult
    return cfg.seq_length // multiple * multiple


def copy_rows(jsonl: Path, rows: Any, out: Path) -> Path:
    """The given rows of ``jsonl``, in order, as a new file: raw lines, except that a row's relative image
    and video paths are made absolute against ``jsonl``'s folder (they must still resolve from the copy)."""
    import json

    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.vlm.sample import row_has_visuals, with_absolute_paths

    jf = JsonlFile(jsonl)
    base = Path(jf.path).resolve().parent
    try:
        with open(out, "wb") as fh:
            for r in rows:
                raw = jf.raw(r)
                if b'"image' in raw or b'"video' in raw:
                    row = jf.row(r)
                    if row_has_visuals(row):
                        raw = json.dumps(with_absolute_paths(row, base), ensure_ascii=False).encode("utf-8")
                fh.write(raw + b"\n")
    finally:
        jf.close()
    return out


def global_batch_batches(cfg: Any, jsonl: Path, workdir: Path, tokenizer: Any = None) -> PathBatches:
    """Every step's packs of every DP rank, the ranks simulated in this process with the training
    scheduler and pack builder (the real multi-process run is tests/test_global_batch_distributed.py)."""
    from seqpack.packing.global_batch.dataset import GlobalBatchSFTDataset
    from seqpack.packing.global_batch.report import simulate_steps
    from seqpack.packing.sft_dataset import scan_rows

    tok = _tokenizer(tokenizer)
    schema = schema_for(jsonl)
    ds = GlobalBatchSFTDataset(jsonl, seq_length=cfg.seq_length, tokenizer=tok, schema=schema, cache_dir=workdir)
    settings, steps = simulate_steps(cfg, ds, row_scan=scan_rows(ds), drop_last=False)
    batches = [b for step in steps for k in range(step.num_micro_batches) for b in (r[k] for r in step.batches)]
    reasons: Counter = Counter()
    samples, rows, rejected = reference_samples(jsonl, schema, tok, cfg.seq_length, reasons=reasons)
    return PathBatches(batches, samples, rows, rejected, _details(
        reasons, steps=len(steps), micro_batches_per_step=[s.num_micro_batches for s in steps],
        scheduler=settings.scheduler, dp_size=settings.dp_size, simulated_dp_ranks=True,
        pad_seq_to_mult=settings.pad_seq_to_mult,
    ))

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
    "schema_for",
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
    jsonl: Path, schema: Any, tokenizer: Any, max_ids: int, truncation: str = "right"
) -> tuple[list[dict[str, Any]], int, int]:
    """Tokenize every row independently of any packing code: (samples, rows, rejected)."""
    from seqpack.data import to_training_example, tokenize_row
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.rejections import SampleRejected

    jf = JsonlFile(jsonl)
    samples, rejected = [], 0
    for i in range(len(jf)):
        try:
            sample = tokenize_row(jf.row(i), schema, tokenizer, max_length=max_ids, truncation=truncation)
        except SampleRejected:
            rejected += 1
            continue
        ex = to_training_example(sample)
        samples.append({"id": i, "tokens": ex.tokens, "labels": ex.labels, "loss_mask": ex.loss_mask})
    return samples, len(jf), rejected


def schema_for(jsonl: Path) -> Any:
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.schemas import default_schema, detect_schema
    from seqpack.data.vlm.sample import normalize_visual_row

    return default_schema(detect_schema(normalize_visual_row(JsonlFile(jsonl).row(0))[0]))


def offline_batches(cfg: Any, jsonl: Path, workdir: Path) -> PathBatches:
    from seqpack.data import ByteTokenizer
    from seqpack.packing.offline.prepare import prepare_packed_dataset
    from seqpack.packing.packed_dataset import PackedParquetDataset

    specs = cfg.dataset.offline_packing_specs
    if specs is None or specs.packed_sequence_size <= 0 or not specs.pad_seq_to_mult:
        raise UsageError(
            "the offline smoke test needs dataset.offline_packing_specs with packed_sequence_size and pad_seq_to_mult",
            rule_id="PACK-OFFLINE-SPECS-REQUIRED",
        )
    tok = ByteTokenizer()
    schema = schema_for(jsonl)
    max_len = specs.max_single_sequence_length or min(cfg.seq_length, specs.packed_sequence_size)
    result = prepare_packed_dataset(
        jsonl, workdir / "packs", pack_size=specs.packed_sequence_size, pad_seq_to_mult=specs.pad_seq_to_mult,
        max_seq_length=max_len, schema=schema, tokenizer=tok, seed=cfg.dataset.seed,
    )
    ds = PackedParquetDataset(result.files["training"], pad_to_max_length=cfg.pad_to_max_length)
    batches = [ds.collate([ds[i]]) for i in range(len(ds))]
    ds.close()
    cap = (max_len // specs.pad_seq_to_mult) * specs.pad_seq_to_mult
    samples, rows, rejected = reference_samples(jsonl, schema, tok, cap + 1)
    acc = result.manifest["splits"]["training"]["accounting"]
    return PathBatches(batches, samples, rows, rejected, {"packs": len(batches), "accounting": acc,
                                                           "pad_seq_to_mult": specs.pad_seq_to_mult})


def in_batch_batches(cfg: Any, jsonl: Path, workdir: Path) -> PathBatches:
    from seqpack.data import ByteTokenizer
    from seqpack.packing.in_batch import build_in_batch_loader, scan_rows
    from seqpack.packing.sft_dataset import SFTJsonlDataset

    from seqpack.smoke.vlm_data import vlm_reference_samples, vlm_settings_for

    tok = ByteTokenizer()
    schema = schema_for(jsonl)
    vlm = vlm_settings_for(jsonl, tok)
    ds = SFTJsonlDataset(jsonl, seq_length=cfg.seq_length, tokenizer=tok, schema=schema, cache_dir=workdir, vision=vlm)
    scan = scan_rows(ds)
    loader = build_in_batch_loader(cfg, ds, row_scan=scan, num_workers=0, drop_last=False)
    batches = list(loader)
    if vlm is not None:
        samples, rows, rejected = vlm_reference_samples(jsonl, schema, tok, vlm, cfg.seq_length)
    else:
        samples, rows, rejected = reference_samples(jsonl, schema, tok, cfg.seq_length)
    return PathBatches(batches, samples, rows, rejected, {"micro_batches": len(batches),
                                                           **({"vlm": vlm} if vlm is not None else {})})


def energon_batches(cfg: Any, jsonl: Path, workdir: Path) -> PathBatches:
    from seqpack.data import ByteTokenizer
    from seqpack.packing.energon.loader import iter_energon_batches

    from seqpack.smoke.vlm_data import vlm_reference_samples, vlm_settings_for

    tok = ByteTokenizer()
    schema = schema_for(jsonl)
    vlm = vlm_settings_for(jsonl, tok)
    micro = list(iter_energon_batches(cfg, jsonl, tokenizer=tok, schema=schema, work_dir=workdir / "energon",
                                      vision=vlm))
    if vlm is not None:
        samples, rows, rejected = vlm_reference_samples(jsonl, schema, tok, vlm, sys.maxsize)
    else:
        samples, rows, rejected = reference_samples(jsonl, schema, tok, sys.maxsize, truncation="reject")
    return PathBatches([m.batch for m in micro], samples, rows, rejected,
                       {"packs": len(micro), "packing_buffer_size": cfg.dataset.packing_buffer_size,
                        **({"vlm": vlm} if vlm is not None else {})})


def global_batch_batches(cfg: Any, jsonl: Path, workdir: Path) -> PathBatches:
    """Every step's packs of every DP rank, the ranks simulated in this process with the training
    scheduler and pack builder (the real multi-process run is tests/test_global_batch_distributed.py)."""
    from seqpack.data import ByteTokenizer
    from seqpack.packing.global_batch.dataset import GlobalBatchSFTDataset
    from seqpack.packing.global_batch.report import simulate_steps
    from seqpack.packing.sft_dataset import scan_rows

    tok = ByteTokenizer()
    schema = schema_for(jsonl)
    ds = GlobalBatchSFTDataset(jsonl, seq_length=cfg.seq_length, tokenizer=tok, schema=schema, cache_dir=workdir)
    settings, steps = simulate_steps(cfg, ds, row_scan=scan_rows(ds), drop_last=False)
    batches = [b for step in steps for k in range(step.num_micro_batches) for b in (r[k] for r in step.batches)]
    samples, rows, rejected = reference_samples(jsonl, schema, tok, cfg.seq_length)
    return PathBatches(batches, samples, rows, rejected, {
        "steps": len(steps), "micro_batches_per_step": [s.num_micro_batches for s in steps],
        "scheduler": settings.scheduler, "dp_size": settings.dp_size, "simulated_dp_ranks": True,
        "pad_seq_to_mult": settings.pad_seq_to_mult,
    })

"""``batches``: the first micro-batches (in-batch) or per-step DP schedules (global-batch) of a JSONL file.

The ``mode`` picks a registered packing path (:func:`seqpack.core.packing_paths.path_for_mode`);
each path with a batches view names its function here in its spec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.choices import (
    BATCH_MODES,
    RUNTIME_DATALOADER_TYPES,
    SCHEDULERS,
    SCHEMA_KINDS,
    TRUNCATION_MODES,
    VISION_OPTIONS,
)
from seqpack.core.errors import UsageError
from seqpack.core.limits import (
    MAX_BATCHES_SHOWN,
    MAX_DATA_PARALLEL_SIZE,
    MAX_GLOBAL_BATCH_SIZE,
    MAX_PACK_LEN,
    MAX_STEPS_SHOWN,
)
from seqpack.packing.global_batch.report import GlobalBatchReport
from seqpack.packing.in_batch_report import InBatchReport
from seqpack.core.packing_paths import path_for_mode
from seqpack.verbs.common import TopologyOptions, check_choice, check_path, check_seed

__all__ = ["BatchesOptions", "batches", "global_batch_report", "in_batch_report"]


@dataclass(frozen=True, kw_only=True)
class BatchesOptions(TopologyOptions):
    """The JSONL file, the mode (a path's batch mode), the run's settings and how much to show.

    ``mbs`` defaults to the path's default micro-batch size (4 in-batch, 1 global-batch).
    ``pad_to_max_length``/``width`` and ``vision`` apply to in-batch (``vision``: ``auto`` reads
    rows with images as VLM samples with the ``qwen2_vl`` preset, ``none`` refuses them, or a
    preset name); ``dp``, ``gbs``, ``max_seqlen_per_rank``, ``scheduler`` and ``num_steps`` to
    global-batch.
    """

    input: str | os.PathLike[str]
    mode: str = "in-batch"
    mbs: int | None = None
    seq_length: int = 4096
    num_batches: int = 3
    dataloader: str = "single"
    seed: int = 1234
    schema: str | None = None
    tokenizer: Any = None
    truncation: str = "right"
    pad_to_max_length: bool = False
    width: int | None = None
    dp: int = 2
    gbs: int = 16
    max_seqlen_per_rank: int | None = None
    scheduler: str = "dp_balanced"
    num_steps: int = 2
    vision: str = "auto"


def batches(options: BatchesOptions) -> InBatchReport | GlobalBatchReport:
    """The batches view of the path whose batch mode is ``options.mode``.

    A config the settings describe that breaks a packing rule raises ``ConfigViolationError``
    (the CLI exits 1 on it).
    """
    check_choice("mode", options.mode, BATCH_MODES)
    check_path("input", options.input)
    check_choice("dataloader", options.dataloader, RUNTIME_DATALOADER_TYPES)
    check_choice("schema", options.schema, SCHEMA_KINDS, allow_none=True)
    check_choice("truncation", options.truncation, TRUNCATION_MODES)
    check_choice("vision", options.vision, VISION_OPTIONS)
    positive_int("seq_length", options.seq_length, maximum=MAX_PACK_LEN)
    positive_int("mbs", options.mbs, allow_none=True, maximum=MAX_GLOBAL_BATCH_SIZE)
    check_seed(options.seed)
    return path_for_mode(options.mode).load("batches")(options)


def in_batch_report(options: BatchesOptions) -> InBatchReport:
    """In-batch view: the first ``num_batches`` micro-batches of rank 0, with their padding."""
    from seqpack.data.vlm.sample import resolve_vision
    from seqpack.packing.in_batch_report import in_batch_config, inspect_in_batch

    if options.width is not None and not options.pad_to_max_length:
        raise UsageError("--width needs --pad-to-max-length", field="width")
    spec = path_for_mode("in-batch")
    cfg = in_batch_config(
        micro_batch_size=spec.default_micro_batch_size if options.mbs is None else options.mbs,
        seq_length=options.seq_length, tp=options.topology.tp, cp=options.topology.cp, sp=options.sp,
        eval_cp=options.eval_cp, dataloader_type=options.dataloader, seed=check_seed(options.seed),
        pad_to_max_length=options.pad_to_max_length,
    )
    return inspect_in_batch(
        options.input, cfg, num_batches=positive_int("num_batches", options.num_batches, maximum=MAX_BATCHES_SHOWN),
        tokenizer=options.tokenizer, schema=options.schema, truncation=options.truncation,
        width=positive_int("width", options.width, allow_none=True, maximum=MAX_PACK_LEN),
        vision=resolve_vision(options.vision, options.input),
    )


def global_batch_report(options: BatchesOptions) -> GlobalBatchReport:
    """Global-batch view: the first ``num_steps`` steps of every (simulated) DP rank."""
    from seqpack.packing.global_batch.report import global_batch_config, inspect_global_batch

    if options.pad_to_max_length or options.width is not None:
        raise UsageError("--pad-to-max-length/--width do not apply to --mode global-batch (packs have no fixed "
                         "width)", field="pad_to_max_length")
    if options.eval_cp is not None:
        raise UsageError("--eval-cp is not supported with --mode global-batch", field="eval_cp")
    if options.vision not in ("auto", "none"):
        raise UsageError("--vision does not apply to --mode global-batch (its samples are text only)", field="vision")
    check_choice("scheduler", options.scheduler, SCHEDULERS)
    spec = path_for_mode("global-batch")
    cfg = global_batch_config(
        dp=positive_int("dp", options.dp, maximum=MAX_DATA_PARALLEL_SIZE), seq_length=options.seq_length,
        global_batch_size=positive_int("gbs", options.gbs, maximum=MAX_GLOBAL_BATCH_SIZE),
        max_seqlen_per_dp_cp_rank=positive_int("max_seqlen_per_rank", options.max_seqlen_per_rank, allow_none=True,
                                               maximum=MAX_PACK_LEN),
        cp=options.topology.cp, tp=options.topology.tp, sp=options.sp, scheduler=options.scheduler,
        dataloader_type=options.dataloader,
        micro_batch_size=spec.default_micro_batch_size if options.mbs is None else options.mbs,
        seed=check_seed(options.seed),
    )
    return inspect_global_batch(
        options.input, cfg, num_steps=positive_int("num_steps", options.num_steps, maximum=MAX_STEPS_SHOWN),
        tokenizer=options.tokenizer, schema=options.schema, truncation=options.truncation,
    )

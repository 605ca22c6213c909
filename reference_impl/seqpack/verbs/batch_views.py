"""``batches``: the first micro-batches (in-batch) or per-step DP schedules (global-batch) of a JSONL file, or
the first packs of offline packed Parquet as the THD micro-batches their reader builds (offline).

The ``mode`` picks a registered packing path (:func:`seqpack.core.packing_paths.path_for_mode`);
each path with a batches view names its function here in its spec.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from seqpack.core.choices import BATCH_MODES, RUNTIME_DATALOADER_TYPES, SCHEDULERS, SCHEMA_KINDS
from seqpack.core.errors import UsageError
from seqpack.core.limits import (
    MAX_BATCHES_SHOWN,
    MAX_DATA_PARALLEL_SIZE,
    MAX_GLOBAL_BATCH_SIZE,
    MAX_PACK_LEN,
    MAX_STEPS_SHOWN,
)
from seqpack.core.packing_paths import path_for_mode
from seqpack.core.glossary import glossary_line
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import (
    TopologyOptions,
    schema_option,
    seed_option,
    pixels_option,
    tokenizer_option,
    truncation_option,
    vision_option,
)
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["BATCHES", "BatchesOptions", "batches", "global_batch_report", "in_batch_report", "render_batches"]

if TYPE_CHECKING:  # the reports' modules load when a view is built (the CLI's start stays light)
    from seqpack.packing.global_batch.report import GlobalBatchReport
    from seqpack.packing.in_batch_report import InBatchReport

_GLOBAL = "global-batch mode"  # the CLI's argument group of the global-batch settings
_OFFLINE = "offline mode"  # the CLI's argument group of the offline view's settings
#: The highest pack index the offline view starts at.
MAX_PACKS_INDEX = 1 << 40


@verb_options
class BatchesOptions(TopologyOptions):
    """The JSONL file, the mode (a path's batch mode), the run's settings and how much to show.

    ``mbs`` defaults to the path's default micro-batch size (4 in-batch, 1 global-batch).
    ``pad_to_max_length``/``width`` and ``vision`` apply to in-batch (``vision``: ``auto`` reads
    rows with images as VLM samples with the ``qwen2_vl`` preset, ``none`` refuses them, or a
    preset name); ``dp``, ``gbs``, ``max_seqlen_per_rank``, ``scheduler`` and ``num_steps`` to
    global-batch.
    """

    input: str | os.PathLike[str] = option(help="prompt/completion or chat rows: a JSONL or Parquet file, or a "
                                           "datasets.save_to_disk folder (offline: a pack folder, or the output root "
                                           "pack --out wrote)", positional=True, metavar="INPUT",
                                           path="rows_or_packs")
    mode: str = option("in-batch", help="packing path, by its batch mode", choices=BATCH_MODES)
    mbs: int | None = option(None, help="micro-batch size: rows packed into one THD row (default 4; global-batch "
                             "needs 1)", minimum=1, maximum=MAX_GLOBAL_BATCH_SIZE)
    seq_length: int = option(4096, help="sequence length; bounds every row", minimum=1, maximum=MAX_PACK_LEN)
    num_batches: int = option(3, help="micro-batches to show", minimum=1, maximum=MAX_BATCHES_SHOWN)
    dataloader: str = option("single", help="dataloader type (batch is refused by the rules)",
                             choices=RUNTIME_DATALOADER_TYPES)
    seed: int = seed_option(1234, "seed of the cyclic order")
    schema: str | None = schema_option(None, SCHEMA_KINDS, "row schema (default: detected from the first row)")
    tokenizer: Any = tokenizer_option()
    truncation: str = truncation_option()
    pad_to_max_length: bool = option(False, help="fixed packed width (kernels that need a static shape)")
    width: int | None = option(None, help="the fixed width with pad_to_max_length (default: seq_length)", minimum=1,
                               maximum=MAX_PACK_LEN)
    dp: int = option(2, help="data-parallel ranks to simulate", minimum=1, maximum=MAX_DATA_PARALLEL_SIZE,
                     section=_GLOBAL)
    gbs: int = option(16, help="global batch size in samples", minimum=1, maximum=MAX_GLOBAL_BATCH_SIZE,
                      section=_GLOBAL)
    max_seqlen_per_rank: int | None = option(
        None, help="model.max_seqlen_per_dp_cp_rank: a pack holds this times CP tokens (default "
        "ceil(seq_length / CP))", minimum=1, maximum=MAX_PACK_LEN, section=_GLOBAL)
    scheduler: str = option("dp_balanced", help="dp_balanced (Megatron-Core) or balanced (tokens and attention "
                            "cost)", choices=SCHEDULERS, section=_GLOBAL)
    num_steps: int = option(2, help="steps to show", minimum=1, maximum=MAX_STEPS_SHOWN, section=_GLOBAL)
    vision: str = vision_option("in-batch: how rows with images are read (auto: the qwen2_vl preset when the file "
                                "has images; none refuses them); see docs/vlm.md")
    fold_alignment_padding: bool = option(False, help="report each sequence's alignment padding as part of it (no "
                                          "padding between sequences: FlashAttention with heads of 256 and wider; "
                                          "Megatron-Bridge PR #6127)")
    min_pixels: int | None = pixels_option("min")
    max_pixels: int | None = pixels_option("max")
    split: str = option("training", help="offline: the split whose packs to show", choices=("training", "validation"),
                        section=_OFFLINE)
    start: int = option(0, help="offline: the first pack to show", minimum=0, maximum=MAX_PACKS_INDEX,
                        section=_OFFLINE)


def batches(options: BatchesOptions) -> InBatchReport | GlobalBatchReport:
    """The batches view of the path whose batch mode is ``options.mode``.

    A config the settings describe that breaks a packing rule raises ``ConfigViolationError``
    (the CLI exits 1 on it).
    """
    check_options(options)
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
        eval_cp=options.eval_cp, dataloader_type=options.dataloader, seed=options.seed,
        pad_to_max_length=options.pad_to_max_length, fold_alignment_padding=options.fold_alignment_padding,
    )
    report = inspect_in_batch(
        options.input, cfg, num_batches=options.num_batches, tokenizer=options.tokenizer, schema=options.schema,
        truncation=options.truncation, width=options.width,
        vision=resolve_vision(options.vision, options.input, min_pixels=options.min_pixels,
                              max_pixels=options.max_pixels),
    )
    return _named(report, options, report.schema.get("kind"))


def _named(report: Any, options: BatchesOptions, kind: str | None) -> Any:
    """The report with its tokenizer named as every command names it, and the warning for rows in bytes."""

    from seqpack.data.tokenizers import byte_tokenizer_warning, tokenizer_label

    warning = byte_tokenizer_warning(options.tokenizer, kind)
    return report.replaced(tokenizer=tokenizer_label(options.tokenizer), warnings=[warning] if warning else [])


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
    spec = path_for_mode("global-batch")
    cfg = global_batch_config(
        dp=options.dp, seq_length=options.seq_length, global_batch_size=options.gbs,
        max_seqlen_per_dp_cp_rank=options.max_seqlen_per_rank, cp=options.topology.cp, tp=options.topology.tp,
        sp=options.sp, scheduler=options.scheduler, dataloader_type=options.dataloader,
        micro_batch_size=spec.default_micro_batch_size if options.mbs is None else options.mbs, seed=options.seed,
        fold_alignment_padding=options.fold_alignment_padding,
    )
    report = inspect_global_batch(
        options.input, cfg, num_steps=options.num_steps, tokenizer=options.tokenizer, schema=options.schema,
        truncation=options.truncation,
    )
    return _named(report, options, report.schema)


def offline_report(options: BatchesOptions) -> Any:
    """Offline view: the packs from ``start`` of ``split`` as the THD micro-batches their reader builds, and each
    CP rank's share (:func:`seqpack.training.offline_view.inspect_offline_batches`)."""
    from seqpack.training.offline_view import inspect_offline_batches

    given = [f"--{n.replace('_', '-')}" for n in ("mbs", "width", "tokenizer") if getattr(options, n) is not None]
    if options.pad_to_max_length:
        given.append("--pad-to-max-length")
    if given:
        raise UsageError(f"{', '.join(given)} do not apply to --mode offline: the packs are already built (their "
                         "tokenizer and widths are in them)", field="mode")
    return inspect_offline_batches(options.input, cp=options.topology.cp, num_batches=options.num_batches,
                                   start=options.start, split=options.split)


# ------------------------------------------------------------------------------------------------
# The CLI's view
# ------------------------------------------------------------------------------------------------


def _cells(values: list[int], limit: int = 10) -> str:
    text = ",".join(str(v) for v in values[:limit])
    return f"[{text}{',...' if len(values) > limit else ''}]"


def render_batches(report: InBatchReport | GlobalBatchReport, options: BatchesOptions) -> str:
    """The CLI's text: the micro-batches (in-batch) or the steps per DP rank (global-batch)."""
    if report.mode == "offline":
        return _render_offline(report)
    text = _render_global_batch(report) if report.mode == "global-batch" else _render_in_batch(report)
    return "\n".join([text, *(f"warning: {w}" for w in report.warnings)])


def _render_offline(report: Any) -> str:
    out = [f"offline: {report.pack_dir} ({report.split}: {report.packs} packs of {report.pack_size} tokens, "
           f"pad_seq_to_mult {report.pad_seq_to_mult}, tokenizer {report.tokenizer}), CP {report.cp}"]
    rows = [[b.pack, b.sequences, _cells(b.lengths), _cells(b.cu_seqlens),
             "-" if b.cu_seqlens_padded is None else _cells(b.cu_seqlens_padded), b.width, b.max_seqlen,
             b.alignment_padding, b.width_padding, f"{b.supervised_tokens / b.real_tokens:.1%}" if b.real_tokens else "-"]
            for b in report.batches]
    out.append(text_table(["pack", "seqs", "lengths", "cu_seqlens", "cu_seqlens_padded", "width", "max_seqlen",
                           "align_pad", "width_pad", "supervised"], rows))
    if report.cp > 1:
        ranks = [[b.pack, r["rank"], r["positions"], r["real_tokens"], _cells([f"{s}:{e}" for s, e in r["ranges"]], 6)]
                 for b in report.batches for r in b.cp_ranks]
        out += [f"per CP rank (every sequence in 2*CP = {2 * report.cp} chunks; rank r holds chunks r and "
                f"{2 * report.cp - 1}-r):", text_table(["pack", "cp_rank", "positions", "real_tokens", "ranges"], ranks)]
    t = report.totals
    out.append(f"padding over {t.batches} pack(s): {t.real_tokens} real tokens, {t.alignment_padding} alignment padding, "
               f"{t.width_padding} width padding, share {t.padding_share:.2%} ("
               + glossary_line("padding share", "supervised share") + ")")
    return "\n".join(out)


def _render_in_batch(report: Any) -> str:
    al = report.alignment
    width = f"fixed {report.width}" if report.pad_to_max_length else "emergent (sum of aligned rows)"
    out = [f"{report.mode}: {report.file} ({report.rows} rows, {report.schema['kind']}, tokenizer {report.tokenizer})",
           f"MBS {report.micro_batch_size}, seq_length {report.seq_length}, dataloader {report.dataloader_type}, "
           f"{report.steps_per_pass} micro-batches per pass, width {width}", al["explanation"]]
    vlm = report.vision is not None
    if vlm:
        v = report.vision
        out.append(f"VLM rows: vision preset {v['name']} (patch {v['patch_size']}, merge {v['merge_size']}); image "
                   "tokens count as real tokens and are aligned with the text")
    rows = [[b.step, _cells(list(b.rows)), _cells(list(b.lengths)), _cells(b.cu_seqlens),
             "-" if b.cu_seqlens_padded is None else _cells(b.cu_seqlens_padded), b.width, b.max_seqlen,
             b.alignment_padding, b.width_padding, f"{b.padding_share:.1%}",
             *([b.images + b.videos, b.vision_tokens] if vlm else [])] for b in report.batches]
    out.append(text_table(["step", "rows", "lengths", "cu_seqlens", "cu_seqlens_padded", "width", "max_seqlen",
                           "align_pad", "width_pad", "pad_share", *(["visuals", "image_tokens"] if vlm else [])],
                          rows))
    t = report.totals
    out.append(f"padding over {t.batches} micro-batch(es): {t.real_tokens} real tokens, {t.alignment_padding} "
               f"alignment padding, {t.width_padding} width padding, share {t.padding_share:.2%}"
               + (f"; {t.truncated_rows} row(s) truncated" if t.truncated_rows else ""))
    return "\n".join(out)


def _render_global_batch(report: Any) -> str:
    st = report.settings
    out = [f"{report.mode}: {report.file} ({report.rows} rows, tokenizer {report.tokenizer}), scheduler "
           f"{st['scheduler']} (DP ranks simulated)",
           f"DP {st['dp_size']}, CP {st['cp_size']}, GBS {st['global_batch_size']} ({st['micro_batches_per_rank']} "
           f"samples per rank), pack capacity {st['max_seqlen_per_dp_cp_rank']}*{st['cp_size']} = {st['capacity']} "
           f"tokens, pad_seq_to_mult {st['pad_seq_to_mult']}"]
    for step in report.steps:
        imb = step.imbalance
        out.append(f"\nstep {step.step}: {step.num_samples} samples -> {step.num_micro_batches} micro-batch(es) per "
                   f"rank; sum L = {step.seqlen_sum}, sum L^2 = {step.seqlen_squared_sum}; rank load max/mean: "
                   f"tokens {imb['tokens']:.3f}, attention {imb['attention']:.3f}")
        rows = [[k, d, _cells(pack["rows"]), _cells(pack["lengths"]), pack["tokens"], pack["attention"]]
                for k, mb in enumerate(step.packs) for d, pack in enumerate(mb)]
        out.append(text_table(["micro_batch", "dp_rank", "rows", "lengths", "tokens", "sum_L^2"], rows))
        out.append(text_table(["dp_rank", "tokens", "sum_L^2"],
                              [[d, t, a] for d, (t, a) in enumerate(zip(step.rank_tokens, step.rank_attention))]))
        out += [f"note: {note}" for note in step.adjustments]
    hint = (report.balance or {}).get("hint")
    if hint:
        out.append(f"\nhint: {hint}")
    out.append(f"\n{report.full_steps} full step(s) in {report.rows} rows"
               + (f"; the last {report.dropped_rows} row(s) do not fill a global batch of {st['global_batch_size']} "
                  "and are dropped, as training does (drop_last)" if report.dropped_rows else ""))
    return "\n".join(out)


_IN_BATCH_ONLY = ("eval_cp", "mbs", "num_batches", "pad_to_max_length", "width", "vision", "min_pixels", "max_pixels")
_GLOBAL_ONLY = ("dp", "gbs", "max_seqlen_per_rank", "scheduler", "num_steps")
_OFFLINE_ONLY = ("split", "start")
_JSONL_ONLY = ("seq_length", "dataloader", "seed", "schema", "tokenizer", "truncation")

BATCHES = Verb(
    name="batches", options=BatchesOptions, function=batches, render=render_batches, violations_exit=1,
    extra="train",
    help="build the first packed micro-batches of a JSONL file and print their layout and padding",
    tools=(
        Tool("inspect_in_batch", title="Show the first in-batch packed micro-batches of a JSONL file", job=True,
             fixed={"mode": "in-batch"}, exclude=_GLOBAL_ONLY + _OFFLINE_ONLY,
             result="seqpack.packing.in_batch_report:InBatchReport",
             description="""Build the real in-batch loader (rules, derived alignment, collator) on rank 0 and summarise its first
micro-batches: rows, lengths, cu_seqlens (real and padded), width, alignment and width padding
(like `seqpack batches --mode in-batch`). Settings that break a packing rule are a tool error
naming the rule."""),
        Tool("inspect_global_batch", job=True, fixed={"mode": "global-batch"}, exclude=_IN_BATCH_ONLY + _OFFLINE_ONLY,
             title="Show the first global-batch packing steps of a JSONL file (DP ranks simulated)",
             result="seqpack.packing.global_batch.report:GlobalBatchReport",
             description="""Simulate the DP ranks of global-batch packing in one process (the training scheduler and pack
builder, no collectives) and return every step's packs per (micro-batch, DP rank), the per-rank
token and attention loads and the FLOPs sums (like `seqpack batches --mode global-batch`); balance
gives the worst rank load under each scheduler on the same steps and a hint when another is more even."""),
        Tool("inspect_offline_batches", job=True, fixed={"mode": "offline"},
             exclude=tuple(n for n in dict.fromkeys(_IN_BATCH_ONLY + _GLOBAL_ONLY + _JSONL_ONLY + ("tp", "sp"))
                           if n != "num_batches"),
             title="Show offline packs as the THD micro-batches training gets, and each CP rank's share",
             result="seqpack.training.offline_view:OfflineBatchReport",
             description="""Read offline packed Parquet (a pack folder, or the output root pack_dataset wrote) with the runtime
reader, Megatron-Bridge's rules, and return the first packs as THD micro-batches: real and padded
cu_seqlens, lengths, alignment and width padding, supervised tokens, and with cp > 1 the positions
and real tokens each context-parallel rank holds (like `seqpack batches --mode offline PACKDIR --cp 2`)."""),
    ),
)

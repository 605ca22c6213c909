"""``seqpack batches``: show the first micro-batches a packing mode builds from a JSONL file.

``--mode global-batch`` simulates the ``--dp`` data-parallel ranks in one process (the training
scheduler and pack builder, without collectives) and prints every step's packs, the per-rank load
and the FLOPs sums.
"""

from __future__ import annotations

import argparse
import sys

from seqpack.core.choices import (
    BATCH_MODES,
    RUNTIME_DATALOADER_TYPES,
    SCHEDULERS,
    SCHEMA_KINDS,
    TRUNCATION_MODES,
    VISION_OPTIONS,
)
from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "batches"
HELP = "build the first packed micro-batches of a JSONL file and print their layout and padding"
#: The optional extra this command needs (seqpack.core.extras): the runtime paths build torch batches.
EXTRA = "train"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("input", metavar="INPUT.jsonl", help="prompt/completion or chat JSONL file")
    p.add_argument("--mode", choices=BATCH_MODES, default="in-batch",
                   help="packing path, by its batch mode (default in-batch)")
    p.add_argument("--mbs", type=int, default=None,
                   help="micro-batch size: rows packed into one THD row (default 4; global-batch needs 1)")
    p.add_argument("--seq-length", type=int, default=4096, help="sequence length; bounds every row (default 4096)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size (default 1)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism on")
    p.add_argument("--eval-cp", type=int, default=None, help="a distinct evaluation CP size")
    p.add_argument("--num-batches", type=int, default=3, help="micro-batches to show (default 3)")
    p.add_argument("--dataloader", choices=RUNTIME_DATALOADER_TYPES, default="single",
                   help="dataloader type (default single; batch is refused by the rules)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the cyclic order (default 1234)")
    p.add_argument("--schema", choices=SCHEMA_KINDS, default=None,
                   help="row schema (default: detected from the first row)")
    p.add_argument("--tokenizer", default=None,
                   help="local Hugging Face tokenizer.json or its folder (default: the byte tokenizer)")
    p.add_argument("--truncation", choices=TRUNCATION_MODES, default="right",
                   help="rows longer than seq-length: cut the end, cut the start, or reject (default right)")
    p.add_argument("--pad-to-max-length", action="store_true",
                   help="fixed packed width (kernels that need a static shape)")
    p.add_argument("--width", type=int, default=None,
                   help="the fixed width with --pad-to-max-length (default: seq-length)")
    p.add_argument("--vision", choices=VISION_OPTIONS, default="auto",
                   help="in-batch: how rows with images are read (default auto: the qwen2_vl preset when the "
                   "file has images; none refuses them); see docs/vlm.md")
    g = p.add_argument_group("global-batch mode")
    g.add_argument("--dp", type=int, default=2, help="data-parallel ranks to simulate (default 2)")
    g.add_argument("--gbs", type=int, default=16, help="global batch size in samples (default 16)")
    g.add_argument("--max-seqlen-per-rank", type=int, default=None,
                   help="model.max_seqlen_per_dp_cp_rank: a pack holds this times CP tokens "
                   "(default ceil(seq-length / CP))")
    g.add_argument("--scheduler", choices=SCHEDULERS, default="dp_balanced",
                   help="dp_balanced (Megatron-Core) or balanced (tokens and attention cost; default dp_balanced)")
    g.add_argument("--num-steps", type=int, default=2, help="steps to show (default 2)")
    add_json_flag(p)


def _cells(values: list[int], limit: int = 10) -> str:
    text = ",".join(str(v) for v in values[:limit])
    return f"[{text}{',...' if len(values) > limit else ''}]"


def run(args: argparse.Namespace) -> int:
    """Build the batches and print them; exit 1 when the settings break a packing rule."""
    from seqpack.core.errors import ConfigViolationError
    from seqpack.verbs.batch_views import BatchesOptions, batches

    options = BatchesOptions(
        input=args.input, mode=args.mode, mbs=args.mbs, seq_length=args.seq_length, tp=args.tp, cp=args.cp,
        sp=args.sp, eval_cp=args.eval_cp, num_batches=args.num_batches, dataloader=args.dataloader, seed=args.seed,
        schema=args.schema, tokenizer=args.tokenizer, truncation=args.truncation,
        pad_to_max_length=args.pad_to_max_length, width=args.width, dp=args.dp, gbs=args.gbs,
        max_seqlen_per_rank=args.max_seqlen_per_rank, scheduler=args.scheduler, num_steps=args.num_steps,
        vision=args.vision,
    )
    try:
        report = batches(options)
    except ConfigViolationError as exc:
        print(f"seqpack {NAME}: error: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print_json(report.to_dict())
        return 0
    if report.mode == "global-batch":
        return _print_global_batch(report)
    return _print_in_batch(report)


def _print_in_batch(report) -> int:  # noqa: ANN001 - an InBatchReport
    al = report.alignment
    width = f"fixed {report.width}" if report.pad_to_max_length else "emergent (sum of aligned rows)"
    print(
        f"{report.mode}: {report.file} ({report.rows} rows, {report.schema['kind']}, tokenizer {report.tokenizer})"
    )
    print(
        f"MBS {report.micro_batch_size}, seq_length {report.seq_length}, dataloader {report.dataloader_type}, "
        f"{report.steps_per_pass} micro-batches per pass, width {width}"
    )
    print(al["explanation"])
    vlm = report.vision is not None
    if vlm:
        v = report.vision
        print(f"VLM rows: vision preset {v['name']} (patch {v['patch_size']}, merge {v['merge_size']}); image tokens "
              "count as real tokens and are aligned with the text")
    rows = []
    for b in report.batches:
        rows.append([
            b.step, _cells(list(b.rows)), _cells(list(b.lengths)), _cells(b.cu_seqlens),
            "-" if b.cu_seqlens_padded is None else _cells(b.cu_seqlens_padded),
            b.width, b.max_seqlen, b.alignment_padding, b.width_padding, f"{b.padding_share:.1%}",
            *([b.images + b.videos, b.vision_tokens] if vlm else []),
        ])
    print(table(
        ["step", "rows", "lengths", "cu_seqlens", "cu_seqlens_padded", "width", "max_seqlen",
         "align_pad", "width_pad", "pad_share", *(["visuals", "image_tokens"] if vlm else [])],
        rows,
    ))
    t = report.totals
    print(
        f"padding over {t.batches} micro-batch(es): {t.real_tokens} real tokens, {t.alignment_padding} "
        f"alignment padding, {t.width_padding} width padding, share {t.padding_share:.2%}"
        + (f"; {t.truncated_rows} row(s) truncated" if t.truncated_rows else "")
    )
    return 0


def _print_global_batch(report) -> int:  # noqa: ANN001 - a GlobalBatchReport
    st = report.settings
    print(f"{report.mode}: {report.file} ({report.rows} rows), scheduler {st['scheduler']} (DP ranks simulated)")
    print(
        f"DP {st['dp_size']}, CP {st['cp_size']}, GBS {st['global_batch_size']} ({st['micro_batches_per_rank']} "
        f"samples per rank), pack capacity {st['max_seqlen_per_dp_cp_rank']}*{st['cp_size']} = {st['capacity']} "
        f"tokens, pad_seq_to_mult {st['pad_seq_to_mult']}"
    )
    for step in report.steps:
        imb = step.imbalance
        print(
            f"\nstep {step.step}: {step.num_samples} samples -> {step.num_micro_batches} micro-batch(es) per rank; "
            f"sum L = {step.seqlen_sum}, sum L^2 = {step.seqlen_squared_sum}; rank load max/mean: "
            f"tokens {imb['tokens']:.3f}, attention {imb['attention']:.3f}"
        )
        rows = []
        for k, mb in enumerate(step.packs):
            for d, pack in enumerate(mb):
                rows.append([k, d, _cells(pack["rows"]), _cells(pack["lengths"]), pack["tokens"], pack["attention"]])
        print(table(["micro_batch", "dp_rank", "rows", "lengths", "tokens", "sum_L^2"], rows))
        print(table(["dp_rank", "tokens", "sum_L^2"],
                    [[d, t, a] for d, (t, a) in enumerate(zip(step.rank_tokens, step.rank_attention))]))
        for note in step.adjustments:
            print(f"note: {note}")
    print(f"\n{report.full_steps} full step(s) in {report.rows} rows"
          + (f"; the last {report.dropped_rows} row(s) do not fill a global batch of {st['global_batch_size']} and "
             "are dropped, as training does (drop_last)" if report.dropped_rows else ""))
    return 0

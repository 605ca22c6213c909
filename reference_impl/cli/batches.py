"""``seqpack batches``: show the first micro-batches a packing mode builds from a JSONL file."""

from __future__ import annotations

import argparse
import sys

from reference_impl.cli._output import add_json_flag, print_json, table

NAME = "batches"
HELP = "build the first packed micro-batches of a JSONL file and print their layout and padding"

MODES: tuple[str, ...] = ("in-batch",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("input", metavar="INPUT.jsonl", help="prompt/completion or chat JSONL file")
    p.add_argument("--mode", choices=MODES, default="in-batch", help="packing path (default in-batch)")
    p.add_argument("--mbs", type=int, default=4, help="micro-batch size: rows packed into one THD row (default 4)")
    p.add_argument("--seq-length", type=int, default=4096, help="sequence length; bounds every row (default 4096)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size (default 1)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism on")
    p.add_argument("--eval-cp", type=int, default=None, help="a distinct evaluation CP size")
    p.add_argument("--num-batches", type=int, default=3, help="micro-batches to show (default 3)")
    p.add_argument("--dataloader", choices=("single", "cyclic", "batch"), default="single",
                   help="dataloader type (default single; batch is refused by the rules)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the cyclic order (default 1234)")
    p.add_argument("--schema", choices=("prompt_completion", "chat"), default=None,
                   help="row schema (default: detected from the first row)")
    p.add_argument("--tokenizer", default=None,
                   help="local Hugging Face tokenizer.json or its folder (default: the byte tokenizer)")
    p.add_argument("--truncation", choices=("right", "left", "reject"), default="right",
                   help="rows longer than seq-length: cut the end, cut the start, or reject (default right)")
    p.add_argument("--pad-to-max-length", action="store_true",
                   help="fixed packed width (kernels that need a static shape)")
    p.add_argument("--width", type=int, default=None,
                   help="the fixed width with --pad-to-max-length (default: seq-length)")
    add_json_flag(p)


def _cells(values: list[int], limit: int = 10) -> str:
    text = ",".join(str(v) for v in values[:limit])
    return f"[{text}{',...' if len(values) > limit else ''}]"


def run(args: argparse.Namespace) -> int:
    """Build the batches and print them; exit 1 when the settings break a packing rule."""
    from reference_impl.errors import ConfigViolationError, UsageError
    from reference_impl.packing.in_batch_report import in_batch_config, inspect_in_batch

    if args.width is not None and not args.pad_to_max_length:
        raise UsageError("--width needs --pad-to-max-length")
    try:
        cfg = in_batch_config(
            micro_batch_size=args.mbs, seq_length=args.seq_length, tp=args.tp, cp=args.cp, sp=args.sp,
            eval_cp=args.eval_cp, dataloader_type=args.dataloader, seed=args.seed,
            pad_to_max_length=args.pad_to_max_length,
        )
        report = inspect_in_batch(
            args.input, cfg, num_batches=args.num_batches, tokenizer=args.tokenizer,
            schema=args.schema, truncation=args.truncation, width=args.width,
        )
    except ConfigViolationError as exc:
        print(f"seqpack {NAME}: error: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print_json(report.to_dict())
        return 0
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
    rows = []
    for b in report.batches:
        i = b.info
        rows.append([
            b.step, _cells(list(i.rows)), _cells(list(i.lengths)), _cells(b.cu_seqlens),
            "-" if b.cu_seqlens_padded is None else _cells(b.cu_seqlens_padded),
            i.width, b.max_seqlen, i.alignment_padding, i.width_padding, f"{i.padding_share:.1%}",
        ])
    print(table(
        ["step", "rows", "lengths", "cu_seqlens", "cu_seqlens_padded", "width", "max_seqlen",
         "align_pad", "width_pad", "pad_share"],
        rows,
    ))
    t = report.totals
    print(
        f"padding over {t.batches} micro-batch(es): {t.real_tokens} real tokens, {t.alignment_padding} "
        f"alignment padding, {t.width_padding} width padding, share {t.padding_share:.2%}"
        + (f"; {t.truncated_rows} row(s) truncated" if t.truncated_rows else "")
    )
    return 0

"""``seqpack plan``: compare pack lengths at equal token slots per step and recommend one."""

from __future__ import annotations

import argparse

from seqpack.core.choices import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    LENGTH_MIXES,
    SCHEMA_OPTIONS,
    TRUNCATION_MODES,
    VISION_OPTIONS,
)
from seqpack.config.dispatch import DISPATCHERS
from seqpack.faces.cli._output import add_json_flag, int_list, print_json, table

NAME = "plan"
HELP = "simulate packing at several pack lengths (equal token slots per step) and recommend one"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--jsonl", help="JSONL file (or blend manifest) tokenized like `seqpack pack` does")
    src.add_argument("--mix", choices=LENGTH_MIXES, help="a synthetic length mix (with --n, --max-len, --seed)")
    src.add_argument("--lengths", type=int_list, help="sample lengths, comma-separated (e.g. 900,300,1500)")
    p.add_argument("--n", type=int, default=100_000, help="samples drawn from --mix (default 100000)")
    p.add_argument("--max-len", type=int, default=4096, help="longest sample --mix draws (default 4096)")
    p.add_argument(
        "--candidates", type=int_list, default=None, help="pack lengths to compare (default 2048,4096,8192)"
    )
    p.add_argument("--token-slots", type=int, default=65536, help="token slots per optimizer step (default 65536)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel size (default 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size, to derive the alignment")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size, to derive the alignment")
    p.add_argument("--sp", action="store_true", help="sequence parallelism, to derive the alignment")
    p.add_argument("--eval-cp", type=int, default=None, help="evaluation CP size, to derive the alignment")
    p.add_argument("--pad-seq-to-mult", type=int, default=None, help="explicit alignment (default: derived)")
    p.add_argument("--algorithm", choices=ALGORITHMS, default=DEFAULT_ALGORITHM)
    p.add_argument("--seed", type=int, default=0, help="seed of --mix and of first_fit_shuffle (default 0)")
    p.add_argument("--max-seqs-per-pack", type=int, default=None)
    p.add_argument("--truncation", choices=TRUNCATION_MODES, default="right",
                   help="samples longer than a pack: cut (right/left) or leave out (reject)")
    p.add_argument("--schema", choices=SCHEMA_OPTIONS, default="auto", help="with --jsonl")
    p.add_argument("--tokenizer", default=None, help="with --jsonl: local tokenizer.json (default: byte tokenizer)")
    p.add_argument("--vision", choices=VISION_OPTIONS, default="auto",
                   help="with --jsonl: rows with images count their image tokens (default auto: the qwen2_vl "
                   "preset when the file has images); see docs/vlm.md")
    p.add_argument("--moe-dispatcher", choices=DISPATCHERS, default=None,
                   help="an MoE model's token dispatcher: add its dispatch padding overhead to every row")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel size, with --moe-dispatcher (default 1)")
    p.add_argument("--pad-to-max-length", action="store_true",
                   help="fixed-width packs (every pack pack_len wide), with --moe-dispatcher")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the plan; exit 1 when no candidate is valid."""
    from seqpack.core.alignment import DEFAULT_PACK_LENGTHS
    from seqpack.verbs.planning import PlanOptions, plan as make_plan

    plan = make_plan(PlanOptions(
        lengths=args.lengths, jsonl=args.jsonl, mix=args.mix, n=args.n, max_len=args.max_len,
        candidates=tuple(args.candidates or DEFAULT_PACK_LENGTHS), token_slots=args.token_slots, dp=args.dp,
        tp=args.tp, cp=args.cp, sp=args.sp, eval_cp=args.eval_cp, pad_seq_to_mult=args.pad_seq_to_mult,
        algorithm=args.algorithm, seed=args.seed, max_seqs_per_pack=args.max_seqs_per_pack,
        truncation=args.truncation, schema=args.schema, tokenizer=args.tokenizer, vision=args.vision,
        moe_dispatcher=args.moe_dispatcher, ep=args.ep, pad_to_max_length=args.pad_to_max_length,
    ))
    code = 0 if plan.recommended_pack_len is not None else 1
    if args.json:
        print_json(plan.to_dict())
        return code
    s = plan.lengths
    origin = f"--mix {args.mix} (seed {args.seed})" if args.mix else s.source
    print(
        f"{s.num_samples} samples from {origin}, {s.total_tokens} tokens; length min {s.min} / p50 {s.p50} / "
        f"p99 {s.p99} / max {s.max}; pad_seq_to_mult={plan.pad_seq_to_mult}, token slots {plan.token_slots}, "
        f"DP={plan.dp}"
    )
    vlm = (s.details or {}).get("vlm")
    if vlm:
        print(
            f"VLM rows ({vlm['vision']} preset): {vlm['rows_with_visuals']} of {vlm['samples']} samples carry "
            f"{vlm['images']} image(s) and {vlm['videos']} video(s), {vlm['vision_tokens']} image tokens "
            f"({vlm['vision_token_share']:.1%} of all tokens); VLM samples are never cut (truncation reject)"
        )
    acc = (s.details or {}).get("accounting")
    if acc:
        skipped = ", ".join(f"{k}={v['count']} (first at line {v['examples'][0]['line']})" if v["examples"]
                            else f"{k}={v['count']}" for k, v in acc["skipped"].items())
        print(f"rows: {acc['rows_in']} read, {acc['packed']} planned, {acc['truncated']} truncated, "
              f"{acc['skipped_total']} skipped" + (f" ({skipped})" if skipped else ""))
    rows = []
    for r in plan.rows:
        mark = "*" if r.pack_len == plan.recommended_pack_len else ""
        rows.append([
            f"{r.pack_len}{mark}", r.global_batch_size if r.global_batch_size is not None else "-",
            "yes" if r.valid else "no", r.packs, r.lower_bound, f"{r.token_efficiency:.2%}",
            f"{r.alignment_padding_share:.2%}", f"{r.tail_padding_share:.2%}", r.max_seqs_in_pack, r.too_long,
            f"{r.steps_per_epoch:.2f}" if r.steps_per_epoch is not None else "-",
        ])
    print(table(
        ["pack_len", "GBS", "valid", "packs", "lower bound", "token eff", "align pad", "tail pad", "max seqs",
         "too long", "steps/epoch"],
        rows,
    ))
    for r in plan.rows:
        for line in r.reasons + r.notes:
            print(f"  {r.pack_len}: {line}")
    if plan.moe is not None:
        _print_dispatch(plan)
    verdict = "recommended" if plan.recommended_pack_len is not None else "no recommendation"
    print(f"{verdict}: {plan.recommendation}")
    print(f"rule: {plan.rule}")
    return code


def _print_dispatch(plan) -> None:  # noqa: ANN001 - a PackPlan
    moe = plan.moe
    print(f"MoE dispatch ({moe['dispatcher']}, EP={moe['ep']}, "
          f"{'fixed-width' if moe['pad_to_max_length'] else 'variable-width'} packs):")
    rows = []
    for r in plan.rows:
        d = r.dispatch
        if d is None:
            continue
        rows.append([r.pack_len, d["width_rule"], d["tokens_divisor"], f"{d['mean_dispatched_per_rank']:.1f}",
                     d["max_dispatched_per_rank"], f"{d['dispatch_padding_share']:.2%}",
                     f"{d['dispatcher_padding_share']:.2%}"])
    print(table(["pack_len", "width rule", "CP*TP_sp", "mean/rank", "max/rank", "dispatched padding",
                 "added by dispatcher"], rows))
    for r in plan.rows:
        if r.dispatch is not None:
            for line in r.dispatch["notes"]:
                print(f"  {r.pack_len}: {line}")

"""``seqpack inspect``: integrity, statistics and topology fitness of packed Parquet."""

from __future__ import annotations

import argparse

from seqpack.core.choices import VISION_OPTIONS
from seqpack.faces.cli._output import add_json_flag, print_json

NAME = "inspect"
HELP = ("check a packed Parquet artifact (ours or Megatron-Bridge's) or a prepared Energon dataset, and whether "
        "it fits a TP/CP/SP topology")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("path", help="packed Parquet file, glob or directory, or a prepared Energon dataset directory")
    p.add_argument("--tp", type=int, default=None)
    p.add_argument("--cp", type=int, default=None)
    p.add_argument("--sp", action="store_true")
    p.add_argument("--eval-cp", type=int, default=None)
    p.add_argument("--pack-size", type=int, default=None, help="needed for artifacts without a seqpack manifest; "
                   "for an Energon dataset: the seq_length every sample must fit")
    p.add_argument("--eos-id", type=int, default=None, help="EOS id (real-token counts of foreign artifacts)")
    p.add_argument("--fixed-width", action="store_true", help="the run uses pad_to_max_length")
    p.add_argument("--vision", choices=VISION_OPTIONS, default="auto",
                   help="Energon datasets: the vision preset that counts image tokens (default auto: qwen2_vl when "
                   "the dataset holds images)")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Inspect; exit 1 when integrity issues are found or the topology does not fit."""
    from seqpack.verbs.inspection import InspectOptions, inspect_packs

    report = inspect_packs(InspectOptions(
        path=args.path, tp=args.tp, cp=args.cp, sp=args.sp, eval_cp=args.eval_cp, pack_size=args.pack_size,
        eos_id=args.eos_id, fixed_width=args.fixed_width or None, vision=args.vision,
    ))
    failed = not report.ok or (report.topology is not None and not report.topology["usable"])
    if args.json:
        print_json(report.to_dict())
        return 1 if failed else 0
    s = report.stats
    if s.get("kind") == "energon":
        return _print_energon(report, failed)
    print(f"integrity {'OK' if report.ok else 'ISSUES'}: {s['rows']} packs, {s['segments']} sequences in "
          f"{len(report.files)} file(s)")
    print(
        f"  packing efficiency {s['packing_efficiency']:.2%} (real tokens {s['real_token_efficiency']:.2%}), "
        f"alignment padding {s['alignment_padding_share']:.2%}, width padding {s['width_padding_share']:.2%}"
    )
    spp = s["sequences_per_pack"]
    print(f"  sequences per pack: min {spp['min']}, mean {spp['mean']:.1f}, max {spp['max']}; "
          f"inferred pad_seq_to_mult {s['inferred_pad_seq_to_mult']}; pack_size {report.settings['pack_size']}")
    _print_issues(report, lambda issue: f" row {issue['row']}" if issue["row"] >= 0 else "")
    if report.topology is not None:
        t = report.topology
        al = t["alignment"]
        verdict = "usable" if t["usable"] else "NOT usable"
        req = t["requirement"]
        met = "met" if t["recommended_met"] else "not met"
        print(f"  topology TP{al['tp']}/CP{al['cp']}/{'SP' if al['sp'] else 'no SP'}: {verdict} "
              f"(megatron-bridge {req['bridge_version']} requires multiples of {t['required']}, width of "
              f"{t['required_width']}; recommended {t['recommended']}: {met})")
        for reason in t["reasons"]:
            print(f"    - {reason}")
    print("RESULT: " + ("usable" if not failed else "NOT usable" if report.ok else "integrity issues"))
    return 1 if failed else 0


def _print_issues(report, where) -> None:  # noqa: ANN001 - an InspectReport, issue -> its place
    for issue in report.issues:
        print(f"  issue [{issue['check']}]{where(issue)}: {issue['message']}")
    if report.issue_count > len(report.issues):
        print(f"  ... {report.issue_count - len(report.issues)} more issue(s)")


def _print_energon(report, failed: bool) -> int:  # noqa: ANN001 - an InspectReport
    s, st = report.stats, report.settings
    counts = ", ".join(f"{split} {n}" for split, n in s["samples"].items())
    print(f"Energon dataset {'OK' if report.ok else 'ISSUES'}: {sum(s['samples'].values())} samples ({counts}) in "
          f"{len(report.files)} shard(s), schema {st['schema']}, vision {st['vision'] or 'none'}")
    print(f"  {s['rows_with_visuals']} samples carry {s['images']} image(s) and {s['videos']} video(s): "
          f"{s['vision_tokens']} image tokens, {s['text_tokens']} text tokens ({s['vision_token_share']:.1%} image)")
    ln = s["length"]
    print(f"  sample length min {ln['min']} / p50 {ln['p50']} / max {ln['max']} tokens; aligned to "
          f"{st['pad_seq_to_mult']}: {s['aligned_tokens']} tokens")
    _print_issues(report, lambda issue: f" {issue['sample']}")
    if report.topology is not None:
        t = report.topology
        print(f"  topology: {'usable' if t['usable'] else 'NOT usable'} (needs multiples of "
              f"{t['alignment']['pad_seq_to_mult']})")
        for reason in t["reasons"]:
            print(f"    - {reason}")
    print("RESULT: " + ("usable" if not failed else "NOT usable"))
    return 1 if failed else 0

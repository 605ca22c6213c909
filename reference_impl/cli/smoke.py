"""``seqpack smoke``: the packing smoke test (packed == unpacked, no leakage, CP=2 == CP=1, ...)."""

from __future__ import annotations

import argparse

from reference_impl.cli._output import add_json_flag, print_json, table

NAME = "smoke"
HELP = "run the packing smoke test on the embedded demo data (or your config/data) and report each check"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("--path", default="all", help="offline, in_batch, ... or all (default)")
    p.add_argument("--config", help="training config (YAML/JSON); default: a small CP=2 config per path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override on the config (repeatable)")
    p.add_argument("--data", help="JSONL rows to pack (default: the bundled demo data)")
    p.add_argument("--size", default="small", choices=("tiny", "small", "medium"), help="number of rows used")
    p.add_argument("--no-cp", action="store_true", help="skip the multi-process CP=2 check")
    p.add_argument("--seed", type=int, default=1234)
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Run and print a table per path; exit 1 if any check fails."""
    from reference_impl.errors import UsageError
    from reference_impl.smoke import PATHS, run_packing_smoke_test

    paths = list(PATHS) if args.path == "all" else [args.path]
    if args.config and len(paths) > 1:
        raise UsageError("--config describes one packing path; pass --path too")
    reports = [
        run_packing_smoke_test(p, args.config, args.data, overrides=args.overrides, size=args.size,
                               seed=args.seed, cp_check=not args.no_cp)
        for p in paths
    ]
    ok = all(r.ok for r in reports)
    if args.json:
        print_json({"ok": ok, "reports": [r.to_dict() for r in reports]})
        return 0 if ok else 1
    for r in reports:
        d = r.data
        print(f"{r.path}: {'PASS' if r.ok else 'FAIL'}  ({d['samples']} samples from {d['rows']} rows, "
              f"{d['batches']} batches, {r.timings['total_s']:.1f} s)")
        rows = []
        for c in r.checks:
            status = "skip" if c.passed is None else ("pass" if c.passed else "FAIL")
            rows.append([c.name, status, c.message])
        print(table(["check", "result", "detail"], rows))
        for c in r.checks:
            if c.passed is False and c.fix:
                print(f"  fix ({c.name}{', ' + c.rule_id if c.rule_id else ''}): {c.fix}")
        print()
    print("ALL PASS" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1

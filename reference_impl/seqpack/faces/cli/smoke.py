"""``seqpack smoke``: the packing smoke test (packed == unpacked, no leakage, CP=2 == CP=1, ...)."""

from __future__ import annotations

import argparse

from seqpack.core.choices import PACKING_PATHS, SMOKE_SIZES, LazyChoices
from seqpack.faces.cli._output import add_json_flag, print_json, table

NAME = "smoke"
HELP = "run the packing smoke test on the embedded demo data (or your config/data) and report each check"
#: The optional extra this command needs (seqpack.core.extras): torch and megatron-core.
EXTRA = "train"

#: ``--path`` values: every registered packing path, or ``all`` of them.
PATH_CHOICES = LazyChoices(lambda: ("all", *PACKING_PATHS))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("--path", default="all", choices=PATH_CHOICES, metavar="PATH",
                   help="a registered packing path or all (default): %(choices)s")
    p.add_argument("--config", help="training config (YAML/JSON); default: a small CP=2 config per path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override on the config (repeatable)")
    p.add_argument("--data", help="JSONL rows to pack (default: the bundled demo data)")
    p.add_argument("--size", default="small", choices=SMOKE_SIZES, help="number of rows used")
    p.add_argument("--no-cp", action="store_true",
                   help="skip the multi-process CP=2 check (the result is then INCOMPLETE, not PASS)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--moe", action="store_true",
                   help="reference model with a mixture-of-experts MLP: adds the moe_router_statistics check")
    p.add_argument("--mtp", action="store_true",
                   help="reference model with a multi-token-prediction depth: adds the mtp_equals_unpacked check")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Run and print a table per path; exit 0 only when every check of every path ran and passed."""
    from seqpack.core.errors import UsageError
    from seqpack.smoke.options import model_options
    from seqpack.verbs.smoke_test import SmokeOptions, smoke_paths

    paths = list(PACKING_PATHS) if args.path == "all" else [args.path]
    if args.config and len(paths) > 1:
        raise UsageError("--config describes one packing path; pass --path too")
    # one run: the CP checks of all paths share one launch of CP ranks
    reports = smoke_paths(SmokeOptions(path=paths[0], config_path=args.config, overrides=args.overrides,
                                       data=args.data, size=args.size, seed=args.seed, cp_check=not args.no_cp,
                                       model=model_options(args.moe, args.mtp)), paths)
    ok = all(r.ok for r in reports)
    result = "pass" if ok else ("fail" if any(r.result == "fail" for r in reports) else "incomplete")
    if args.json:
        print_json({"ok": ok, "result": result, "reports": [r.to_dict() for r in reports]})
        return 0 if ok else 1
    for r in reports:
        d = r.data
        print(f"{r.path}: {r.result.upper()}  ({d['samples']} samples from {d['rows']} rows, "
              f"{d['batches']} batches, {r.timings['total_s']:.1f} s)")
        rows = []
        for c in r.checks:
            status = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}[c.status]
            rows.append([c.name, status, c.reason if c.status == "skipped" else c.message])
        print(table(["check", "result", "detail"], rows))
        for c in r.checks:
            if c.status == "failed" and c.fix:
                print(f"  fix ({c.name}{', ' + c.rule_id if c.rule_id else ''}): {c.fix}")
        print()
    skipped = sum(len(r.skipped) for r in reports)
    print({"pass": "ALL PASS", "fail": "SOME CHECKS FAILED",
           "incomplete": f"INCOMPLETE: {skipped} check(s) skipped, so this run proves less than a pass"}[result])
    return 0 if ok else 1

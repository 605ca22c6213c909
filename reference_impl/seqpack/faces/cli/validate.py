"""``seqpack validate``: check a training config against every packing rule."""

from __future__ import annotations

import argparse

from seqpack.core.choices import BRIDGE_VERSIONS, DEFAULT_BRIDGE_VERSION
from seqpack.faces.cli._output import add_json_flag, print_json

NAME = "validate"
HELP = "validate a training config (YAML/JSON) against the packing rules; exit 1 on violations"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("config", nargs="?", help="config file (YAML or JSON); omit with --example")
    p.add_argument("--example", help="validate a bundled example config by name (see --list-examples)")
    p.add_argument("--list-examples", action="store_true", help="list the bundled example configs")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="dotted override, e.g. --set dataset.enable_in_batch_packing=true (repeatable)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.add_argument("--bridge-version", choices=BRIDGE_VERSIONS, default=DEFAULT_BRIDGE_VERSION,
                   help="the Megatron-Bridge the config is for: %(default)s (the release the upstream lane checks, "
                        "default) or main (read, not checkable in the lane)")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Validate and print the report."""
    from seqpack.core.errors import UsageError
    from seqpack.config.examples import example_path, list_examples
    from seqpack.verbs.validation import ValidateOptions, validate

    if args.list_examples:
        names = list_examples()
        if args.json:
            print_json(names)
        else:
            print("\n".join(names))
        return 0
    if args.example is None and args.config is None:
        raise UsageError("give a config file (or --example NAME)")
    report = validate(ValidateOptions(path=args.config, example=args.example, overrides=args.overrides,
                                      bridge_version=args.bridge_version))
    source = args.config or example_path(args.example)
    failed = not report.ok or (args.strict and report.warnings)
    if args.json:
        print_json(report.to_dict())
        return 1 if failed else 0
    status = "VALID" if report.ok else "INVALID"
    print(
        f"{status}: {report.rules_checked} rules checked, {len(report.violations)} violation(s), "
        f"{len(report.warnings)} warning(s) for Megatron-Bridge {report.bridge_version} [{source}]"
    )
    for f in report.violations:
        print(f"  error   {f.one_line()}")
    for f in report.warnings:
        print(f"  warning {f.one_line()}")
    r = report.resolved
    for name, why in r.get("unknown", {}).items():
        print(f"  unknown {why}")
    if r.get("unchecked_rules"):
        print(f"  not checked (they depend on an unset value): "
              f"{', '.join(u['rule_id'] for u in r['unchecked_rules'])}")
    print(
        f"resolved: path={r['packing_path']} DP={r['data_parallel_size']} pad_seq_to_mult={r['pad_seq_to_mult']} "
        f"seq_length={r['seq_length']} dataloader={r['dataloader_type']} "
        f"token_slots_per_step={r['token_slots_per_step']}"
    )
    moe = r.get("moe_dispatch")
    if moe:
        width = (f" {moe['per_rank_tokens']} tokens per rank" if moe["per_rank_tokens"] is not None else "")
        chunk = f", chunk padding {moe['chunk_padding']} per dispatch" if moe["chunk_padding"] is not None else ""
        print(f"moe_dispatch: {moe['dispatcher']} EP={moe['ep']} rule={moe['width_rule']}{width}{chunk}, "
              f"width multiple {moe['width_multiple']} ({moe['reason']})")
        for note in moe["notes"]:
            print(f"  note: {note}")
    return 1 if failed else 0

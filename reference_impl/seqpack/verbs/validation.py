"""``validate``: check a training config (file, text, bundled example or mapping) against every rule."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from seqpack.config.schema import TrainingConfig
from seqpack.config.validate import ValidationReport, validate_config
from seqpack.core.choices import EXAMPLES
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_CONFIG_CHARS, MAX_OVERRIDE_CHARS, MAX_OVERRIDES
from seqpack.core.results import Result
from seqpack.verbs.common import bridge_version_option
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["UNKNOWN_WHEN_UNSET", "VALIDATE", "ExampleList", "ValidateOptions", "config_source", "overrides_option",
           "validate"]

#: The form of a dotted override (published in the MCP schema; the config loader checks it with a clear message).
OVERRIDE_PATTERN = r"^[A-Za-z_][\w.]*="


def overrides_option(help: str = "dotted override, e.g. dataset.enable_in_batch_packing=true (repeatable)") -> Any:
    """Dotted ``KEY=VALUE`` overrides on a config (``--set`` on the CLI)."""
    return option((), help=help, flag="--set", metavar="KEY=VALUE", max_items=MAX_OVERRIDES,
                  max_length=MAX_OVERRIDE_CHARS, min_length=3, pattern=OVERRIDE_PATTERN)


def config_text_option(help: str = "the config as YAML or JSON text") -> Any:
    """A config given as text (MCP and the library; the CLI reads files)."""
    return option(None, help=help, max_length=MAX_CONFIG_CHARS, cli=False)


@verb_options
class ValidateOptions:
    """Where the config comes from (at most one; none: the defaults) and the dotted overrides.

    ``path``: a YAML/JSON file; ``config_text``: YAML/JSON text; ``example``: a bundled example
    config by name; ``config``: a mapping or :class:`~seqpack.config.TrainingConfig`.
    ``bridge_version``: the Megatron-Bridge the config is for (``seqpack.core.versions.BRIDGE_TARGETS``;
    default: the newest release the upstream lane checks); only the rules that hold for it are checked.
    ``strict`` (exit 1 on warnings too) and ``list_examples`` are the CLI's.
    """

    path: str | os.PathLike[str] | None = option(None, help="config file (YAML or JSON); omit with --example",
                                                 positional=True, metavar="config", path="file")
    config_text: str | None = config_text_option()
    example: str | None = option(None, help="a bundled example config by name (see --list-examples)",
                                 choices=EXAMPLES, check_choices=False)
    config: Mapping[str, Any] | Any = option(None, help="a mapping or TrainingConfig", cli=False, mcp=False)
    overrides: Sequence[str] = overrides_option()
    bridge_version: str = bridge_version_option("the config is for")
    strict: bool = option(False, help="exit 1 on warnings too", mcp=False)
    list_examples: bool = option(False, help="list the bundled example configs", mcp=False)
    packs: str | os.PathLike[str] | None = option(
        None, help="offline packs the config will train on (a pack folder, or the output root pack --out wrote): "
        "check pack size, alignment and metadata against the config, and give steps per epoch and train_iters for "
        "its global batch size", path="artifact")


def config_source(path: Any = None, config_text: str | None = None, example: str | None = None,
                  config: Any = None, *, offered: tuple[str, ...] = ("config_text", "path", "example")) -> Any:
    """The one config source a verb loads (None: the defaults); refuses two sources at once.

    ``offered`` names the caller's sources in messages (text, file, example: ``path`` may be
    called otherwise, ``example`` may be absent).
    """
    names = dict(zip(("config_text", "path", "example"), offered)) | {"config": "config"}
    given = [names.get(n, n) for n, v in (("config_text", config_text), ("path", path), ("example", example),
                                          ("config", config)) if v is not None]
    if len(given) > 1:
        raise UsageError(f"give one of {', '.join(offered[:-1])} or {offered[-1]}, not {' and '.join(given)}.")
    if config_text is not None:
        if ":" not in config_text and not config_text.lstrip().startswith("{"):
            raise UsageError(
                "config_text must be a YAML or JSON mapping, e.g. 'train: {micro_batch_size: 1}'",
                field="config_text", fix="to validate a file, pass it as path",
            )
        # A trailing newline makes the loader read the string as text, never as a file name.
        return config_text if config_text.endswith("\n") else config_text + "\n"
    if path is not None:
        return path
    if example is not None:
        from seqpack.config.examples import example_path

        return example_path(example)
    return config


#: Values a config may leave unset that the rules cannot assume: the dotted keys that set them,
#: the values tried in their place, and what the report says. A rule whose outcome changes over
#: the tried values is not decided by the config: it is listed as unchecked, never passed or failed.
UNKNOWN_WHEN_UNSET: dict[str, tuple[tuple[str, ...], str]] = {
    "dist.world_size": (("dist.world_size",), "the data-parallel size is unknown"),
    "seq_length": (("model.seq_length", "dataset.seq_length"), "the sequence length is unknown"),
}
_SEQ_LENGTHS = (128, 1000, 2048, 3000, 4096, 4097, 8192, 32768, 131072)
_DP_FACTORS = (1, 2, 3, 4, 5, 6, 7, 8, 16, 64)


def _variants(cfg: TrainingConfig, name: str) -> list[TrainingConfig]:
    """``cfg`` with the unknown value ``name`` replaced by each value tried in its place."""
    import math

    if name == "dist.world_size":
        m = cfg.model
        mp = m.tensor_model_parallel_size * m.pipeline_model_parallel_size
        unit = math.lcm(mp * m.context_parallel_size, mp * (cfg.dist.eval_context_parallel_size or 1))
        worlds = [unit * k for k in _DP_FACTORS] + ([unit + 1] if unit > 1 else [])
        return [replace(cfg, dist=replace(cfg.dist, world_size=w)) for w in worlds]
    return [replace(cfg, model=replace(cfg.model, seq_length=n), dataset=replace(cfg.dataset, seq_length=n))
            for n in _SEQ_LENGTHS]


def _undecided(cfg: TrainingConfig, unknown: list[str], target: str) -> dict[str, str]:
    """Rule id -> the unset value its outcome depends on."""
    from seqpack.config.resolve import resolve
    from seqpack.config.rules import RULES

    out: dict[str, str] = {}
    for name in unknown:
        variants = [resolve(v, target) for v in _variants(cfg, name)]
        for rule in RULES:
            if not rule.applies_to(target):
                continue
            if rule.id not in out and len({rule.check(v) is None for v in variants}) > 1:
                out[rule.id] = name
    return out


def validate(options: ValidateOptions) -> ValidationReport:
    """Load the config (see :class:`ValidateOptions`), apply the overrides and check every rule.

    A config that breaks rules is a normal report (``ok`` false); one that cannot be read (bad
    YAML, unknown key, wrong type) raises ``ConfigError`` naming the file, line and field.

    Unknown stays unknown: a config that leaves ``dist.world_size`` (or both sequence lengths)
    unset does not get a default assumed for it. A rule whose outcome depends on such a value is
    not checked; ``resolved["unchecked_rules"]`` lists it with the value it waits for, and
    ``resolved["unknown"]`` names the unset values (DP shows as null).
    """
    check_options(options)
    report, cfg, bridge = _validated(options)
    report = replace(report, not_checked=list(bridge))
    if options.packs is None:
        return report
    from seqpack.packing.offline.config_check import check_packs

    found = check_packs(cfg, options.packs, given=bridge)
    return replace(report, ok=report.ok and found.ok, packs=found.to_dict())


def _validated(options: ValidateOptions) -> tuple[ValidationReport, TrainingConfig, dict[str, Any]]:
    """The report, the loaded config and the Megatron-Bridge fields no rule reads (with their values)."""
    from seqpack.config.load import load_config_report
    from seqpack.config.rules import RULES

    from seqpack.config.validate import bridge_target

    target = bridge_target(options.bridge_version)
    source = config_source(options.path, options.config_text, options.example, options.config)
    cfg, given, bridge = load_config_report(source, list(options.overrides))
    unknown = [] if given is None else [
        name for name, (keys, _) in UNKNOWN_WHEN_UNSET.items() if not any(k in given for k in keys)
    ]
    if not unknown:
        return validate_config(cfg, bridge_version=target), cfg, bridge
    undecided = _undecided(cfg, unknown, target)
    # a decided rule has one outcome for every value tried: check it on the first of them
    checked = _variants(cfg, "dist.world_size")[0] if "dist.world_size" in unknown else cfg
    report = validate_config(checked, rules=[r for r in RULES if r.id not in undecided], bridge_version=target)
    resolved = dict(report.resolved)
    resolved["unknown"] = {name: f"{' / '.join(UNKNOWN_WHEN_UNSET[name][0])} not set: "
                                 f"{UNKNOWN_WHEN_UNSET[name][1]}" for name in unknown}
    resolved["unchecked_rules"] = [{"rule_id": rule_id, "needs": " or ".join(UNKNOWN_WHEN_UNSET[name][0])}
                                   for rule_id, name in undecided.items()]
    config = cfg.to_dict()
    if "dist.world_size" in unknown:
        resolved.update(world_size=None, data_parallel_size=None, micro_batches_per_step_per_rank=None)
        config["dist"]["world_size"] = None
    if "seq_length" in unknown:
        resolved["seq_length"] = None
        if resolved.get("packing_path") != "offline":
            resolved["token_slots_per_step"] = None
    return replace(report, resolved=resolved, config=config), cfg, bridge


# ------------------------------------------------------------------------------------------------
# The CLI's view
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExampleList(Result):
    """The bundled example configs (``seqpack validate --list-examples``)."""

    names: list[str]


def validate_cli(options: ValidateOptions) -> ValidationReport | ExampleList:
    """What ``seqpack validate`` runs: the example list, or the validation of a file or an example."""
    if options.list_examples:
        from seqpack.config.examples import list_examples

        return ExampleList(names=list_examples())
    if options.example is None and options.path is None:
        raise UsageError("give a config file (or --example NAME)")
    return validate(options)


def render_validation(report: ValidationReport | ExampleList, options: ValidateOptions) -> str:
    """The CLI's text: the verdict, each finding in one line, the unknowns and the resolved values."""
    if isinstance(report, ExampleList):
        return "\n".join(report.names)
    from seqpack.config.examples import example_path

    source = options.path or example_path(options.example)
    out = [f"{'VALID' if report.ok else 'INVALID'}: {report.rules_checked} rules checked, "
           f"{len(report.violations)} violation(s), {len(report.warnings)} warning(s) for Megatron-Bridge "
           f"{report.bridge_version} [{source}]"
           + ("; the packs do not fit it (below)" if report.packs is not None and not report.packs["ok"] else "")]
    out += [f"  error   {f.one_line()}" for f in report.violations]
    out += [f"  warning {f.one_line()}" for f in report.warnings]
    r = report.resolved
    out += [f"  unknown {why}" for why in r.get("unknown", {}).values()]
    if r.get("unchecked_rules"):
        out.append(f"  not checked (they depend on an unset value): "
                   f"{', '.join(u['rule_id'] for u in r['unchecked_rules'])}")
    out.append(f"resolved: path={r['packing_path']} DP={r['data_parallel_size']} "
               f"pad_seq_to_mult={_alignment_words(r)} seq_length={r['seq_length']} dataloader={r['dataloader_type']} "
               f"token_slots_per_step={r['token_slots_per_step']}")
    if report.not_checked:
        names = report.not_checked
        out.append(f"not checked: {len(names)} Megatron-Bridge field(s) no packing rule reads (accepted): "
                   f"{', '.join(names[:12])}{', ...' if len(names) > 12 else ''}")
    if report.packs is not None:
        out += _render_packs(report.packs)
    moe = r.get("moe_dispatch")
    if moe:
        width = f" {moe['per_rank_tokens']} tokens per rank" if moe["per_rank_tokens"] is not None else ""
        chunk = f", chunk padding {moe['chunk_padding']} per dispatch" if moe["chunk_padding"] is not None else ""
        out.append(f"moe_dispatch: {moe['dispatcher']} EP={moe['ep']} rule={moe['width_rule']}{width}{chunk}, "
                   f"width multiple {moe['width_multiple']} ({moe['reason']})")
        out += [f"  note: {note}" for note in moe["notes"]]
    return "\n".join(out)


def _alignment_words(r: dict[str, Any]) -> str:
    """``4 (set in the config; required 4, recommended 8)``, or the recommended value when the config sets none."""
    required = r.get("pad_seq_to_mult_required")
    need = f"required {required}" if required is not None else "the path is not in this Megatron-Bridge"
    configured = r.get("pad_seq_to_mult_configured")
    if configured is not None:
        return f"{configured} (set in the config; {need}, recommended {r['pad_seq_to_mult']})"
    return f"{r['pad_seq_to_mult']} (recommended; {need})"


def _render_packs(p: dict[str, Any]) -> list[str]:
    """``--packs``: the packs, each finding, the steps per epoch and train_iters."""
    counts = ", ".join(f"{split} {n}" for split, n in p["packs"].items())
    out = [f"packs: {'OK' if p['ok'] else 'DO NOT FIT'} {p['pack_dir']} ({counts} packs of {p['pack_size']} tokens, "
           f"pad_seq_to_mult {p['pad_seq_to_mult']}, tokenizer {p['tokenizer']})"]
    out += [f"  {f['severity']:<7} [{f['id']}] {f['message']}. Fix: {f['fix']}" for f in p["findings"]]
    if p["steps_per_epoch"] is not None:
        out.append(f"  steps per epoch at GBS {p['global_batch_size']}: {p['full_steps_per_epoch']} full "
                   f"({p['steps_per_epoch']:.2f}); train_iters for {p['num_epochs']} epoch(s): "
                   f"{p['suggested_train_iters']}")
    out += [f"  note: {n}" for n in p["notes"]]
    return out


def _validation_json(report: ValidationReport | ExampleList, options: ValidateOptions) -> Any:
    return report.names if isinstance(report, ExampleList) else report.to_dict()


def _validation_exit(report: ValidationReport | ExampleList, options: ValidateOptions) -> int:
    if isinstance(report, ExampleList):
        return 0
    return 1 if not report.ok or (options.strict and report.warnings) else 0


VALIDATE = Verb(
    name="validate", options=ValidateOptions, function=validate, cli_function=validate_cli,
    render=render_validation, to_json=_validation_json, exit_code=_validation_exit,
    help="validate a training config (YAML/JSON) against the packing rules; exit 1 on violations",
    tools=(Tool(
        "validate_config", title="Validate a training config against the packing rules",
        description="""Check a Megatron-Bridge-style training config against every packing rule.

Give one of config_text, path or example (or none: the defaults), plus optional overrides.
bridge_version selects the rules for that Megatron-Bridge: under the release, GPT-SFT in-batch,
Energon native and global-batch packing are errors (no release has them).
Returns ok, the violations and warnings (rule id, message naming the fields and values,
fix), the resolved values (data-parallel size, token slots per step, pad_seq_to_mult: the
recommended value for the config's path, beside pad_seq_to_mult_required, the minimum that
Megatron-Bridge version needs, and pad_seq_to_mult_configured, the value the config pins) and
the config that was checked. Every field of Megatron-Bridge 0.6.2's config dataclasses is
accepted; those no packing rule reads are listed in not_checked. With packs_path (the packs
the job will read) it also checks pack size, alignment and metadata against the config and
gives steps per epoch and train_iters (packs). A config that breaks rules is a normal result
(ok=false); a config that cannot be read (bad YAML, a key neither seqpack nor Bridge knows)
is a tool error naming the line and the closest real field.""",
    ),),
)

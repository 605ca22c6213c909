"""``validate``: check a training config (file, text, bundled example or mapping) against every rule."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from seqpack.config.schema import TrainingConfig
from seqpack.config.validate import ValidationReport, validate_config
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_CONFIG_CHARS, MAX_OVERRIDE_CHARS, MAX_OVERRIDES
from seqpack.verbs.common import check_path
from seqpack.core.versions import DEFAULT_BRIDGE_TARGET

__all__ = ["UNKNOWN_WHEN_UNSET", "ValidateOptions", "check_overrides", "config_source", "validate"]


@dataclass(frozen=True, kw_only=True)
class ValidateOptions:
    """Where the config comes from (at most one; none: the defaults) and the dotted overrides.

    ``path``: a YAML/JSON file; ``config_text``: YAML/JSON text; ``example``: a bundled example
    config by name; ``config``: a mapping or :class:`~seqpack.config.TrainingConfig`.
    ``bridge_version``: the Megatron-Bridge the config is for (``seqpack.core.versions.BRIDGE_TARGETS``;
    default: the newest release the upstream lane checks); only the rules that hold for it are checked.
    """

    path: str | os.PathLike[str] | None = None
    config_text: str | None = None
    example: str | None = None
    config: Mapping[str, Any] | Any = None
    overrides: Sequence[str] = ()
    bridge_version: str = DEFAULT_BRIDGE_TARGET


def check_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides as a list, within the limits (count and length)."""
    items = list(overrides)
    if len(items) > MAX_OVERRIDES:
        raise UsageError(f"{len(items)} overrides given; the limit is {MAX_OVERRIDES}", field="overrides")
    for item in items:
        if not isinstance(item, str) or len(item) > MAX_OVERRIDE_CHARS:
            raise UsageError(f"an override must be a string of at most {MAX_OVERRIDE_CHARS} characters",
                             field="overrides")
    return items


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
        if not isinstance(config_text, str) or len(config_text) > MAX_CONFIG_CHARS:
            raise UsageError(f"config_text must be text of at most {MAX_CONFIG_CHARS} characters",
                             field="config_text")
        if ":" not in config_text and not config_text.lstrip().startswith("{"):
            raise UsageError(
                "config_text must be a YAML or JSON mapping, e.g. 'train: {micro_batch_size: 1}'",
                field="config_text", fix="to validate a file, pass it as path",
            )
        # A trailing newline makes the loader read the string as text, never as a file name.
        return config_text if config_text.endswith("\n") else config_text + "\n"
    if path is not None:
        return check_path(names["path"], path)
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
    from seqpack.config.load import load_config_with_keys
    from seqpack.config.rules import RULES

    from seqpack.config.validate import bridge_target

    target = bridge_target(options.bridge_version)
    source = config_source(options.path, options.config_text, options.example, options.config)
    cfg, given = load_config_with_keys(source, check_overrides(options.overrides))
    unknown = [] if given is None else [
        name for name, (keys, _) in UNKNOWN_WHEN_UNSET.items() if not any(k in given for k in keys)
    ]
    if not unknown:
        return validate_config(cfg, bridge_version=target)
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
    return replace(report, resolved=resolved, config=config)

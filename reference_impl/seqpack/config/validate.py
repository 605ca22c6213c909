"""``validate_config``: run every rule of the registry against a config and report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from seqpack.config.load import load_config, load_config_report
from seqpack.config.resolve import resolve
from seqpack.config.rules import RULES, Rule
from seqpack.config.schema import TrainingConfig
from seqpack.core.errors import ConfigViolationError
from seqpack.core.results import Result
from seqpack.core.versions import DEFAULT_BRIDGE_TARGET, TARGET_MEANING, check_target


@dataclass(frozen=True)
class Finding(Result):
    """One broken rule: which, how bad, what exactly (fields and values), and the fix."""

    rule_id: str
    severity: str
    family: str
    title: str
    message: str
    fix: str
    fields: dict[str, Any]
    provenance: str
    source: str

    def one_line(self) -> str:
        """``[RULE-ID] message. Fix: ...`` for terminals and logs."""
        return f"[{self.rule_id}] {self.message}. Fix: {self.fix}"


@dataclass(frozen=True)
class ValidationReport(Result):
    """Result of :func:`validate_config`; ``ok`` is false when any error-severity rule is broken."""

    ok: bool
    violations: list[Finding]
    warnings: list[Finding]
    resolved: dict[str, Any]
    rules_checked: int
    config: dict[str, Any] = field(repr=False)  # in the JSON form too: the report shows what was checked
    bridge_version: str = DEFAULT_BRIDGE_TARGET
    #: Megatron-Bridge fields the config gave that no rule reads (accepted, not checked).
    not_checked: list[str] = field(default_factory=list)
    #: ``validate --packs``: the config against the packs on disk (``seqpack.packing.offline.config_check``).
    packs: dict[str, Any] | None = None

    @property
    def rule_ids(self) -> list[str]:
        """Ids of every broken rule, errors first."""
        return [f.rule_id for f in self.violations + self.warnings]

    def raise_for_violations(self) -> None:
        """Raise :class:`ConfigViolationError` listing every error-severity finding."""
        if self.violations:
            first = self.violations[0]
            text = "; ".join(f.one_line() for f in self.violations)
            raise ConfigViolationError(text, rule_id=first.rule_id)


def get_path(cfg: TrainingConfig, path: str) -> Any:
    """Value at a dotted path (``dataset.dataset_kwargs.pad_to_max_length`` reads into the dict)."""
    node: Any = cfg
    for part in path.split("."):
        if node is None:
            return None
        if isinstance(node, Mapping):
            node = node.get(part)
        else:
            node = getattr(node, part, None)
    return node


def _finding(rule: Rule, message: str, cfg: TrainingConfig) -> Finding:
    return Finding(
        rule_id=rule.id,
        severity=rule.severity,
        family=rule.family,
        title=rule.title,
        message=message,
        fix=rule.fix,
        fields={p: get_path(cfg, p) for p in rule.fields},
        provenance=rule.provenance,
        source=rule.source,
    )


def validate_config(
    config: TrainingConfig | Mapping[str, Any] | str | Path | Any | None = None,
    overrides: Iterable[str | tuple[str, Any]] = (),
    *,
    rules: Iterable[Rule] = RULES,
    bridge_version: str | None = DEFAULT_BRIDGE_TARGET,
) -> ValidationReport:
    """Check a config (object, dict, YAML/JSON path or text, or a live Megatron-Bridge ``ConfigContainer``
    such as a recipe function returns: :mod:`seqpack.config.bridge_live`) against every packing rule.
    A ``ConfigContainer`` carries no world size: give ``dist.world_size`` as an override, as for its YAML dump.

    ``bridge_version`` is the Megatron-Bridge the config is for (``seqpack.core.versions.BRIDGE_TARGETS``:
    the release the upstream lane checks, the default, or ``main``): only the rules that hold for it are
    checked. ``None`` checks every given rule whatever its versions, for the Bridge that has the config's
    packing features (:func:`version_target`; seqpack's own loaders use that).
    """
    ignored: dict[str, Any] = {}
    if isinstance(config, TrainingConfig) and not overrides:
        cfg = config
    else:
        cfg, _, ignored = load_config_report(config, overrides)
    # None: seqpack's own loaders; they follow the Bridge that has the config's features
    target = version_target(cfg)[0] if bridge_version is None else bridge_target(bridge_version)
    resolved = resolve(cfg, target)
    errors: list[Finding] = []
    warnings: list[Finding] = []
    count = 0
    for rule in rules:
        if bridge_version is not None and not rule.applies_to(target):
            continue
        count += 1
        message = rule.check(resolved)
        if message is None:
            continue
        (errors if rule.severity == "error" else warnings).append(_finding(rule, message, cfg))
    return ValidationReport(
        ok=not errors,
        violations=errors,
        warnings=warnings,
        resolved=resolved.summary(),
        rules_checked=count,
        config=cfg.to_dict(),
        bridge_version=target,
        not_checked=list(ignored),
    )


def bridge_target(bridge_version: str) -> str:
    """``bridge_version`` if it is a ``--bridge-version`` choice, else a UsageError naming the choices."""
    from seqpack.core.errors import UsageError

    try:
        return check_target(bridge_version)
    except ValueError as exc:
        raise UsageError(str(exc), field="bridge_version",
                         fix="; ".join(f"{k}: {v}" for k, v in TARGET_MEANING.items())) from None


def check_rules(
    config: TrainingConfig | Mapping[str, Any] | str | Path | None,
    rule_ids: Iterable[str],
) -> list[Finding]:
    """Run only the named rules; raise :class:`ConfigViolationError` if an error-severity one fires.

    Packing paths call this at construction time so that, e.g., the in-batch loader rejects
    ``dataloader_type=batch`` with exactly the registry's rule id, message and fix. Returns the
    warning findings (for the caller to log).
    """
    from seqpack.config.rules import RULES_BY_ID
    from seqpack.core.errors import UsageError

    selected = []
    for rule_id in rule_ids:
        if rule_id not in RULES_BY_ID:
            raise UsageError(f"unknown rule id {rule_id!r}")
        selected.append(RULES_BY_ID[rule_id])
    report = validate_config(config, rules=selected, bridge_version=None)
    report.raise_for_violations()
    return report.warnings


def version_target(config: TrainingConfig) -> tuple[str, list[str]]:
    """The ``--bridge-version`` a config's packing features exist in, and the release-only rules that say so.

    The default release, unless the config uses a feature only Bridge main (or a pull request) has; then
    ``main`` and the ids of the release's rules that refuse the feature (``*-BRIDGE-VERSION``). seqpack's
    own paths (smoke test) validate a config for the Bridge it follows this way, and say which one.
    """
    from seqpack.config.rules import RULES
    from seqpack.core.versions import BRIDGE_MAIN

    resolved = resolve(config, DEFAULT_BRIDGE_TARGET)
    lacking = [r.id for r in RULES if r.id.endswith("-BRIDGE-VERSION") and r.applies_to(DEFAULT_BRIDGE_TARGET)
               and r.check(resolved) is not None]
    return (BRIDGE_MAIN if lacking else DEFAULT_BRIDGE_TARGET), lacking

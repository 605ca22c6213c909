"""The rule registry: every rule fires on its trigger config and not on the nearby fixed one."""

import re

import pytest

from seqpack.config import RULES, get_rule, search_rules, validate_config
from seqpack.config.rules import FAMILIES
from seqpack.config.validate import get_path
from seqpack.core.errors import ConfigViolationError

IDS = [r.id for r in RULES]


def test_ids_unique_and_well_formed():
    assert len(set(IDS)) == len(IDS)
    for rule in RULES:
        assert re.fullmatch(r"[A-Z0-9]+(-[A-Z0-9]+)+", rule.id), rule.id
        assert rule.family in FAMILIES
        assert rule.severity in ("error", "warning")
        assert rule.provenance in ("upstream", "documented", "stricter")
        assert rule.title and rule.fix and rule.source and rule.fields


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_rule_fires_on_trigger_and_not_on_fixed(rule):
    for target in rule.targets:  # every Megatron-Bridge version the rule holds for
        report = validate_config(None, list(rule.trigger.items()), bridge_version=target)
        assert rule.id in report.rule_ids, f"{rule.id} did not fire on its trigger config ({target})"
        finding = next(f for f in report.violations + report.warnings if f.rule_id == rule.id)
        assert finding.severity == rule.severity
        fixed = validate_config(None, list({**rule.trigger, **rule.fixed}.items()), bridge_version=target)
        assert rule.id not in fixed.rule_ids, f"{rule.id} still fires after its fix ({target})"


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_message_names_the_offending_values(rule):
    report = validate_config(None, list(rule.trigger.items()), bridge_version=rule.targets[0])
    finding = next(f for f in report.violations + report.warnings if f.rule_id == rule.id)
    # at least one of the rule's fields (by its last name part) appears in the message with a value
    names = {f.rsplit(".", 1)[-1] for f in rule.fields}
    assert any(n in finding.message for n in names), finding.message
    assert set(finding.fields) == set(rule.fields)


def test_example_keys_are_real_config_fields():
    # a typo in an example key would raise ConfigError here instead of silently testing nothing
    for rule in RULES:
        for key in {**rule.trigger, **rule.fixed}:
            report = validate_config(None, [(key, {**rule.trigger, **rule.fixed}[key])])
            assert report.config is not None


def test_default_config_is_clean():
    report = validate_config(None)
    assert report.ok and report.violations == [] and report.warnings == []
    assert report.rules_checked == len([r for r in RULES if r.applies_to(report.bridge_version)])
    main = validate_config(None, bridge_version="main")
    assert main.ok and main.warnings == [] and main.rules_checked == len([r for r in RULES if r.applies_to("main")])


def test_resolved_values():
    r = validate_config(
        None,
        [
            ("dist.world_size", 16),
            ("model.tensor_model_parallel_size", 4),
            ("model.context_parallel_size", 2),
            ("model.sequence_parallel", True),
            ("dataset.enable_offline_packing", True),
            ("dataset.offline_packing_specs.packed_sequence_size", 8192),
            ("train.global_batch_size", 8),
        ],
    ).resolved
    assert r["data_parallel_size"] == 2
    assert r["pad_seq_to_mult"] == 8
    assert r["packing_path"] == "offline"
    assert r["token_slots_per_step"] == 65536
    assert r["micro_batches_per_step_per_rank"] == 4


def test_several_paths_are_all_reported():
    report = validate_config(None, [("dataset.enable_offline_packing", True), ("dataset.enable_in_batch_packing", True)])
    assert report.resolved["packing_path"] == ["offline", "in_batch"]
    assert "PACK-EXCLUSIVE-OFFLINE-IN-BATCH" in report.rule_ids


def test_offline_pad_mult_matching_topology_passes_and_multiples_are_fine():
    base = [
        ("dist.world_size", 8),
        ("model.tensor_model_parallel_size", 4),
        ("model.context_parallel_size", 2),
        ("model.sequence_parallel", True),
        ("model.calculate_per_token_loss", True),
        ("dataset.enable_offline_packing", True),
        ("dataset.offline_packing_specs.packed_sequence_size", 2048),
    ]
    def ids(mult):
        report = validate_config(None, base + [("dataset.offline_packing_specs.pad_seq_to_mult", mult)])
        return [f.rule_id for f in report.violations], [f.rule_id for f in report.warnings]

    # 2 breaks the 2*CP=4 the THD CP partition needs: an error
    assert "PACK-OFFLINE-PAD-MULT-TOPOLOGY" in ids(2)[0]
    # 4 satisfies CP but not the recommended lcm(4, CP*TP=8): a warning only
    assert ids(4) == ([], ["PACK-OFFLINE-PAD-MULT-RECOMMENDED"])
    assert ids(8) == ([], []) and ids(16) == ([], [])


def test_raise_for_violations_lists_every_error():
    report = validate_config(None, [("dataset.enable_in_batch_packing", True), ("train.micro_batch_size", 1),
                                    ("dataset.dataloader_type", "batch")])
    with pytest.raises(ConfigViolationError) as info:
        report.raise_for_violations()
    assert "PACK-IN-BATCH-MBS" in str(info.value) and "PACK-IN-BATCH-DATALOADER" in str(info.value)


def test_lookup_helpers():
    assert get_rule("pack-offline-mbs1").id == "PACK-OFFLINE-MBS1"
    assert get_rule("NOPE") is None
    assert {r.id for r in search_rules("average_in_collective")} >= {
        "CP-FT-AVG-COLLECTIVE", "PACK-ENERGON-AVG-COLLECTIVE", "PACK-GLOBAL-AVG-COLLECTIVE"}


def test_get_path_reads_into_dicts():
    from seqpack.config import load_config

    cfg = load_config(None, ["dataset.dataset_kwargs.pad_to_max_length=true"])
    assert get_path(cfg, "dataset.dataset_kwargs.pad_to_max_length") is True
    assert get_path(cfg, "dataset.offline_packing_specs.pad_seq_to_mult") is None


def test_every_documented_upstream_rule_is_covered():
    # the Bridge checks that apply to a config (catalogue numbers in rule sources)
    wanted = {1, 2, 3, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21, 22, 23, 25, 26, 27, 28, 29, 30, 31,
              32, 33, 34, 35, 36, 37, 40, 41, 42, 43, 54, 55, 56, 57}
    covered = {int(m) for r in RULES for m in re.findall(r"\bV(\d+)\b", r.source)}
    assert wanted <= covered, sorted(wanted - covered)


def test_check_rules_raises_only_for_selected_rules():
    from seqpack.config.validate import check_rules
    from seqpack.core.errors import UsageError

    cfg = [("dataset.enable_in_batch_packing", True), ("train.micro_batch_size", 1)]
    from seqpack.config import load_config

    loaded = load_config(None, cfg)
    with pytest.raises(ConfigViolationError, match=r"\[PACK-IN-BATCH-MBS\]"):
        check_rules(loaded, ["PACK-IN-BATCH-MBS"])
    assert check_rules(loaded, ["PACK-OFFLINE-MBS1"]) == []
    with pytest.raises(UsageError, match="unknown rule id"):
        check_rules(loaded, ["NOPE"])


def test_violation_error_names_each_rule_once():
    report = validate_config(None, [("dataset.enable_in_batch_packing", True), ("train.micro_batch_size", 1),
                                    ("dataset.dataloader_type", "single")])
    with pytest.raises(ConfigViolationError) as info:
        report.raise_for_violations()
    assert str(info.value).count("[PACK-IN-BATCH-MBS]") == 1


# --- the registry itself: decorator, families, order ---------------------------------------------


def test_every_rule_lives_in_its_family_module():
    from seqpack.config.rules import FAMILY_MODULES

    assert list(FAMILY_MODULES) == list(FAMILIES)
    for rule in RULES:
        assert rule.check.__module__ == FAMILY_MODULES[rule.family].__name__, rule.id
        # the decorator returns the check unchanged: the module attribute is the registered function
        assert getattr(FAMILY_MODULES[rule.family], rule.check.__name__) is rule.check


def test_registry_order_is_family_order_then_definition_order():
    import inspect

    order = {fam: i for i, fam in enumerate(FAMILIES)}
    keys = [(order[r.family], inspect.getsourcelines(r.check)[1]) for r in RULES]
    assert keys == sorted(keys)
    # a snapshot of the head and tail of the order, so a silent reshuffle shows up in review
    assert IDS[:4] == ["TOPO-WORLD-DIVISIBLE", "BATCH-GBS-DIVISIBLE", "BATCH-EVAL-GBS-DIVISIBLE", "SEQ-LENGTH-MATCH"]
    assert IDS[-3:] == ["PACK-FOLD-ALIGNMENT-BRIDGE-VERSION", "PACK-FOLD-ALIGNMENT-PATH", "PACK-FOLD-ALIGNMENT-MCORE"]


def test_assemble_does_not_depend_on_registration_order(monkeypatch):
    from seqpack.config.rules import registry

    shuffled = dict(reversed(list(registry._REGISTERED.items())))
    # reversing everything reverses the order inside each family, but families stay in FAMILIES order
    monkeypatch.setattr(registry, "_REGISTERED", shuffled)
    fams = [r.family for r in registry.assemble()]
    assert fams == sorted(fams, key=list(FAMILIES).index)


def test_decorator_rejects_duplicate_ids_and_unknown_families(monkeypatch):
    from seqpack.config.rules import registry

    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    meta = dict(severity="warning", title="t", fields=("model.seq_length",), provenance="stricter", source="s",
                fix="f", trigger={}, fixed={})
    with pytest.raises(ValueError, match="registered twice"):
        registry.rule("TOPO-WORLD-DIVISIBLE", family="topology", **meta)(lambda r: None)
    with pytest.raises(ValueError, match="unknown family"):
        registry.rule("NEW-RULE", family="nope", **meta)
    with pytest.raises(ValueError, match="severity"):
        registry.rule("NEW-RULE", family="topology", **{**meta, "severity": "info"})

    def check(r):
        return None

    assert registry.rule("NEW-RULE", family="topology", **meta)(check) is check
    assert registry._REGISTERED["NEW-RULE"].check is check


def test_the_model_support_lookup_named_in_fixes_exists(capsys):
    import json

    from seqpack.faces.cli import main
    from seqpack.config.model_support import PATHS

    assert main(["model-support", "Qwen3-Next", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["path"] for r in rows] == list(PATHS)
    assert rows[0]["family"] == "qwen3_next" and rows[0]["status"] == "opt_out"
    assert main(["model-support", "qwen3_next"]) == 0
    assert "opt_out" in capsys.readouterr().out
    assert main(["model-support", "no-such-model"]) == 0
    assert "no record" in capsys.readouterr().out


def test_family_opt_out_is_a_warning_and_its_fix_names_a_real_lookup():
    report = validate_config(None, list(get_rule("MODEL-FAMILY-OPT-OUT").trigger.items()))
    assert report.ok and "MODEL-FAMILY-OPT-OUT" in [f.rule_id for f in report.warnings]
    assert "seqpack model-support" in get_rule("MODEL-FAMILY-OPT-OUT").fix
    for rule in RULES:  # no fix may point at a flag value the CLI rejects
        for fam in re.findall(r"seqpack rules --family (\w+)", rule.fix):
            assert fam in FAMILIES, (rule.id, fam)

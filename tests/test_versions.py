"""The version axis: ``--bridge-version`` selects the rules of that Megatron-Bridge (0.6.2 by default, or main)."""

from __future__ import annotations

import pytest

from seqpack.faces.cli import main
from seqpack.config import RULES, validate_config
from seqpack.config.features import FEATURES
from seqpack.core.errors import UsageError
from seqpack.core.versions import BRIDGE_RELEASE, BRIDGE_TARGETS, DEFAULT_BRIDGE_TARGET

GPT_SFT_IN_BATCH = [("dataset.enable_in_batch_packing", True), ("dataset.dataloader_type", "single"),
                    ("train.micro_batch_size", 4)]
GLOBAL = [("dataset.enable_global_batch_packing", True), ("dataset.dataloader_type", "single"),
          ("model.max_seqlen_per_dp_cp_rank", 2048), ("model.calculate_per_token_loss", True)]
ENERGON = [("dataset.kind", "energon"), ("dataset.packing_buffer_size", 16), ("model.calculate_per_token_loss", True)]


def _errors(overrides, target):
    return [f.rule_id for f in validate_config(None, overrides, bridge_version=target).violations]


def test_default_is_the_release_the_lane_checks():
    assert DEFAULT_BRIDGE_TARGET == BRIDGE_RELEASE == BRIDGE_TARGETS[0]
    assert validate_config(None).bridge_version == BRIDGE_RELEASE


def test_gpt_sft_in_batch_is_an_error_on_the_release_and_valid_on_main():
    report = validate_config(None, GPT_SFT_IN_BATCH)
    (finding,) = report.violations
    assert finding.rule_id == "PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION"
    assert "megatron-bridge 0.6.2" in finding.message and "PR #5493" in finding.message
    main_report = validate_config(None, GPT_SFT_IN_BATCH, bridge_version="main")
    assert main_report.ok and main_report.warnings == []
    # the same config on Direct-HF is valid on both
    assert validate_config(None, GPT_SFT_IN_BATCH + [("dataset.kind", "direct_hf")]).ok


def test_global_batch_is_in_no_release_and_follows_the_pull_request_on_main():
    (finding,) = validate_config(None, GLOBAL).violations
    assert finding.rule_id == "PACK-GLOBAL-BRIDGE-VERSION" and "in no Megatron-Bridge release" in finding.message
    on_main = validate_config(None, GLOBAL, bridge_version="main")
    assert on_main.ok and on_main.rule_ids == ["PACK-GLOBAL-BRIDGE-PR"]
    # the global-batch rules (PR #6127's validation) are checked for main, not for the release
    assert _errors(GLOBAL + [("train.micro_batch_size", 2)], "main") == ["PACK-GLOBAL-MBS1"]
    assert _errors(GLOBAL + [("train.micro_batch_size", 2)], BRIDGE_RELEASE) == ["PACK-GLOBAL-BRIDGE-VERSION"]


def test_energon_native_packing_is_main_only_and_mtp_needs_pr_5990():
    assert _errors(ENERGON, BRIDGE_RELEASE) == ["PACK-ENERGON-NATIVE-BRIDGE-VERSION"]
    assert _errors(ENERGON, "main") == []
    mtp = validate_config(None, ENERGON + [("model.mtp_num_layers", 1)], bridge_version="main")
    assert mtp.ok and "PACK-ENERGON-NO-MTP" in mtp.rule_ids and "PR #5990" in mtp.warnings[0].message
    assert _errors(ENERGON + [("train.micro_batch_size", 2)], "main") == ["PACK-ENERGON-MBS1"]


def test_cli_bridge_version(capsys):
    args = ["validate", "--example", "in_batch_mbs4", "--set", "dataset.kind=gpt_sft"]
    assert main(args) == 1
    assert "PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION" in capsys.readouterr().out
    assert main(args + ["--bridge-version", "main"]) == 0
    assert "for Megatron-Bridge main" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main(args + ["--bridge-version", "0.5.0"])
    assert bad.value.code == 2


def test_an_unknown_version_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="0.6.2, main"):
        validate_config(None, bridge_version="0.7")


def test_rules_name_their_versions_and_the_feature_table_matches_them():
    for rule in RULES:
        assert set(rule.targets) <= set(BRIDGE_TARGETS) and rule.targets, rule.id
        assert rule.describe()["bridge_versions"] == list(rule.targets)
    ids = {r.id: r for r in RULES}
    for feature in FEATURES:
        for rule_id in feature.rules:
            assert rule_id in ids, (feature.id, rule_id)
        if not feature.has(BRIDGE_RELEASE) and not feature.behaviour:
            # a feature the release lacks is refused for it by a rule of the release
            assert any(ids[r].applies_to(BRIDGE_RELEASE) and ids[r].severity == "error" for r in feature.rules), \
                feature.id

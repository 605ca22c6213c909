"""The vlm rule family: fires on vision-language configs only; its family list matches model support."""

from __future__ import annotations

import pytest

from seqpack.config import load_config, validate_config
from seqpack.config.model_support import find_family
from seqpack.config.rules import FAMILY_MODULES, RULES_BY_ID
from seqpack.config.rules.vlm import VLM_FAMILIES

IN_BATCH = ["dataset.enable_in_batch_packing=true", "dataset.dataloader_type=single", "train.micro_batch_size=4"]


def _ids(overrides, bridge_version="0.6.2"):
    return set(validate_config(load_config({}, overrides), bridge_version=bridge_version).rule_ids)


def test_family_registered_with_its_rules():
    assert {r for r in RULES_BY_ID if r.startswith("VLM-")} == {"VLM-VISION-GRAPH-PATCH-BUDGET",
                                                                "VLM-IN-BATCH-EP-OVERLAP"}
    assert FAMILY_MODULES["vlm"].FAMILY == "vlm"
    for family in VLM_FAMILIES:
        assert find_family(family) is not None, family


@pytest.mark.parametrize(("rule_id", "extra"), [
    ("VLM-VISION-GRAPH-PATCH-BUDGET", ["model.vision_cuda_graph_impl=transformer_engine"]),
    ("VLM-IN-BATCH-EP-OVERLAP", ["model.overlap_moe_expert_parallel_comm=true"]),
])
def test_vlm_rules_fire_for_vlms_only(rule_id, extra):
    assert rule_id in _ids([*IN_BATCH, "dataset.kind=mock_vlm", *extra])
    assert rule_id in _ids([*IN_BATCH, "dataset.kind=direct_hf", "model.family=qwen_vl", *extra])
    assert rule_id not in _ids([*IN_BATCH, "dataset.kind=direct_hf", "model.family=llama3", *extra])  # a text model
    assert rule_id not in _ids(["dataset.kind=mock_vlm", *extra])  # nothing packed, MBS 1


def test_patch_budget_is_quiet_once_the_budget_is_set():
    ids = _ids([*IN_BATCH, "dataset.kind=mock_vlm", "model.vision_cuda_graph_impl=transformer_engine",
                "model.max_vision_cuda_graph_seq_length=8192"])
    assert "VLM-VISION-GRAPH-PATCH-BUDGET" not in ids


def test_energon_vlm_constraints_have_rules():
    """The Energon VLM constraints of the seeds and Bridge: MBS 1, PP, CUDA graphs (vision too), DistTrain, MTP."""
    energon = ["dataset.kind=energon", "dataset.packing_buffer_size=16", "model.calculate_per_token_loss=true"]
    cases = {
        "PACK-ENERGON-MBS1": ["train.micro_batch_size=2"],
        "PACK-ENERGON-NO-PP": ["model.pipeline_model_parallel_size=2", "dist.world_size=2"],
        "PACK-ENERGON-NO-CUDA-GRAPHS": ["model.vision_cuda_graph_impl=transformer_engine"],
        "PACK-ENERGON-NO-DISTTRAIN": ["model.qwen3_vl_disttrain=true"],
        "PACK-ENERGON-NO-MTP": ["model.mtp_num_layers=1"],
    }
    for rule_id, extra in cases.items():  # Energon native packing is Bridge main's (not in megatron-bridge 0.6.2)
        rule = RULES_BY_ID[rule_id]
        assert rule.targets == ("main",) and (rule.severity == "error" and rule.upstream_check or 5990 in rule.prs)
        assert rule_id in _ids([*energon, *extra], "main"), rule_id
        assert rule_id not in _ids(energon, "main"), rule_id
    assert _ids(energon) == {"PACK-ENERGON-NATIVE-BRIDGE-VERSION"}  # the release has no native packing

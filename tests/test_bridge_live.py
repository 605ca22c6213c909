"""A live Megatron-Bridge ``ConfigContainer`` read without megatron: stand-in dataclasses with Bridge's class and
field names (the lane test ``tests/upstream/test_live_config.py`` runs the 136 real 0.6.2 packing recipes)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

import pytest

from seqpack.config import load_config, validate_config
from seqpack.config.bridge_live import container_to_mapping, is_bridge_container


class Scope(enum.Enum):
    attn = "attn"


@dataclass
class GPTModelProvider:
    tensor_model_parallel_size: int = 2
    context_parallel_size: int = 2
    sequence_parallel: bool = True
    seq_length: int = 4096
    cuda_graph_scope: list = field(default_factory=lambda: [Scope.attn])
    params_dtype: object = float  # not JSON: becomes its repr
    _private: int = 7


@dataclass
class PackedSequenceSpecs:
    packed_sequence_size: int = 4096
    pad_seq_to_mult: int = 2


@dataclass
class GPTSFTDatasetConfig:
    seq_length: int = 4096
    enable_offline_packing: bool = True
    offline_packing_specs: PackedSequenceSpecs = field(default_factory=PackedSequenceSpecs)


@dataclass
class TrainingConfig:
    micro_batch_size: int = 1
    global_batch_size: int = 8


@dataclass
class ConfigContainer:
    model: GPTModelProvider = field(default_factory=GPTModelProvider)
    dataset: GPTSFTDatasetConfig = field(default_factory=GPTSFTDatasetConfig)
    train: TrainingConfig = field(default_factory=TrainingConfig)


def test_the_live_object_reads_like_its_dump():
    live = ConfigContainer()
    assert is_bridge_container(live) and not is_bridge_container(GPTModelProvider())
    assert not is_bridge_container({"_target_": "x.ConfigContainer"}) and not is_bridge_container(ConfigContainer)
    mapping = container_to_mapping(live)
    assert mapping["_target_"].endswith(".ConfigContainer") and mapping["model"]["cuda_graph_scope"] == ["attn"]
    assert "_private" not in mapping["model"] and mapping["model"]["params_dtype"] == repr(float)
    cfg = load_config(live, [("dist.world_size", 8)])
    assert cfg.model.context_parallel_size == 2 and cfg.dataset.offline_packing_specs.pad_seq_to_mult == 2
    assert load_config(mapping, [("dist.world_size", 8)]) == cfg
    report = validate_config(live, [("dist.world_size", 8)])
    # the live object's own CP2 alignment problem: pad_seq_to_mult=2 under CP2 needs 4
    assert "PACK-OFFLINE-PAD-MULT-TOPOLOGY" in {f.rule_id for f in report.violations}
    fixed = dataclasses.replace(live, dataset=GPTSFTDatasetConfig(offline_packing_specs=PackedSequenceSpecs(
        pad_seq_to_mult=4)))
    assert "PACK-OFFLINE-PAD-MULT-TOPOLOGY" not in validate_config(fixed, [("dist.world_size", 8)]).rule_ids
    with pytest.raises(TypeError):
        container_to_mapping(GPTModelProvider())


def test_a_cycle_or_an_unreadable_field_does_not_hang_or_raise():
    @dataclass
    class Node:
        child: object = None

    @dataclass
    class ConfigContainer2(ConfigContainer):
        loop: Node = field(default_factory=Node)

    ConfigContainer2.__name__ = "MyConfigContainer"
    live = ConfigContainer2()
    live.loop.child = live.loop  # a cycle
    mapping = container_to_mapping(live)
    depth, node = 0, mapping["loop"]
    while isinstance(node, dict) and "child" in node:
        node, depth = node["child"], depth + 1
    assert node is None and depth <= 17

"""The recipe interpreter on a small synthetic snapshot (runs without any upstream mirror)."""

from __future__ import annotations

import pytest
from convert_recipes import convert, packing_path
from recipe_interpreter import Interpreter, Obj, Unsupported

COMMON = '''
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.data.builders import GPTSFTDatasetConfig
from megatron.bridge.data.packing import PackedSequenceSpecs

def _sft_common():
    return ConfigContainer(
        model=None,
        train=TrainingConfig(global_batch_size=128, micro_batch_size=1),
        dataset=GPTSFTDatasetConfig(
            seq_length=2048,
            enable_offline_packing=True,
            offline_packing_specs=PackedSequenceSpecs(packed_sequence_size=2048, pad_seq_to_mult=1),
            dataset_kwargs={"pad_to_max_length": True},
        ),
    )
'''

RECIPE = '''
from megatron.bridge import AutoBridge
from megatron.bridge.recipes.common import _sft_common

SEQ = 4096

def demo_sft_8gpu_h100_bf16_config(scheme: str = "lora"):
    cfg = _sft_common()
    cfg.model = AutoBridge.from_hf_pretrained("org/model").get_model_config()
    cfg.model.seq_length = SEQ
    cfg.dataset.seq_length = SEQ
    cfg.dataset.offline_packing_specs.packed_sequence_size = SEQ
    cfg.model.context_parallel_size = 2
    if cfg.model.context_parallel_size > 1:
        cfg.dataset.offline_packing_specs.pad_seq_to_mult = cfg.model.context_parallel_size * 2
    cfg.model.tensor_model_parallel_size = 2
    cfg.train.global_batch_size //= 2
    return cfg

def broken_config():
    if cfg_from_somewhere().flag:
        return None
'''


class FakeSnapshot:
    def __init__(self, files):
        self.files = files

    def read(self, path):
        return self.files.get(path)


@pytest.fixture
def interp(monkeypatch):
    files = {
        "src/megatron/bridge/recipes/common.py": COMMON,
        "src/megatron/bridge/recipes/demo/h100/demo.py": RECIPE,
    }
    it = Interpreter(FakeSnapshot(files), None)
    it._class_index = {}  # no class definitions: every config object starts without defaults
    return it


def test_straight_line_recipe_converts(interp):
    mod = interp.module("megatron.bridge.recipes.demo.h100.demo")
    cfg = interp.call_function(mod.globals["demo_sft_8gpu_h100_bf16_config"], [], {})
    assert isinstance(cfg, Obj) and cfg.type_name == "ConfigContainer"
    config, notes = convert(cfg, "demo_sft_8gpu_h100_bf16_config", "src/megatron/bridge/recipes/demo/h100/demo.py")
    assert config["model"]["context_parallel_size"] == 2 and config["model"]["seq_length"] == 4096
    assert config["dataset"]["offline_packing_specs"] == {"packed_sequence_size": 4096, "pad_seq_to_mult": 4}
    assert config["dataset"]["dataset_kwargs"] == {"pad_to_max_length": True}
    assert config["train"]["global_batch_size"] == 64 and config["dist"]["world_size"] == 8
    assert packing_path(config) == "offline"
    assert [n.split(":")[0] for n in notes] == ["model.cuda_graph_scope"]  # no class defaults in this fake


def test_a_branch_on_an_unknown_value_is_refused_not_guessed(interp):
    mod = interp.module("megatron.bridge.recipes.demo.h100.demo")
    with pytest.raises(Unsupported, match="condition"):
        interp.call_function(mod.globals["broken_config"], [], {})

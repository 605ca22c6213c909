"""seqpack reads Megatron-Bridge's own config dump (``run_config.yaml``) as it is.

The dumps used here are committed test data written by Bridge itself (``ConfigContainer.to_yaml`` in
the upstream lane, ``tests/upstream/recipes``); the lane test ``tests/upstream/test_config_dump.py``
writes fresh ones and compares verdicts with Bridge's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpack.config import load_config
from seqpack.config.bridge_dump import from_bridge_dump, is_bridge_dump
from seqpack.config.load import load_config_with_keys
from seqpack.config.yaml_bounded import load_yaml
from seqpack.core.errors import ConfigError

RECIPES = Path(__file__).resolve().parent / "upstream" / "recipes"
INDEX = json.loads((RECIPES / "index.json").read_text(encoding="utf-8"))


def _first(path: str) -> Path:
    return RECIPES / next(r["file"] for r in INDEX["recipes"] if r.get("file") and r["path"] == path)


def test_an_offline_recipe_dump_loads_with_its_packing_settings():
    path = _first("offline")
    data, _ = load_yaml(path.read_text(encoding="utf-8"))
    assert is_bridge_dump(data)
    cfg, given = load_config_with_keys(path)
    specs = data["dataset"]["offline_packing_specs"]
    assert cfg.dataset.kind == "gpt_sft" and cfg.dataset.enable_offline_packing
    assert cfg.dataset.offline_packing_specs.packed_sequence_size == specs["packed_sequence_size"]
    assert cfg.dataset.offline_packing_specs.pad_seq_to_mult == specs["pad_seq_to_mult"]
    assert cfg.train.micro_batch_size == data["train"]["micro_batch_size"]
    assert cfg.model.context_parallel_size == data["model"]["context_parallel_size"]
    assert cfg.active_paths() == ["offline"]
    assert "dist.world_size" not in given  # a dump carries no world size


def test_an_in_batch_recipe_dump_loads_as_its_dataset_kind():
    path = _first("in_batch")
    data, _ = load_yaml(path.read_text(encoding="utf-8"))
    cfg = load_config(path)
    assert cfg.dataset.enable_in_batch_packing and cfg.active_paths() == ["in_batch"]
    assert data["dataset"]["_target_"].endswith(type_name := {"direct_hf": "DirectHFSFTDatasetConfig",
                                                              "energon": "EnergonDatasetConfig",
                                                              "mock_vlm": "MockVLMSFTDatasetConfig"}[cfg.dataset.kind])
    assert type_name


def test_overrides_apply_to_a_dump_with_seqpack_keys():
    cfg = load_config(_first("offline"), overrides=["dist.world_size=16", "train.micro_batch_size=2"])
    assert cfg.dist.world_size == 16 and cfg.train.micro_batch_size == 2


def test_a_seqpack_config_is_not_a_dump():
    assert not is_bridge_dump({"model": {}, "dataset": {"kind": "gpt_sft"}})
    assert not is_bridge_dump({"_target_": "megatron.bridge.training.config.TrainingConfig"})
    assert is_bridge_dump({"_target_": "megatron.bridge.training.config.ConfigContainer"})


def _dump_text(**dataset) -> str:
    import yaml

    body = {"_target_": "megatron.bridge.training.config.ConfigContainer",
            "model": {"_target_": "megatron.bridge.models.gpt_provider.GPTModelProvider", "context_parallel_size": 1},
            "optimizer": {"_target_": "megatron.bridge.training.config.OptimizerConfig", "lr": 0.001},
            "train": {"_target_": "megatron.bridge.training.config.TrainingConfig", "micro_batch_size": 1},
            "dataset": dataset}
    return yaml.safe_dump(body, sort_keys=False)


def test_an_unknown_dataset_class_that_turns_packing_on_is_one_line_naming_the_field(tmp_path):
    path = tmp_path / "run_config.yaml"
    path.write_text(_dump_text(_target_="my.pkg.MyDatasetConfig", enable_in_batch_packing=True), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.field == "dataset.enable_in_batch_packing" and err.file == str(path) and err.line is not None
    assert "MyDatasetConfig" in err.message


def test_an_unknown_dataset_class_without_packing_is_checked_as_unpacked(tmp_path):
    path = tmp_path / "run_config.yaml"
    path.write_text(_dump_text(_target_="my.pkg.DiffusionDataset", packing_buffer_size=8, seq_length=512),
                    encoding="utf-8")
    cfg = load_config(path)
    assert cfg.dataset.kind == "pretrain" and cfg.active_paths() == [] and cfg.seq_length == 512


def test_a_wrong_type_in_a_dump_names_its_file_and_line(tmp_path):
    path = tmp_path / "run_config.yaml"
    text = _dump_text(_target_="megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig",
                      enable_offline_packing="yes")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "enable_offline_packing" in t)
    assert (info.value.field, info.value.line) == ("dataset.enable_offline_packing", line)


def test_enum_and_scope_forms_are_read_as_values():
    enum = {"_target_": "megatron.core.transformer.enums.CudaGraphScope", "_call_": True, "_args_": ["attn"],
            "_name_": "attn"}
    data = {"_target_": "x.ConfigContainer",
            "model": {"_target_": "x.Qwen3VLModelProvider", "cuda_graph_impl": "transformer_engine",
                      "cuda_graph_scope": [enum], "num_moe_experts": 0, "mtp_num_layers": None},
            "dataset": {"_target_": "x.EnergonDatasetConfig", "packing_buffer_size": 4,
                        "task_encoder": {"_target_": "x.QwenVLEnergonTaskEncoderConfig"}}}
    mapped, notes = from_bridge_dump(data)
    assert mapped["model"]["cuda_graph_scope"] == ["attn"] and "num_moe_experts" in mapped["model"]
    assert mapped["model"]["num_moe_experts"] is None and mapped["model"]["family"] == "qwen3_vl"
    assert mapped["dataset"] == {"kind": "energon", "packing_buffer_size": 4, "task_encoder": "qwen_vl"}
    assert any("Qwen3VLModelProvider" in n for n in notes)
    full = dict(data, model={**data["model"], "cuda_graph_scope": "full"})
    assert from_bridge_dump(full)[0]["model"]["cuda_graph_scope"] == []


def test_a_nested_provider_holds_the_language_model_fields():
    data = {"_target_": "x.ConfigContainer",
            "model": {"_target_": "megatron.bridge.models.megatron_mimo.megatron_mimo_provider.MegatronMIMOProvider",
                      "freeze_language_model": False,
                      "standard_provider": {"_target_": "x.GPTModelProvider", "tensor_model_parallel_size": 2,
                                            "context_parallel_size": 2, "seq_length": 4096}},
            "dataset": {"_target_": "x.MockVLMSFTDatasetConfig", "enable_in_batch_packing": True}}
    mapped, notes = from_bridge_dump(data)
    assert mapped["model"] == {"tensor_model_parallel_size": 2, "context_parallel_size": 2, "seq_length": 4096,
                               "family": "megatron_mimo"}
    assert any("model.standard_provider" in n for n in notes)

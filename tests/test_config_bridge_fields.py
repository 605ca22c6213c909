"""Real Megatron-Bridge configs are accepted: every field of Bridge 0.6.2's config dataclasses loads where
Bridge puts it (the committed list, generated in the lane), the ones no rule reads are reported as not
checked, and a key neither seqpack nor Bridge knows is still an error naming the closest real field."""

from __future__ import annotations

import glob
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import yaml

from seqpack.config import validate_config
from seqpack.config.bridge_fields import bridge_section, bridge_sections, bridge_version_of_fields
from seqpack.config.load import _dataclass_in, _hints, load_config_report
from seqpack.config.schema import TrainingConfig
from seqpack.core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

USER_CONFIG = """\
model:
  tensor_model_parallel_size: 4
  context_parallel_size: 2
  sequence_parallel: true
  seq_length: 8192
  calculate_per_token_loss: true
  num_layers: 36
  hidden_size: 4096
dataset:
  _target_: megatron.bridge.data.builders.gpt_sft.FinetuningDatasetConfig
  dataset_root: /data/packs
  seq_length: 8192
  enable_offline_packing: true
  offline_packing_specs:
    packed_sequence_size: 8192
    pad_seq_to_mult: 8
train:
  train_iters: 100
  micro_batch_size: 1
  global_batch_size: 8
optimizer:
  lr: 1.0e-5
  weight_decay: 0.01
checkpoint:
  save_interval: 50
ddp:
  average_in_collective: false
dist:
  world_size: 16
"""


def test_a_hand_written_bridge_config_validates_and_names_what_is_not_checked():
    report = validate_config(USER_CONFIG)
    assert report.ok, [f.one_line() for f in report.violations]
    assert set(report.not_checked) == {"model.num_layers", "model.hidden_size", "dataset.dataset_root",
                                       "train.train_iters", "optimizer", "checkpoint"}


@pytest.mark.parametrize("typo, right", [
    ("train:\n  train_itrs: 100\n", "train.train_iters"),
    ("dataset:\n  dataset_rot: x\n", "dataset.dataset_root"),
    ("optimizer:\n  lrr: 0.1\n", "optimizer.lr"),
    ("dataset:\n  packing_bufer_size: 8\n", "dataset.packing_buffer_size"),
    ("model:\n  transformer:\n    num_layer: 2\n", "model.transformer.num_layers"),
])
def test_a_misspelled_field_is_an_error_naming_the_real_one(typo, right):
    with pytest.raises(ConfigError) as err:
        load_config_report(typo)
    assert f"did you mean {right}?" in err.value.message


def test_a_key_bridge_does_not_know_either_is_refused():
    with pytest.raises(ConfigError) as err:
        load_config_report("model:\n  frobnicate_the_widgets: 1\n")
    assert f"neither seqpack nor Megatron-Bridge {bridge_version_of_fields()} has 'frobnicate_the_widgets'" in err.value.message
    assert "tensor_model_parallel_size" in err.value.fix
    with pytest.raises(ConfigError, match="unknown key at the top level"):
        load_config_report("optimiser:\n  lr: 1\n")


def _seqpack_keys(path: str) -> set[str] | None:
    cls: type | None = TrainingConfig
    for part in [p for p in path.split(".") if p]:
        names = {f.name: f for f in fields(cls)}
        if part not in names:
            return None
        cls = _dataclass_in(_hints(cls)[part])
        if cls is None or not is_dataclass(cls):
            return None
    return {f.name for f in fields(cls)}


def _nest(path: str, leaf: dict) -> dict:
    for part in reversed([p for p in path.split(".") if p]):
        leaf = {part: leaf}
    return leaf


def test_every_field_of_every_bridge_section_is_accepted():
    sections = bridge_sections()
    assert {"", "model", "dataset", "dataset.offline_packing_specs", "train", "optimizer", "ddp", "dist"} <= set(sections)
    tried = 0
    for path, names in sections.items():
        ours = _seqpack_keys(path)
        if ours is None and path and path.split(".")[0] not in {f.name for f in fields(TrainingConfig)}:
            # a section seqpack does not model at all (optimizer, model.transformer, ...): one config holding it
            top = path.split(".")[0]
            if bridge_section(top) is None:
                continue
        for name in sorted(names - (ours or set())):
            cfg, _, ignored = load_config_report(_nest(path, {name: None}))
            assert ignored, (path, name)
            tried += 1
    assert tried > 2000


def test_the_committed_list_is_bridge_0_6_2():
    assert bridge_version_of_fields() == "0.6.2"
    assert {"dataset_root", "dataset_kwargs", "enable_offline_packing"} <= bridge_section("dataset")
    assert {"train_iters", "global_batch_size"} <= bridge_section("train")


@pytest.mark.parametrize("dump", sorted(glob.glob(str(ROOT / "tests/upstream/recipes/*.yaml")))[:136:9],
                         ids=lambda p: Path(p).stem)
def test_a_0_6_2_recipe_written_by_hand_loads(dump):
    # the recipe's own YAML dump without Bridge's _target_ keys: every field, as a user copies it into a config
    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if not str(k).startswith("_")}
        return [plain(v) for v in value] if isinstance(value, list) else value

    data = plain(yaml.safe_load(Path(dump).read_text()))
    cfg, _, ignored = load_config_report(data)
    assert len(ignored) > 100 and cfg.seq_length > 0


def test_null_where_bridge_allows_it_takes_the_default_but_never_for_a_number():
    cfg, _, ignored = load_config_report({"dataset": {"dataset_kwargs": None}, "model": {"cuda_graph_scope": None}})
    assert cfg.dataset.dataset_kwargs == {} and ignored["dataset.dataset_kwargs"] is None
    with pytest.raises(ConfigError, match="may not be null"):  # Bridge derives it; seqpack never assumes a GBS
        load_config_report({"train": {"global_batch_size": None}})

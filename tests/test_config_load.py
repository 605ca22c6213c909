"""Loading configs: YAML/JSON/dict/overrides, unknown keys, types, line numbers."""

import json

import pytest

from seqpack.config import load_config
from seqpack.config.load import parse_override
from seqpack.config.schema import TrainingConfig
from seqpack.core.errors import ConfigError


def test_defaults():
    cfg = load_config(None)
    assert isinstance(cfg, TrainingConfig)
    assert cfg.seq_length == 2048 and cfg.dataloader_type == "batch" and cfg.active_paths() == []


def test_yaml_file_and_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  context_parallel_size: 2\ndataset:\n  enable_in_batch_packing: true\n")
    cfg = load_config(path)
    assert cfg.model.context_parallel_size == 2 and cfg.active_paths() == ["in_batch"]
    assert load_config(cfg.to_dict()) == cfg


def test_json_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"micro_batch_size": 4}}))
    assert load_config(str(path)).train.micro_batch_size == 4


def test_text_source():
    cfg = load_config("dataset:\n  kind: energon\n  packing_buffer_size: 8\n")
    assert cfg.energon_packing


def test_dotted_overrides_parse_values():
    cfg = load_config(
        None,
        [
            "dataset.enable_in_batch_packing=true",
            "train.micro_batch_size=4",
            "model.cuda_graph_scope=[attn, mlp]",
            "dataset.offline_packing_specs.pad_seq_to_mult=8",
            "dataset.dataset_kwargs.pad_to_max_length=true",
        ],
    )
    assert cfg.dataset.enable_in_batch_packing is True
    assert cfg.train.micro_batch_size == 4
    assert cfg.model.cuda_graph_scope == ["attn", "mlp"]
    assert cfg.dataset.offline_packing_specs.pad_seq_to_mult == 8
    assert cfg.pad_to_max_length is True


def test_override_pairs_and_null():
    cfg = load_config(None, [("model.mtp_num_layers", 2), "model.mtp_num_layers=null"])
    assert cfg.model.mtp_num_layers is None


def test_unknown_key_suggests_closest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  seq_length: 4096\ndataset:\n  enable_inbatch_packing: true\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.line == 4 and err.file == str(path) and err.field == "dataset.enable_inbatch_packing"
    assert "did you mean dataset.enable_in_batch_packing?" in str(err)


def test_type_errors_say_what_the_field_is():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["model.context_parallel_size=two"])
    assert str(info.value).endswith("must be an integer, got 'two' (str) (what it is: Context-parallel size (CP))")
    with pytest.raises(ConfigError, match=r"did you mean 'single'\? \(what it is: single, cyclic"):
        load_config(None, ["dataset.dataloader_type=singel"])
    with pytest.raises(ConfigError, match=r"must be >= 1, got 0 \(what it is: Context-parallel size"):
        load_config(None, ["model.context_parallel_size=0"])


def test_unknown_key_in_wrong_section_points_to_the_right_one():
    with pytest.raises(ConfigError, match="lives at train.global_batch_size"):
        load_config({"model": {"global_batch_size": 8}})


def test_renamed_upstream_key():
    with pytest.raises(ConfigError, match="renamed; use dataset.enable_in_batch_packing"):
        load_config(None, ["dataset.pack_sequences_in_batch=true"])


def test_unknown_section():
    with pytest.raises(ConfigError, match="unknown key at the top level; did you mean model"):
        load_config({"modle": {}})


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("model.context_parallel_size=two", "must be an integer, got 'two'"),
        ("model.sequence_parallel=1", "must be true or false, got 1"),
        ("model.cuda_graph_impl=te", "must be one of none, local, transformer_engine, got 'te'"),
        ("model.context_parallel_size=0", "must be >= 1, got 0"),
        ("dataset.kind=energy", "did you mean 'energon'"),
        ("model=3", "must be a mapping"),
        ("train.global_batch_size=null", "may not be null"),
    ],
)
def test_wrong_types_name_field_and_value(override, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert fragment in str(info.value)
    assert info.value.field == override.split("=")[0] or override.startswith("model=")


def test_malformed_yaml_has_line_number(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  seq_length: 4096\n  tp: [1, 2\n")
    with pytest.raises(ConfigError, match="malformed YAML") as info:
        load_config(path)
    assert info.value.line is not None and info.value.line >= 3


def test_malformed_json_has_line_number(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n "model": {\n  "seq_length": 4096,\n }\n}\n')
    with pytest.raises(ConfigError, match="malformed JSON") as info:
        load_config(path)
    assert info.value.line == 4


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping of sections"):
        load_config(tmp_path / "list.yaml")


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match="section.field=value"):
        parse_override("dataset.enable_in_batch_packing")
    with pytest.raises(ConfigError, match="is a value, not a section"):
        load_config({"train": {"micro_batch_size": 2}}, ["train.micro_batch_size.x=1"])
    with pytest.raises(ConfigError, match="must be an integer"):
        load_config(None, ["train.micro_batch_size.x=1"])

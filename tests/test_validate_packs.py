"""A training config against the packs on disk (``validate CONFIG --packs DIR``): pack size, alignment and
metadata against the config, steps per epoch and train_iters for its global batch size; each check can fail."""

from __future__ import annotations

import pytest

from seqpack.config.load import load_config_report
from seqpack.data import demo_path
from seqpack.packing.offline.config_check import check_packs
from seqpack.packing.offline.prepare import prepare_packed_dataset

CONFIG = """\
model: {tensor_model_parallel_size: 2, context_parallel_size: 2, sequence_parallel: true, seq_length: 1024,
        calculate_per_token_loss: true}
dataset:
  seq_length: 1024
  enable_offline_packing: true
  dataset_root: {root}
  offline_packing_specs: {{packed_sequence_size: 1024, pad_seq_to_mult: 4}}
train: {{micro_batch_size: 1, global_batch_size: 8, train_iters: 50}}
ddp: {{average_in_collective: false}}
dist: {{world_size: 8}}
"""


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    out = tmp_path_factory.mktemp("packs")
    return prepare_packed_dataset(demo_path("prompt_completion"), out, pack_size=1024, pad_seq_to_mult=4)


def _check(packs, *overrides, root=None):
    text = CONFIG.replace("{root}", str(root or packs.pack_dir.parent)).replace("{{", "{").replace("}}", "}")
    cfg, _, given = load_config_report(text, list(overrides))
    return check_packs(cfg, packs.pack_dir.parent, given=given)


def test_a_matching_config_passes_with_its_steps_per_epoch(packs):
    report = _check(packs)
    training = packs.manifest["splits"]["training"]["packs"]
    assert report.ok and report.findings == [] and report.packs["training"] == training
    assert report.full_steps_per_epoch == training // 8 and report.suggested_train_iters == training // 8
    assert report.train_iters == 50 and report.epochs_of_train_iters == pytest.approx(50 * 8 / training)
    assert "train.train_iters=50" in report.notes[0]


@pytest.mark.parametrize("override, check_id, severity", [
    ("dataset.offline_packing_specs.packed_sequence_size=2048", "PACKS-PACK-SIZE", "error"),
    ("dataset.offline_packing_specs.pad_seq_to_mult=8", "PACKS-PAD-MULT", "error"),
    ("model.context_parallel_size=4", "PACKS-PAD-MULT-TOPOLOGY", "error"),
    ("model.tensor_model_parallel_size=4", "PACKS-PAD-MULT-TOPOLOGY", "warning"),
    ("model.seq_length=512", "PACKS-SEQ-LENGTH", "error"),
    ("train.global_batch_size=4096", "PACKS-TOO-FEW", "error"),
])
def test_each_mismatch_is_named(packs, override, check_id, severity):
    report = _check(packs, override)
    found = {f["id"]: f["severity"] for f in report.findings}
    assert found.get(check_id) == severity, report.findings
    assert report.ok is (severity != "error" and all(s != "error" for s in found.values()))


def test_packs_elsewhere_than_the_configs_dataset_root_are_flagged(packs, tmp_path):
    report = _check(packs, root=tmp_path / "other")
    assert [f["id"] for f in report.findings] == ["PACKS-DATASET-ROOT"] and report.ok


def test_missing_metadata_is_an_error(packs, tmp_path):
    import shutil

    copy = tmp_path / "copy" / packs.pack_dir.name
    shutil.copytree(packs.pack_dir, copy)
    packs.metadata_path.name and (copy / packs.metadata_path.name).unlink()
    cfg, _, given = load_config_report(CONFIG.replace("{root}", str(copy)).replace("{{", "{").replace("}}", "}"))
    report = check_packs(cfg, copy, given=given)
    assert not report.ok and [f["id"] for f in report.findings] == ["PACKS-METADATA"]


def test_the_validate_verb_and_cli_check_the_packs(packs, tmp_path, capsys):
    from seqpack.faces.cli import main

    config = tmp_path / "train.yaml"
    config.write_text(CONFIG.replace("{root}", str(packs.pack_dir.parent)).replace("{{", "{").replace("}}", "}"))
    assert main(["validate", str(config), "--packs", str(packs.pack_dir.parent)]) == 0
    out = capsys.readouterr().out
    assert "packs: OK" in out and "train_iters for 1 epoch(s)" in out and "not checked: 2 Megatron-Bridge" in out
    bad = ["validate", str(config), "--packs", str(packs.pack_dir), "--set", "dataset.offline_packing_specs.pad_seq_to_mult=8"]
    assert main(bad) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "[PACKS-PAD-MULT]" in out and "the packs do not fit" in out

"""VLM rows through the CLI: batches, plan and inspect count image tokens; energon-prepare keeps images."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from seqpack.faces.cli import main
from seqpack.data.vlm.demo import vlm_demo_path
from seqpack.data.vlm.sample import file_has_visuals, measure_vlm_file, resolve_vision
from seqpack.data.vlm.vision import VISION_PRESETS
from seqpack.data import demo_path
from seqpack.core.errors import UsageError
from seqpack.packing.sft_dataset import SFTJsonlDataset


def _json(capsys, argv, code=0):
    capsys.readouterr()
    assert main([*argv, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def test_presets_match_the_choice_list():
    from seqpack.core.choices import VISION_OPTIONS, VISION_PRESETS as NAMES

    assert tuple(VISION_PRESETS) == NAMES and set(NAMES) < set(VISION_OPTIONS)


def test_auto_detects_images():
    assert file_has_visuals(vlm_demo_path()) and not file_has_visuals(demo_path("chat"))
    assert resolve_vision("auto", vlm_demo_path()).name == "qwen2_vl"
    assert resolve_vision("auto", demo_path("chat")) is None and resolve_vision("none", vlm_demo_path()) is None
    with pytest.raises(UsageError):
        resolve_vision("qwen9", vlm_demo_path())


def test_batches_counts_image_tokens(capsys):
    report = _json(capsys, ["batches", str(vlm_demo_path()), "--seq-length", "256", "--cp", "2", "--vision", "tiny",
                            "--num-batches", "12"])
    ds = SFTJsonlDataset(vlm_demo_path(), seq_length=256, vision="tiny")
    expected = sum(ds.vlm_example(i).num_vision_tokens for i in range(len(ds)))
    assert report["vision"]["name"] == "tiny" and report["vision_tokens"] == expected > 0
    assert sum(b["images"] + b["videos"] for b in report["batches"]) == 48
    assert all(n % 4 == 0 for b in report["batches"] for n in np.diff(b["cu_seqlens_padded"] or b["cu_seqlens"]))
    text = _json(capsys, ["batches", str(demo_path("chat")), "--num-batches", "1"])
    assert text["vision"] is None and text["vision_tokens"] == 0


def test_plan_lengths_include_image_tokens(capsys):
    plan = _json(capsys, ["plan", "--jsonl", str(vlm_demo_path()), "--vision", "tiny", "--candidates", "256,512",
                          "--token-slots", "2048"])
    vlm = plan["lengths"]["details"]["vlm"]
    ds = SFTJsonlDataset(vlm_demo_path(), seq_length=4096, vision="tiny")
    lengths = [len(ds.vlm_example(i).tokens) for i in range(len(ds))]
    assert plan["lengths"]["total_tokens"] == sum(lengths) and plan["lengths"]["max"] == max(lengths)
    assert vlm["vision_tokens"] == sum(ds.vlm_example(i).num_vision_tokens for i in range(len(ds)))
    assert vlm["images"] == 42 and vlm["videos"] == 6 and plan["truncation"] == "reject"
    qwen = measure_vlm_file(vlm_demo_path(), vision=VISION_PRESETS["qwen2_vl"])
    assert qwen.vision_tokens.sum() < vlm["vision_tokens"]  # 14-pixel patches: fewer tokens for small images


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("vlm") / "ds"
    assert main(["energon-prepare", str(vlm_demo_path()), "--out", str(out)]) == 0
    return out


def test_inspect_energon_dataset_counts_image_tokens(prepared, capsys):
    report = _json(capsys, ["inspect", str(prepared), "--vision", "tiny"])
    s = report["stats"]
    truth = measure_vlm_file(vlm_demo_path(), vision=VISION_PRESETS["tiny"])
    assert s["kind"] == "energon" and s["measured_samples"] == 48 and report["ok"]
    assert (s["images"], s["videos"], s["vision_tokens"]) == (42, 6, int(truth.vision_tokens.sum()))
    assert s["length"]["max"] == int(truth.lengths.max())
    too_small = _json(capsys, ["inspect", str(prepared), "--vision", "tiny", "--cp", "2", "--pack-size", "200"], 1)
    over = [i for i in too_small["issues"] if i["check"] == "exceeds_seq_length"]
    assert over and not too_small["topology"]["usable"]
    assert too_small["issue_count"] == int(np.sum(-(-truth.lengths // 4) * 4 > 200))


def test_inspect_refuses_a_damaged_shard(prepared, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    shard = next((copy / "shards").glob("*.tar"))
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = _json(capsys, ["inspect", str(copy)], 1)
    assert not report["ok"] and report["issues"][0]["check"] == "shard_checksum"

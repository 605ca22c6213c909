"""inspect_packed_dataset: integrity issues, statistics, topology fitness, foreign artifacts."""

import json

import numpy as np
import pytest

from seqpack.core.errors import ArtifactError
from seqpack.verbs.inspection import Topology, inspect_packed_dataset
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.packing.parquet import write_packed_parquet


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect")
    rows = [{"prompt": f"q{i} " + "w " * (i % 37), "completion": "a " * (1 + i % 23)} for i in range(200)]
    path = tmp / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    m1 = prepare_packed_dataset(path, tmp / "m1", pack_size=256, pad_seq_to_mult=1)
    m4 = prepare_packed_dataset(path, tmp / "m4", pack_size=256, pad_seq_to_mult=4)
    return m1, m4


def test_own_artifact_is_clean_and_stats_match_manifest(packs):
    _, m4 = packs
    report = inspect_packed_dataset(m4.files["training"])
    assert report.ok and report.issue_count == 0
    info = m4.manifest["splits"]["training"]
    s = report.stats
    assert s["rows"] == info["packs"] and s["segments"] == info["accounting"]["packed"]
    assert s["aligned_tokens"] == info["aligned_tokens"] and s["real_tokens"] == info["real_tokens"]
    assert s["inferred_pad_seq_to_mult"] % 4 == 0
    assert sum(k * v for k, v in s["sequences_per_pack"]["histogram"].items()) == s["segments"]
    total = s["packing_efficiency"] + s["width_padding_share"]
    assert total == pytest.approx(1.0)
    assert s["packing_efficiency"] == pytest.approx(s["real_token_efficiency"] + s["alignment_padding_share"])
    assert report.settings["from_manifest"] and report.settings["pack_size"] == 256


def test_topology_fitness(packs):
    m1, m4 = packs
    bad = inspect_packed_dataset(m1.files["training"], Topology(cp=2))
    assert bad.topology["usable"] is False and bad.topology["misaligned_segments"] > 0
    assert "pad_seq_to_mult=4" in bad.topology["reasons"][0]
    ex = bad.topology["examples"][0]
    assert ex["length"] % 4 != 0
    good = inspect_packed_dataset(m4.files["training"], {"cp": 2})
    assert good.topology["usable"] is True
    sp = inspect_packed_dataset(m4.files["training"], Topology(tp=4, cp=2, sp=True))
    assert sp.topology["usable"] is False  # needs 8


def _bridge_row():
    # two segments, eos = 0, aligned to 4 (runtime 8 and 4)
    return {"input_ids": [8, 9, 10, 11, 12, 0, 0, 0, 0, 5, 6, 7, 0, 0],
            "loss_mask": [0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0], "seq_start_id": [0, 9]}


def test_foreign_bridge_artifact(tmp_path):
    path = write_packed_parquet([_bridge_row()] * 3, tmp_path / "training_16.idx.parquet")
    report = inspect_packed_dataset(path, Topology(cp=2), pack_size=16, eos_id=0)
    assert report.ok and not report.settings["from_manifest"]
    assert report.stats["real_tokens"] == 3 * (5 + 3)
    assert report.stats["aligned_tokens"] == 3 * 12
    assert report.stats["inferred_pad_seq_to_mult"] == 4
    assert report.topology["usable"] is True


def test_integrity_issues_are_found(tmp_path):
    loss_on_last = _bridge_row()
    loss_on_last["loss_mask"] = list(loss_on_last["loss_mask"])
    loss_on_last["loss_mask"][8] = 1
    bad_starts = {**_bridge_row(), "seq_start_id": [0, 14]}
    over = {"input_ids": list(range(1, 30)), "loss_mask": [1] * 28 + [0], "seq_start_id": [0]}
    path = write_packed_parquet([_bridge_row(), loss_on_last, bad_starts, over], tmp_path / "x.idx.parquet")
    report = inspect_packed_dataset(path, pack_size=16, eos_id=0)
    assert not report.ok
    checks = {(i["check"], i["row"]) for i in report.issues}
    assert ("loss_without_label", 1) in checks
    assert ("structure", 2) in checks
    assert ("over_capacity", 3) in checks
    assert report.issue_count == 3


def test_manifest_mismatch_is_reported(packs, tmp_path):
    _, m4 = packs
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(m4.root, copy)
    manifest = json.loads((copy / "seqpack_manifest.json").read_text())
    manifest["splits"]["training"]["packs"] += 1
    (copy / "seqpack_manifest.json").write_text(json.dumps(manifest))
    report = inspect_packed_dataset(copy / m4.files["training"].name)
    assert not report.ok and report.issues[0]["check"] == "manifest"


def test_not_a_pack(tmp_path):
    (tmp_path / "x.idx.parquet").write_text("nope")
    with pytest.raises(ArtifactError):
        inspect_packed_dataset(tmp_path / "x.idx.parquet")
    assert np.gcd.reduce(np.array([8, 12])) == 4


def test_inspect_reports_each_split_with_its_supervised_share(tmp_path):
    from seqpack.data import demo_path
    from seqpack.packing.offline.prepare import prepare_packed_dataset
    from seqpack.verbs.inspection import inspect_packed_dataset

    rows = demo_path("chat").read_bytes().splitlines(keepends=True)
    (tmp_path / "train.jsonl").write_bytes(b"".join(rows[:80]))
    (tmp_path / "val.jsonl").write_bytes(b"".join(rows[80:100]))
    packs = prepare_packed_dataset({"training": tmp_path / "train.jsonl", "validation": tmp_path / "val.jsonl"},
                                   tmp_path / "out", pack_size=2048, pad_seq_to_mult=4)
    report = inspect_packed_dataset(tmp_path / "out")  # the output root: its one pack folder is read
    splits = report.stats["splits"]
    assert set(splits) == {"training", "validation"}
    for name, info in splits.items():
        manifest = packs.manifest["splits"][name]
        assert info["packs"] == manifest["packs"] and info["aligned_tokens"] == manifest["aligned_tokens"]
        assert 0 < info["supervised_share"] < 1 and info["bridge_metadata"]["max_samples_per_bin"] >= 1
    assert sum(v["supervised_tokens"] for v in splits.values()) == report.stats["supervised_tokens"]
    assert report.stats["supervised_share"] == report.stats["supervised_tokens"] / report.stats["real_tokens"]

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
    assert "pad_seq_to_mult=4" in bad.topology["reasons"][0] and "needs" in bad.topology["reasons"][0]
    ex = bad.topology["examples"][0]
    assert ex["length"] % 4 != 0
    good = inspect_packed_dataset(m4.files["training"], {"cp": 2})
    assert good.topology["usable"] is True
    sp = inspect_packed_dataset(m4.files["training"], Topology(tp=4, cp=2, sp=True))
    # 0.6.2 needs 2*CP = 4 per sequence and a width of a multiple of 8: usable; the recommended 8 is not met
    assert sp.topology["usable"] is True and sp.topology["recommended_met"] is False
    assert (sp.topology["required"], sp.topology["required_width"], sp.topology["recommended"]) == (4, 8, 8)
    assert sp.topology["segments_off_recommended"] > 0
    narrow = inspect_packed_dataset(m4.files["training"], Topology(tp=3, cp=2, sp=True))
    assert narrow.topology["usable"] is False  # width 256 is no multiple of CP*TP = 6


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
    loss_on_last["loss_mask"][8] = 1  # never read by the packed reader: counted, no issue
    bad_starts = {**_bridge_row(), "seq_start_id": [0, 14]}
    over = {"input_ids": list(range(1, 30)), "loss_mask": [1] * 28 + [0], "seq_start_id": [0]}
    # a packer that pre-pads with id 99 (EOS is 0) and keeps the loss on the padding: labels 99 are trained
    on_pads = {"input_ids": [8, 9, 10, 0, 99, 99, 99, 99], "loss_mask": [0, 1, 1, 1, 1, 1, 1, 1],
               "seq_start_id": [0]}
    path = write_packed_parquet([_bridge_row(), loss_on_last, bad_starts, over, on_pads], tmp_path / "x.idx.parquet")
    report = inspect_packed_dataset(path, pack_size=16, eos_id=0, pad_id=99)
    assert not report.ok
    checks = {(i["check"], i["row"]) for i in report.issues}
    assert ("structure", 2) in checks
    assert ("over_capacity", 3) in checks
    assert ("loss_on_padding", 4) in checks
    assert report.issue_count == 3
    assert report.stats["loss_on_segment_end"] == 2  # row 1's segment 0 and row 4's only segment
    # the labels 99, 99, 99 after the EOS input (0.6.2 zeroes the EOS input's loss, so not the first pad label)
    assert report.stats["reader"]["loss_on_padding"] == 3 and report.stats["reader"]["padding_check"] == "ran"
    # without the pad id the padding cannot be told from content: the row passes (pass pad_id for such packers)
    assert inspect_packed_dataset(path, pack_size=16, eos_id=0).issue_count == 2


def _legacy_row():
    # Bridge's legacy prompt-template segment (eos = eod = 2, m = 4): mask 1 from the answer on, pads included
    return {"input_ids": [50, 51, 52, 2, 2, 2, 2, 2, 2], "loss_mask": [0, 1, 1, 1, 1, 1, 1, 1, 1], "seq_start_id": [0]}


def test_reader_rule_per_bridge_version(tmp_path):
    path = write_packed_parquet([_legacy_row()] * 2, tmp_path / "legacy.idx.parquet")
    release = inspect_packed_dataset(path, pack_size=8, eos_id=2)
    assert release.ok and release.stats["loss_on_segment_end"] == 2  # 0.6.2 trains no EOS input: nothing padded
    assert release.stats["reader"]["trained_labels"] == 4 and release.stats["reader"]["bridge_version"] == "0.6.2"
    main = inspect_packed_dataset(path, pack_size=8, eos_id=2, bridge_version="main")
    # Bridge main (PR #5213) trains the stored mask as is: the five labels after the sample's EOS are padding
    assert not main.ok and {i["check"] for i in main.issues} == {"loss_on_padding"}
    assert main.stats["reader"]["loss_on_padding"] == 2 * 5
    # a rolled mask (a typed EOS, then the sample's EOS, then padding: PR #5610's vector) is fine under main
    rolled = {"input_ids": [30, 31, 2, 2, 2], "loss_mask": [1, 1, 1, 0, 0], "seq_start_id": [0]}
    ok = inspect_packed_dataset(write_packed_parquet([rolled], tmp_path / "r.idx.parquet"), pack_size=4, eos_id=2,
                                bridge_version="main")
    assert ok.ok, ok.issues
    # answer_only_loss=False trains every label whose input is not EOS: never padding when pad == EOS
    assert inspect_packed_dataset(path, pack_size=8, eos_id=2, bridge_version="main", answer_only_loss=False).ok
    # no EOS id: the padding check is skipped (reported), not passed
    skipped = inspect_packed_dataset(path, pack_size=8)
    assert skipped.stats["reader"]["padding_check"].startswith("skipped")
    assert skipped.stats["reader"]["loss_on_padding"] is None


def test_reader_rule_equals_the_collates_loss_mask(tmp_path):
    """The trained positions inspect counts are the ones seqpack's collate (the lane holds it equal to Bridge's)
    trains, for both readers."""
    from seqpack.packing.reader_loss import reader_loss
    from seqpack.packing.thd_collate import stored_row_segments

    rng = np.random.default_rng(3)
    for _ in range(200):
        segs, mask = [], []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(2, 9))
            body = rng.integers(3, 9, n).tolist()
            body[int(rng.integers(0, n))] = 2 if rng.random() < 0.3 else body[0]
            pads = int(rng.integers(0, 4))
            segs.append(body + [2] * (1 + pads))
            mask.append(rng.integers(0, 2, len(segs[-1])).tolist())
        ids = np.array(sum(segs, []))
        m = np.array(sum(mask, []))
        starts = np.cumsum([0] + [len(s) for s in segs[:-1]])
        bounds = np.append(starts, ids.size)
        for version in ("0.6.2", "main"):
            for answer_only in (True, False):
                got = reader_loss(ids, m, bounds, eos_id=2, bridge_version=version, answer_only_loss=answer_only)
                row = {"input_ids": ids, "loss_mask": m, "seq_start_id": starts}
                pieces = stored_row_segments(row, eos_id=2, pad_seq_to_mult=1, answer_only_loss=answer_only,
                                             bridge_version=version)
                assert got.trained == int(sum(np.count_nonzero(p["loss_mask"]) for p in pieces))


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

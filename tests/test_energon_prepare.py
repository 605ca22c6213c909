"""Energon dataset preparation: shards, splits, media, manifest, atomicity, CLI."""

import io
import json
import tarfile

import numpy as np
import pytest

from seqpack.faces.cli import main
from seqpack.data import demo_path
from seqpack.core.errors import ArtifactError, InputError, UsageError
from seqpack.packing.energon import prepare as prep
from seqpack.data.vlm.demo import vlm_demo_path
from seqpack.data.vlm.images import load_image
from seqpack.data.vlm.sample import find_subsequence
from seqpack.packing.energon.media import MediaSpec, insert_marker, synthetic_image
from seqpack.packing.energon.prepare import (
    prepare_energon_dataset,
    read_manifest,
    synthetic_vlm_rows,
    write_synthetic_vlm_jsonl,
)


def _members(tar_path):
    with tarfile.open(tar_path) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf.getmembers()]


def _first_rows(path, n, out):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)[:n]
    out.write_text("".join(lines), encoding="utf-8")
    return out


def test_text_dataset_layout_split_and_keys(tmp_path):
    src = _first_rows(demo_path("prompt_completion"), 50, tmp_path / "pc.jsonl")
    res = prepare_energon_dataset(src, tmp_path / "ds", shard_size=16, val_fraction=0.2, split_seed=7)
    val_rows = sorted(np.random.default_rng(7).choice(50, size=10, replace=False).tolist())
    assert res.samples == {"train": 40, "val": 10}
    assert res.shards == {
        "train": [f"shards/train-0000{i}.tar" for i in range(3)],
        "val": ["shards/val-00000.tar"],
    }
    keys = {split: [] for split in ("train", "val")}
    for split, names in res.shards.items():
        sizes = []
        for name in names:
            members = _members(res.root / name)
            sizes.append(len(members))
            for member, payload in members:
                key, part = member.split(".", 1)
                assert part == "json"
                doc = json.loads(payload)
                row = int(key[3:])
                assert doc["source"]["row"] == row and doc["source"]["line"] == row + 1
                keys[split].append(key)
        if split == "train":
            assert sizes == [16, 16, 8]
    assert keys["val"] == [f"row{r:08d}" for r in val_rows]
    assert sorted(keys["train"] + keys["val"]) == [f"row{r:08d}" for r in range(50)]
    split_yaml = (res.root / ".nv-meta" / "split.yaml").read_text()
    assert "train-{00000..00002}.tar" in split_yaml and "val-00000.tar" in split_yaml
    assert (res.root / ".nv-meta" / "dataset.yaml").read_text().strip().endswith("CrudeWebdataset")
    again = read_manifest(res.root)
    assert again.fingerprint == res.fingerprint and again.schema == "prompt_completion"
    assert json.loads(json.dumps(res.to_dict()))["samples"] == {"train": 40, "val": 10}


def test_same_input_gives_byte_identical_shards(tmp_path):
    src = _first_rows(demo_path("chat"), 30, tmp_path / "chat.jsonl")
    a = prepare_energon_dataset(src, tmp_path / "a", media=MediaSpec(seed=3), shard_size=10)
    b = prepare_energon_dataset(src, tmp_path / "b", media=MediaSpec(seed=3), shard_size=10)
    c = prepare_energon_dataset(src, tmp_path / "c", media=MediaSpec(seed=4), shard_size=10)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    for name in a.shards["train"]:
        assert (a.root / name).read_bytes() == (b.root / name).read_bytes()


def test_synthetic_media_members_and_marker(tmp_path):
    src = _first_rows(demo_path("prompt_completion"), 40, tmp_path / "pc.jsonl")
    spec = MediaSpec(seed=11, min_side=8, max_side=20, probability=0.5)
    res = prepare_energon_dataset(src, tmp_path / "ds", media=spec, shard_size=100)
    members = dict(_members(res.root / res.shards["train"][0]))
    original = [json.loads(line) for line in src.read_text().splitlines()]
    n_media = 0
    for r in range(40):
        key = f"row{r:08d}"
        doc = json.loads(members[f"{key}.json"])
        expected = synthetic_image(spec, r)
        if expected is None:
            assert f"{key}.media0" not in members
            assert doc["row"] == original[r]
        else:
            n_media += 1
            assert np.array_equal(load_image(members[f"{key}.media0"]), expected)  # PNG, lossless
            assert 8 <= min(expected.shape[:2]) and max(expected.shape[:2]) <= 20
            assert doc["row"]["prompt"] == "<image>\n" + original[r]["prompt"]
            assert doc["row"]["images"] == [{"member": "media0"}]
    assert 0 < n_media < 40
    assert res.media["samples_with_media"] == n_media == res.media["synthetic"] == res.media["images"]


def test_image_files_become_members_with_their_bytes(tmp_path):
    res = prepare_energon_dataset(vlm_demo_path(), tmp_path / "ds", shard_size=100)
    members = dict(_members(res.root / res.shards["train"][0]))
    rows = [json.loads(line) for line in vlm_demo_path().read_text().splitlines()]
    for r, row in enumerate(rows):
        doc = json.loads(members[f"row{r:08d}.json"])["row"]
        files = list(row.get("images", [])) + [f for v in row.get("videos", []) for f in v["frames"]]
        got = [m["member"] for m in doc.get("images", [])] + [m["member"] for v in doc.get("videos", [])
                                                                for m in v["frames"]]
        assert got == [f"media{k}" for k in range(len(files))]
        for name, path in zip(got, files):
            assert members[f"row{r:08d}.{name}"] == (vlm_demo_path().parent / path).read_bytes()
        assert doc["messages"] == row["messages"]
    assert res.media["videos"] == sum(len(r.get("videos", [])) for r in rows) > 0
    assert res.media["frames"] == 4 * res.media["videos"] and res.media["synthetic"] == 0


def test_inline_pixels_become_png_members(tmp_path):
    path = write_synthetic_vlm_jsonl(tmp_path / "vlm.jsonl", 12, seed=5)
    rows = synthetic_vlm_rows(12, seed=5)
    assert rows == [json.loads(line) for line in path.read_text().splitlines()]
    assert synthetic_vlm_rows(12, seed=6) != rows
    res = prepare_energon_dataset(path, tmp_path / "ds")
    members = dict(_members(res.root / res.shards["train"][0]))
    for r, row in enumerate(rows):
        doc = json.loads(members[f"row{r:08d}.json"])
        if "images" in row:
            pixels = np.asarray(row["images"][0]["pixels"], dtype=np.uint8)
            assert np.array_equal(load_image(members[f"row{r:08d}.media0"]), pixels)
            assert doc["row"]["prompt"].startswith("<image>\n") and doc["row"]["images"] == [{"member": "media0"}]
        else:
            assert "images" not in doc["row"]
    assert res.media["images"] == sum("images" in r for r in rows) > 0


def test_chat_content_parts_are_flattened(tmp_path, write_jsonl):
    image = str(vlm_demo_path().parent / "images" / "red_square.png")
    src = write_jsonl([{"messages": [{"role": "user", "content": [{"type": "image", "image": image},
                                                                  {"type": "text", "text": " what?"}]},
                                     {"role": "assistant", "content": "red"}]}])
    res = prepare_energon_dataset(src, tmp_path / "ds")
    doc = json.loads(dict(_members(res.root / res.shards["train"][0]))["row00000000.json"])["row"]
    assert doc["messages"][0]["content"] == "<image> what?" and doc["images"] == [{"member": "media0"}]
    assert res.schema == "chat"


def test_bad_row_leaves_nothing_behind(tmp_path):
    src = _first_rows(demo_path("prompt_completion"), 20, tmp_path / "pc.jsonl")
    src.write_text(src.read_text() + "{not json\n")
    out = tmp_path / "ds"
    with pytest.raises(InputError) as err:
        prepare_energon_dataset(src, out, shard_size=4)
    assert err.value.file == str(src) and err.value.line == 21
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_failure_keeps_previous_dataset(tmp_path, monkeypatch):
    src = _first_rows(demo_path("prompt_completion"), 10, tmp_path / "pc.jsonl")
    out = tmp_path / "ds"
    first = prepare_energon_dataset(src, out)
    with pytest.raises(UsageError, match="already exists"):
        prepare_energon_dataset(src, out)

    def boom(*args, **kwargs):
        raise RuntimeError("indexing failed")

    monkeypatch.setattr(prep, "_energon_prepare", boom)
    with pytest.raises(RuntimeError, match="indexing failed"):
        prepare_energon_dataset(src, out, overwrite=True, shard_size=3)
    assert read_manifest(out).fingerprint == first.fingerprint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "pc.jsonl"]


def test_row_errors_name_file_and_line(tmp_path, write_jsonl):
    mixed = write_jsonl([{"prompt": "a", "completion": "b"}, {"messages": [{"role": "user", "content": "x"}]}])
    with pytest.raises(InputError, match="chat but the file started with prompt_completion") as err:
        prepare_energon_dataset(mixed, tmp_path / "o1")
    assert err.value.line == 2
    missing = write_jsonl([{"prompt": "<image> a", "completion": "b"},
                           {"prompt": "<image> c", "completion": "d", "images": ["nowhere.png"]}], name="m.jsonl")
    with pytest.raises(InputError, match="not found") as err:
        prepare_energon_dataset(missing, tmp_path / "o2")
    assert (err.value.field, err.value.line) == ("images[0]", 2)
    ragged = write_jsonl([{"prompt": "<image> a", "completion": "b", "images": [{"pixels": [[1, 2], [3]]}]}],
                         name="r.jsonl")
    with pytest.raises(InputError) as err:
        prepare_energon_dataset(ragged, tmp_path / "o3")
    assert (err.value.field, err.value.line) == ("images[0]", 1)
    for bad in ({"shard_size": 0}, {"val_fraction": 1.0}, {"val_fraction": -0.1}):
        with pytest.raises(UsageError):
            prepare_energon_dataset(mixed, tmp_path / "o4", **bad)
    assert not any(p.name.startswith(".o") for p in tmp_path.iterdir())


def test_manifest_tampering_and_foreign_dirs_are_detected(tmp_path):
    src = _first_rows(demo_path("prompt_completion"), 5, tmp_path / "pc.jsonl")
    res = prepare_energon_dataset(src, tmp_path / "ds")
    manifest = json.loads((res.root / prep.MANIFEST_NAME).read_text())
    manifest["splits"]["train"]["samples"] = 6
    (res.root / prep.MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="fingerprint"):
        read_manifest(res.root)
    with pytest.raises(ArtifactError, match="no manifest"):
        read_manifest(tmp_path)


def test_marker_helpers():
    chat = {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"}]}
    assert insert_marker(chat)["conversations"][1]["value"] == "<image>\nhi"
    assert chat["conversations"][1]["value"] == "hi"  # the input row is not modified
    msgs = {"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]}
    assert insert_marker(msgs, "<img>")["messages"][1]["content"] == "<img>\nq"
    with pytest.raises(InputError):
        insert_marker({"messages": [{"role": "assistant", "content": "a"}]})
    ids = np.array([5, 1, 2, 5, 1, 2, 2, 1, 2], dtype=np.int64)
    assert find_subsequence(ids, np.array([1, 2])) == [1, 4, 7]
    assert find_subsequence(np.array([7, 7, 7]), np.array([7, 7])) == [0]


def test_cli_json_and_errors(tmp_path, capsys):
    src = _first_rows(demo_path("chat"), 20, tmp_path / "chat.jsonl")
    out = tmp_path / "ds"
    assert main(["energon-prepare", str(src), "--out", str(out), "--with-media", "--shard-size", "8",
                 "--val-fraction", "0.25", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["samples"] == {"train": 15, "val": 5} and res["schema"] == "chat"
    assert res["media"]["synthetic_spec"]["seed"] == 1234 and len(res["shards"]["train"]) == 2
    assert res["media"]["synthetic"] == res["media"]["images"] > 0
    assert main(["energon-prepare", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and len(err.strip().splitlines()) == 1
    assert main(["energon-prepare", str(src), "--out", str(out), "--overwrite"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("wrote") and "train" in text and "media" not in text

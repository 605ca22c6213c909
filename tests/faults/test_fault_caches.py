"""Faults: caches and artifacts that lie (issue 26, family 4).

Classes: a JSONL edited after its line index was cached (same size, mtime restored; and an edit
within one timestamp tick) is re-indexed, never read through the stale index; a planted index
(row 0 three times and row 1 never, a dropped row, two rows merged) is detected; a pack manifest
whose accounting was edited is not reused; metadata that understates ``max_samples_per_bin`` or
``dataset_max_seqlen`` (Megatron-Bridge 0.6.2 sizes buffers from them) is an integrity issue of
``inspect``; an Energon dataset missing a shard or its index, or holding a stray shard, is an
integrity issue (exit 1), not an input error; the same data given as training and validation split
is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from faults_helpers import ROWS, assert_accounted

from seqpack.data import jsonl as jl
from seqpack.data.jsonl import JsonlFile
from seqpack.core.errors import InputError
from seqpack.verbs import PackOptions, pack

LONG = [{"prompt": f"question {i} " + "x" * 200, "completion": f"answer {i}"} for i in range(80)]  # > 8 KiB


def _lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# --------------------------------------------------------------------------------------------
# The line-index cache
# --------------------------------------------------------------------------------------------


def _edit_middle_keeping_size_and_mtime(path: Path) -> int:
    """Turn a line in the middle (beyond the hashed 4 KiB ends) into malformed JSON of the same length."""
    lines = path.read_text().splitlines(keepends=True)
    k = len(lines) // 2
    lines[k] = "{" + "!" * (len(lines[k]) - 2) + "\n"
    st = path.stat()
    path.write_text("".join(lines))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    return k + 1


def test_an_edited_jsonl_is_reindexed(cli, write, tmp_path):
    path = write("long.jsonl", _lines(LONG))
    assert JsonlFile(path).index_source == "built"
    line = _edit_middle_keeping_size_and_mtime(path)
    again = JsonlFile(path)
    assert again.index_source == "built"  # the ctime (which touch cannot restore) changed
    cli("pack", path, "--out", tmp_path / "o", "--pack-size", 512).refused(f"{path}:{line}", "malformed JSON")


def test_an_edit_within_one_timestamp_tick_is_caught_by_the_content_hash(write, monkeypatch):
    path = write("long.jsonl", _lines(LONG))
    monkeypatch.setattr(jl, "_identity", lambda p: {"dev": 1, "ino": 1, "size": 1, "mtime_ns": 1, "ctime_ns": 1})
    monkeypatch.setattr(jl, "_racy", lambda identity, built: True)  # written just now: hashed as a whole
    assert JsonlFile(path).index_source == "built"
    assert JsonlFile(path).index_source == "cache"
    line = _edit_middle_keeping_size_and_mtime(path)  # the same identity: only the content hash can tell
    again = JsonlFile(path)
    assert again.index_source == "built"
    with pytest.raises(InputError, match="malformed JSON") as err:
        again.row(line - 1)
    assert err.value.line == line


def _plant(path: Path, **arrays: np.ndarray) -> Path:
    """Rewrite the cached index of ``path`` with other arrays under its valid metadata."""
    cache = JsonlFile(path).cache_path
    with np.load(cache) as npz:
        data = {k: npz[k] for k in npz.files}
    data.update(arrays)
    with open(cache, "wb") as fh:
        np.savez(fh, **data)
    return cache


def test_a_planted_index_is_detected(cli, data, tmp_path, caplog):
    good = JsonlFile(data, use_cache=False).index
    starts, ends, lines = good.starts.copy(), good.ends.copy(), good.lines.copy()
    starts[1:3], ends[1:3], lines[1:3] = starts[0], ends[0], lines[0]  # row 0 three times, rows 1-2 never
    _plant(data, starts=starts, ends=ends, lines=lines)
    with caplog.at_level(logging.WARNING):
        again = JsonlFile(data)
    assert again.index_source == "built" and "does not match" in caplog.text
    assert [again.row(i) for i in range(3)] == ROWS[:3]

    drop = np.delete(np.arange(len(good)), 1)  # a row left out: the gap holds more than whitespace
    _plant(data, starts=good.starts[drop], ends=good.ends[drop], lines=good.lines[drop])
    result = pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256))
    assert result.manifest["splits"]["training"]["accounting"]["packed"] == len(ROWS)
    assert_accounted(result.manifest)
    fresh = pack(PackOptions(input=data, out=tmp_path / "fresh", pack_size=256, overwrite=True))
    assert result.files["training"].read_bytes() == fresh.files["training"].read_bytes()


def test_a_planted_index_merging_rows_is_refused_when_read(data):
    good = JsonlFile(data, use_cache=False).index
    keep = np.delete(np.arange(len(good)), 1)
    ends = good.ends.copy()
    ends[0] = good.ends[1]  # row 0 swallows row 1; line numbers forged to look consecutive
    _plant(data, starts=good.starts[keep], ends=ends[keep], lines=np.arange(1, len(keep) + 1, dtype=np.int64))
    planted = JsonlFile(data)
    assert planted.index_source == "cache"  # the boundaries look right: only reading the row tells
    with pytest.raises(InputError, match="line index does not match the file"):
        planted.row(0)


# --------------------------------------------------------------------------------------------
# Manifests and metadata
# --------------------------------------------------------------------------------------------


def _edit_manifest(result, edit) -> None:
    manifest = json.loads(result.manifest_path.read_text())
    edit(manifest["splits"]["training"]["accounting"])
    result.manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("edit, needle", [
    (lambda a: a.update(packed=a["packed"] - 5, skipped_total=a["skipped_total"] + 5,
                        skipped={"empty_completion": {"count": 5, "examples": []}}), "packed samples"),
    (lambda a: a.update(rows_in=a["rows_in"] + 7, skipped_total=a["skipped_total"] + 7,
                        skipped={"too_long": {"count": 7, "examples": []}}), "input rows"),
    (lambda a: a.update(skipped_total=3), "does not add up"),
], ids=["packed", "rows_in", "skipped"])
def test_a_manifest_whose_accounting_was_edited_is_not_reused(data, tmp_path, edit, needle):
    first = pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256))
    _edit_manifest(first, edit)
    again = pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256))
    assert not again.reused and needle in again.rebuilt, again.rebuilt
    assert_accounted(again.manifest) and again.manifest["splits"]["training"]["accounting"]["rows_in"] == len(ROWS)
    assert pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256)).reused


def _record(path: Path) -> dict:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_metadata_that_understates_the_packs_is_an_integrity_issue(cli, data, tmp_path):
    first = pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256))
    meta = json.loads(first.metadata_path.read_text())
    truth = dict(meta[0])
    assert truth["max_samples_per_bin"] > 1 and truth["dataset_max_seqlen"] > 1
    meta[0].update(max_samples_per_bin=1, dataset_max_seqlen=1)
    first.metadata_path.write_text(json.dumps(meta))
    manifest = json.loads(first.manifest_path.read_text())  # a consistent forgery: the records agree
    manifest["files"][first.metadata_path.name] = _record(first.metadata_path)
    first.manifest_path.write_text(json.dumps(manifest))
    run = cli("inspect", first.root, "--json")
    assert run.code == 1, run.out
    messages = [i["message"] for i in json.loads(run.out)["issues"] if i["check"] == "metadata"]
    assert any("understates max_samples_per_bin: 1, the packs hold " + str(truth["max_samples_per_bin"]) in m
               for m in messages), messages
    assert any("understates dataset_max_seqlen" in m for m in messages), messages
    first.metadata_path.write_text(json.dumps([truth]))  # negative control: the truth is no issue
    manifest["files"][first.metadata_path.name] = _record(first.metadata_path)
    first.manifest_path.write_text(json.dumps(manifest))
    assert cli("inspect", first.root).code == 0


# --------------------------------------------------------------------------------------------
# Energon datasets
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def energon_dataset(tmp_path_factory) -> Path:
    from seqpack.verbs import EnergonPrepareOptions, energon_prepare

    base = tmp_path_factory.mktemp("energon_caches")
    src = base / "data.jsonl"
    src.write_text(_lines(ROWS))
    energon_prepare(EnergonPrepareOptions(input=src, out=base / "ds", shard_size=20))
    return base / "ds"


@pytest.mark.slow
@pytest.mark.parametrize("damage, check, needle", [
    ("delete_shard", "missing_file", "shards/train-00001.tar is missing"),
    ("delete_index", "energon_index", ".nv-meta/split.yaml"),
    ("delete_sqlite", "energon_index", ".nv-meta/index.sqlite is missing"),
    ("stray_shard", "stray_file", "shards/train-00009.tar: a shard the manifest does not record"),
])
def test_a_damaged_energon_dataset_is_an_integrity_issue(cli, energon_dataset, tmp_path, damage, check, needle):
    out = tmp_path / "ds"
    shutil.copytree(energon_dataset, out)
    assert cli("inspect", out).code == 0  # negative control: intact
    if damage == "delete_shard":
        (out / "shards" / "train-00001.tar").unlink()
    elif damage == "delete_index":
        (out / ".nv-meta" / "split.yaml").unlink()
    elif damage == "delete_sqlite":
        (out / ".nv-meta" / "index.sqlite").unlink()
    else:
        shutil.copy(out / "shards" / "train-00000.tar", out / "shards" / "train-00009.tar")
    run = cli("inspect", out, "--json")
    assert run.code == 1, (run.code, run.err)  # an integrity issue, not an input error (2)
    issues = json.loads(run.out)["issues"]
    assert any(i["check"] == check and needle in i["message"] for i in issues), issues
    assert json.loads(run.out)["ok"] is False


# --------------------------------------------------------------------------------------------
# The same data as two splits
# --------------------------------------------------------------------------------------------


def test_the_same_file_as_training_and_validation_is_refused(cli, data, tmp_path):
    cli("pack", data, "--validation", data, "--out", tmp_path / "o", "--pack-size", 256).refused(
        "field 'validation'", "the validation split reads the same data as the training split")
    copy = tmp_path / "copy.jsonl"
    shutil.copy(data, copy)  # another path, the same rows
    cli("pack", data, "--validation", copy, "--out", tmp_path / "o", "--pack-size", 256).refused(str(copy))
    assert not (tmp_path / "o").exists()
    held_out = tmp_path / "val.jsonl"
    held_out.write_text(_lines(ROWS[:5]))
    assert cli("pack", data, "--validation", held_out, "--out", tmp_path / "o", "--pack-size", 256).code == 0

"""``--engine ray`` writes the bytes ``--engine local`` writes: demo data, 100k generated rows, a worker killed
mid-run, shards coming back in any order, bad rows, the shard bin scope.

Every comparison is of all three files of the pack directory (packs, metadata, manifest) with the local
worker pool's; the negative control is a run with another seed, which must differ.
"""

from __future__ import annotations

import filecmp
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from seqpack.core.errors import InputError, PackingError, UsageError
from seqpack.data import demo_path
from seqpack.data.schemas import PromptCompletionSchema
from seqpack.packing.offline.prepare import prepare_packed_dataset

ROOT = Path(__file__).resolve().parents[2]


def _same_dir(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False), name


def _pack(data, out, engine, **kw):
    kw.setdefault("pack_size", 2048)
    kw.setdefault("pad_seq_to_mult", 8)
    return prepare_packed_dataset(data, out, engine=engine, **kw)


@pytest.fixture(scope="module")
def rows100k(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "bench"))
    from gen_sft_jsonl import write_rows

    folder = tmp_path_factory.mktemp("rows")
    write_rows(folder / "rows.jsonl", 100_000, seed=3, median_words=16)
    write_rows(folder / "val.jsonl", 3_000, seed=4, median_words=16)
    return folder / "rows.jsonl"


#: The generator's columns (bench/gen_sft_jsonl.py).
IO = {"schema": PromptCompletionSchema(prompt_column="input", completion_column="output")}


@pytest.mark.parametrize("kind", ["prompt_completion", "chat"])
def test_demo_data_is_byte_identical_to_local(ray_cluster, tmp_path, kind):
    local = _pack(demo_path(kind), tmp_path / "local", "local", row_group_size=7, num_workers=2)
    ray = _pack(demo_path(kind), tmp_path / "ray", "ray", row_group_size=7)
    assert local.root.name == ray.root.name
    _same_dir(local.root, ray.root)
    other = _pack(demo_path(kind), tmp_path / "other", "ray", row_group_size=7, seed=99)
    assert not filecmp.cmp(local.files["training"], other.files["training"], shallow=False)


def test_many_shards_come_back_in_any_order(ray_cluster, tmp_path, monkeypatch, rows100k):
    """About a hundred tokenize tasks on 2 CPUs finish in their own order; the key sort, not Ray, gives the order."""
    from seqpack.packing.offline import ray_engine

    monkeypatch.setattr(ray_engine, "SHARD_ROWS", 1024)
    arrived: list[int] = []
    wait = ray_cluster.wait

    def recording_wait(refs, **kw):
        ready, rest = wait(refs, **kw)
        arrived.extend(refs.index(r) for r in ready)
        return ready, rest

    monkeypatch.setattr(ray_cluster, "wait", recording_wait)
    local = _pack(rows100k, tmp_path / "local", "local", pack_size=4096, **IO)
    ray = _pack(rows100k, tmp_path / "ray", "ray", pack_size=4096, **IO)
    _same_dir(local.root, ray.root)
    assert len(arrived) > 90  # the tokenize tasks (one per job) and the writes all came through ray.wait


def test_100k_rows_with_validation_and_shard_scope(ray_cluster, tmp_path, rows100k):
    inputs = {"training": rows100k, "validation": rows100k.with_name("val.jsonl")}
    for scope in ({}, {"bin_scope": "shard", "shard_rows": 30_000}):
        local = _pack(inputs, tmp_path / f"local{len(scope)}", "local", pack_size=4096, num_workers=2, **IO, **scope)
        ray = _pack(inputs, tmp_path / f"ray{len(scope)}", "ray", pack_size=4096, **IO, **scope)
        _same_dir(local.root, ray.root)
        assert json.loads((ray.root / "seqpack_manifest.json").read_text())["splits"]["training"]["gap"]["gap"] >= 0


def _ray_tasks(psutil, name: str) -> list:
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        title = " ".join(proc.info.get("cmdline") or []) + " " + (proc.info.get("name") or "")
        if f"ray::{name}" in title:
            found.append(proc)
    return found


def test_a_worker_killed_mid_run_is_retried_with_the_same_bytes(ray_cluster, tmp_path, rows100k, need):
    psutil = need("psutil")
    local = _pack(rows100k, tmp_path / "local", "local", pack_size=4096, num_workers=2, **IO)
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set() and not killed:
            for proc in _ray_tasks(psutil, "tokenize_shard"):
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(proc.pid)
                break
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        ray = _pack(rows100k, tmp_path / "ray", "ray", pack_size=4096, **IO)
    finally:
        stop.set()
        thread.join()
    assert killed, "no tokenize task was caught running"
    _same_dir(local.root, ray.root)
    assert not list((tmp_path / "ray").glob("*tmp*"))


def test_a_bad_row_fails_like_local_and_leaves_nothing(ray_cluster, tmp_path):
    rows = [json.dumps({"prompt": f"p{i}", "completion": f"c{i}"}) for i in range(5000)]
    rows[3100] = '{"prompt": "broken'
    rows[4500] = "[1, 2]"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rows) + "\n")
    errors = {}
    for engine in ("local", "ray"):
        with pytest.raises(InputError) as info:
            _pack(bad, tmp_path / engine, engine, pack_size=256)
        errors[engine] = str(info.value)
        assert not any((tmp_path / engine).iterdir())
    assert errors["ray"] == errors["local"] and ":3101, row 3100" in errors["ray"]


def test_a_task_that_keeps_failing_names_its_rows(ray_cluster, tmp_path, monkeypatch):
    from seqpack.packing.offline import ray_engine

    executor = ray_engine.RayExecutor()
    err = executor._error(RuntimeError("worker died"), "tokenizing rows 0-16383 of data.jsonl (shard 0)")
    assert isinstance(err, PackingError) and "rows 0-16383 of data.jsonl (shard 0)" in str(err)
    assert "after 3 retries" in str(err)
    monkeypatch.setattr(executor, "_driver_versions", {"seqpack": "0.0.0"})
    ref = ray_cluster.put(([], {"seqpack": "9.9.9"}))
    with pytest.raises(UsageError, match="tokens could differ"):
        executor._run(lambda k: ref, 1, lambda k: "shard")


def test_engine_ray_and_torchrun_are_exclusive(tmp_path):
    with pytest.raises(UsageError, match="pick one"):
        _pack(demo_path("prompt_completion"), tmp_path / "o", "ray", distributed=True)
    with pytest.raises(UsageError, match="unknown engine"):
        _pack(demo_path("prompt_completion"), tmp_path / "o", "spark")


def test_the_cli_packs_with_ray(ray_cluster, tmp_path, capsys):
    from seqpack.faces.cli import main

    base = ["pack", str(demo_path("chat")), "--pack-size", "2048", "--cp", "2", "--no-progress", "--json"]
    assert main([*base, "--out", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*base, "--out", str(tmp_path / "ray"), "--engine", "ray"]) == 0
    ray = json.loads(capsys.readouterr().out)
    _same_dir(Path(local["root"]), Path(ray["root"]))

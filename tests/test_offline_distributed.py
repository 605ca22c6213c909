"""Offline packing on two gloo ranks under torchrun must write exactly what one process writes.

One launch runs every case (tests/distributed/offline_worker.py): ``seqpack pack`` as a command (it
detects torchrun and creates the process group itself), then library calls in the same processes
(they reuse that group) with two worker processes per
rank and small row groups (so both ranks write parts), Bridge-compatible packing with the
``pad_seq_length_to_mult`` override and a metadata file to append to, a second identical call
(reused on every rank), and malformed inputs (every rank must raise the error a single process
raises: the first bad line in input order). The single-process references run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqpack.core.errors import InputError
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.training.ranks import reserved_port
from seqpack.verbs import PackOptions, pack

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[1]
NPROC = 2
ROWS = 2600  # three tokenization jobs: rank 0 gets the first, rank 1 the other two


def _rows(n: int, seed: int) -> list[str]:
    import random

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        completion = "" if i % 97 == 5 else "c" * rnd.randint(1, 60) + f" {i}"
        out.append(json.dumps({"prompt": f"[{i}] " + "p" * rnd.randint(0, 300 if i % 50 == 0 else 40),
                               "completion": completion}))
    return out


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("offline_dist")
    train = _write(tmp / "train.jsonl", _rows(ROWS, 1))
    val = _write(tmp / "val.jsonl", _rows(300, 2))
    bad_rank1 = _rows(ROWS, 3)
    bad_rank1[1499] = '{"prompt": "broken'
    bad_rank1[2199] = "[1, 2]"
    bad_both = list(bad_rank1)
    bad_both[99] = "not json"
    dist_out, single_out = tmp / "dist", tmp / "single"
    library = {"inputs": {"training": train, "validation": val}, "pack_size": 256, "pad_seq_to_mult": 4,
               "seed": 5, "row_group_size": 3, "num_workers": 2}
    bridge = {"inputs": train, "pack_size": 256, "pad_seq_to_mult": 4, "bridge_compat": True,
              "algorithm": "first_fit_shuffle", "row_group_size": 7, "pad_seq_length_to_mult": 8}
    cases = [
        {"name": "cli", "kind": "cli", "args": ["pack", train, "--out", str(dist_out / "cli"), "--validation", val,
                                                 "--pack-size", "256", "--cp", "2", "--json"]},
        {"name": "library", "kind": "library", "kwargs": {**library, "out_root": str(dist_out / "lib")}},
        {"name": "bridge", "kind": "library", "kwargs": {**bridge, "out_root": str(dist_out / "bridge"),
                                                        "metadata_path": str(dist_out / "bridge_meta.json")}},
        {"name": "reuse", "kind": "library", "kwargs": {**library, "out_root": str(dist_out / "lib")}},
        {"name": "bad_rank1", "kind": "library", "kwargs": {"inputs": _write(tmp / "bad1.jsonl", bad_rank1),
                                                           "out_root": str(dist_out / "bad1"), "pack_size": 256}},
        {"name": "bad_both", "kind": "library", "kwargs": {"inputs": _write(tmp / "bad2.jsonl", bad_both),
                                                          "out_root": str(dist_out / "bad2"), "pack_size": 256}},
    ]
    (tmp / "cases.json").write_text(json.dumps(cases))
    reports_dir = tmp / "reports"
    reports_dir.mkdir()
    with reserved_port() as port:  # held while torchrun's rendezvous binds it
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(NPROC),
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               str(ROOT / "tests" / "distributed" / "offline_worker.py"), "--cases", str(tmp / "cases.json"),
               "--out", str(reports_dir)]
        path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    reports = [json.loads((reports_dir / f"rank{r}.json").read_text()) for r in range(NPROC)]
    for r in reports:
        assert "crash" not in r, r["crash"]

    single = {
        "cli": pack(PackOptions(input=train, out=single_out / "cli", validation=val, pack_size=256, cp=2,
                                distributed=False)).root,
        "library": prepare_packed_dataset(out_root=single_out / "lib", distributed=False, **library).root,
        "bridge": prepare_packed_dataset(out_root=single_out / "bridge", distributed=False,
                                         metadata_path=single_out / "bridge_meta.json", **bridge).root,
    }
    errors = {}
    for name in ("bad_rank1", "bad_both"):
        kwargs = next(c["kwargs"] for c in cases if c["name"] == name)
        with pytest.raises(InputError) as info:
            prepare_packed_dataset(**{**kwargs, "out_root": str(single_out / name)}, distributed=False)
        errors[name] = info.value
    return {"reports": reports, "single": single, "errors": errors, "dist_out": dist_out, "single_out": single_out}


def test_every_rank_reported(run):
    assert sorted(r["rank"] for r in run["reports"]) == list(range(NPROC))
    assert all(r["world_size"] == NPROC for r in run["reports"])


def test_command_under_torchrun_matches_one_process(run):
    for r in run["reports"]:
        case = r["cases"]["cli"]
        assert case["exit"] == 0, case["stderr"]
    printed = json.loads(run["reports"][0]["cases"]["cli"]["stdout"])
    assert Path(printed["root"]).name == run["single"]["cli"].name
    assert _files(Path(printed["root"])) == _files(run["single"]["cli"])


@pytest.mark.parametrize("name", ["library", "bridge"])
def test_library_under_torchrun_is_byte_identical(run, name):
    roots = {r["cases"][name]["root"] for r in run["reports"]}
    assert len(roots) == 1 and all(r["cases"][name]["reused"] is False for r in run["reports"])
    assert all(r["cases"][name]["complete_on_return"] for r in run["reports"])
    root = Path(roots.pop())
    assert root.name == run["single"][name].name
    files = _files(root)
    assert files == _files(run["single"][name])
    assert not any(name.startswith(".") for name in files)  # no spill, parts or probe left
    import pyarrow.parquet as pq

    parquet = root / next(n for n in files if n.endswith(".idx.parquet"))
    assert pq.ParquetFile(parquet).metadata.num_row_groups > NPROC  # both ranks wrote parts


def test_metadata_appended_once_like_one_process(run):
    dist = json.loads((run["dist_out"] / "bridge_meta.json").read_text())
    single = json.loads((run["single_out"] / "bridge_meta.json").read_text())
    assert dist == single and len(dist) == 1


def test_second_call_reuses_on_every_rank(run):
    assert all(r["cases"]["reuse"]["reused"] is True for r in run["reports"])
    roots = {r["cases"]["library"]["root"] for r in run["reports"]}
    assert {r["cases"]["reuse"]["root"] for r in run["reports"]} == roots


@pytest.mark.parametrize("name, line", [("bad_rank1", 1500), ("bad_both", 100)])
def test_every_rank_raises_the_first_bad_line(run, name, line):
    expected = run["errors"][name]
    assert expected.line == line
    for r in run["reports"]:
        got = r["cases"][name]
        assert (got["error"], got["message"], got["line"]) == ("InputError", expected.message, line)
    out = run["dist_out"] / name
    assert not out.exists() or list(out.iterdir()) == []

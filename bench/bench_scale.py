"""Benchmark: offline packing at 1M and 10M rows on this machine, with the local pool and with local Ray.

Usage: python bench/bench_scale.py [--rows 1000000 10000000] [--engines local ray] [--workers 2]
           [--tokenizer byte] [--pack-size 8192] [--median-words 16] [--shard-rows 100000] [--keep-data DIR]

For every row count it generates prompt/completion rows (``gen_sft_jsonl.py``, seeded, heavy-tailed) and
packs them once per cell, each cell a fresh process:

* ``local``: ``prepare_packed_dataset(..., num_workers=W)`` in seqpack's venv (the worker pool);
* ``ray``: the same call with ``engine="ray"`` in the Ray lane's venv (``scripts/setup_ray.sh``), which
  starts a local Ray cluster of W CPUs;
* ``local, shard scope``: the local pool with ``bin_scope="shard"`` (``--shard-rows`` rows per shard) and
  ``max_gap=0.001`` (the run fails if its certificate is worse).

Per cell: wall time, the peak proportional set size (PSS: pages shared by several processes, such as a
forked worker's copy of its parent's, count once, split between them) of every process of the cell's
tree, sampled from ``/proc/<pid>/smaps_rollup`` twice a second and grouped by role (the driver, the pool's workers, Ray's workers, raylet,
GCS, others), the packs and the gap certificate from the manifest, and whether the packs are the same
bytes as the local pool's (the Ray cell and the local cell are compared file by file). The load average
is recorded; run it niced on a quiet machine, once. Writes ``bench/results/scale.json``.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

PAGE_KB = 4


def _tree(root: int) -> list[int]:
    """``root`` and every process descending from it (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def _role(pid: int, root: int) -> str:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if pid == root:
        return "driver"
    for needle, role in (("ray::", "ray worker"), ("default_worker.py", "ray worker"), ("gcs_server", "ray gcs"),
                         ("/raylet", "ray raylet"), ("dashboard", "ray dashboard"), ("log_monitor", "ray other"),
                         ("monitor.py", "ray other")):
        if needle in cmd:
            return role
    return "pool worker" if "python" in cmd else "other"


class PeakSampler(threading.Thread):
    """Samples the PSS of every process in a tree until stopped; keeps the peak per pid and its role."""

    def __init__(self, root: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root, self.every = root, every
        self.peaks: dict[int, tuple[str, int]] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for pid in _tree(self.root):
                try:  # PSS: a forked worker's pages shared with its parent count once, split between them
                    rollup = open(f"/proc/{pid}/smaps_rollup").read()
                except OSError:
                    continue
                pss = next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
                role = self.peaks.get(pid, (None, 0))[0] or _role(pid, self.root)
                self.peaks[pid] = (role, max(pss, self.peaks.get(pid, ("", 0))[1]))
            self.stopped.wait(self.every)

    def by_role(self) -> dict[str, dict[str, Any]]:
        """Per role: processes seen, the largest peak of one of them (MB) and the sum of their peaks (MB)."""
        out: dict[str, dict[str, Any]] = {}
        for role, kb in self.peaks.values():
            entry = out.setdefault(role, {"processes": 0, "max_mb": 0.0, "sum_mb": 0.0})
            entry["processes"] += 1
            entry["max_mb"] = round(max(entry["max_mb"], kb / 1024), 1)
            entry["sum_mb"] = round(entry["sum_mb"] + kb / 1024, 1)
        return out


CELL = """
import json, logging, sys, time
t0 = time.perf_counter()
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
logging.getLogger("seqpack.packing.offline.prepare").setLevel(logging.INFO)
from seqpack.data.schemas import PromptCompletionSchema
from seqpack.packing.offline.prepare import prepare_packed_dataset
spec = json.loads(sys.argv[1])
res = prepare_packed_dataset(spec["data"], spec["out"], schema=PromptCompletionSchema(prompt_column="input",
                             completion_column="output"), **spec["kwargs"])
info = res.splits["training"]
print(json.dumps({"root": str(res.root), "seconds": time.perf_counter() - t0, "packs": info["packs"],
                  "gap": info["gap"], "tokens": info["real_tokens"], "rows_in": info["accounting"]["rows_in"],
                  "packing": info["packing"]}))
"""


def run_cell(python: str, data: Path, out: Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    spec = json.dumps({"data": str(data), "out": str(out), "kwargs": kwargs})
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "TQDM_DISABLE": "1", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": str(ROOT / "reference_impl")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-c", CELL, spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=ROOT)
    sampler = PeakSampler(proc.pid)
    sampler.start()
    out_text, err = proc.communicate()
    sampler.stopped.set()
    sampler.join()
    wall = time.perf_counter() - t0
    if proc.returncode:
        return {"error": err.decode()[-3000:], "wall_s": wall}
    result = json.loads(out_text.decode().strip().splitlines()[-1])
    stages: dict[str, float] = {}
    for line in err.decode(errors="replace").splitlines():  # "stage <split> <stage>: <seconds> s"
        if line.startswith("stage training "):
            name, seconds = line[len("stage training "):].rsplit(": ", 1)
            stages[name] = round(float(seconds.split()[0]), 2)
    result.update(wall_s=round(wall, 2), memory=sampler.by_role(), stages=stages)
    return result


def _same(a: str, b: str) -> bool:
    names = sorted(p.name for p in Path(a).iterdir())
    return names == sorted(p.name for p in Path(b).iterdir()) and all(
        filecmp.cmp(Path(a) / n, Path(b) / n, shallow=False) for n in names)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--engines", nargs="+", default=["local", "ray", "shard"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the byte tokenizer)")
    ap.add_argument("--pack-size", type=int, default=8192)
    ap.add_argument("--median-words", type=float, default=16.0)
    ap.add_argument("--shard-rows", type=int, default=100_000)
    ap.add_argument("--max-gap", type=float, default=0.001)
    ap.add_argument("--ray-python", default=str(ROOT / os.environ.get("SEQPACK_RAY_VENV", ".venv-ray") / "bin" / "python"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    from gen_sft_jsonl import write_rows

    from seqpack.core.textfmt import text_table

    work = Path(args.workdir or tempfile.mkdtemp(prefix="seqpack-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    base = {"pack_size": args.pack_size, "pad_seq_to_mult": 8, "num_workers": args.workers}
    if args.tokenizer:
        base["tokenizer"] = args.tokenizer
    cells: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    try:
        for rows in args.rows:
            data = work / f"rows-{rows}.jsonl"
            if not data.exists():
                info = write_rows(data, rows, seed=0, median_words=args.median_words)
                print(f"generated {rows:,} rows, {info['bytes'] / 1e9:.2f} GB", flush=True)
            outs: dict[str, str] = {}
            for engine in args.engines:
                python, kwargs = sys.executable, dict(base)
                if engine == "ray":
                    python, kwargs["engine"] = args.ray_python, "ray"
                elif engine == "shard":
                    kwargs.update(bin_scope="shard", shard_rows=args.shard_rows, max_gap=args.max_gap)
                out = work / f"out-{rows}-{engine}"
                shutil.rmtree(out, ignore_errors=True)  # never reuse packs of an earlier run
                load = os.getloadavg()[0]
                res = run_cell(python, data, out, kwargs)
                res.update(rows=rows, engine=engine, load_before=round(load, 2), load_after=round(os.getloadavg()[0], 2))
                if "root" in res:
                    outs[engine] = res["root"]
                if engine == "ray" and "local" in outs and "root" in res:
                    res["same_bytes_as_local"] = _same(outs["local"], res["root"])
                cells.append(res)
                print(json.dumps({k: v for k, v in res.items() if k not in ("packing",)}), flush=True)
            for engine in args.engines:
                shutil.rmtree(work / f"out-{rows}-{engine}", ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    table = []
    for c in cells:
        mem = c.get("memory", {})
        roles = ", ".join(f"{r} {v['max_mb']:,.0f}" + (f" (x{v['processes']})" if v["processes"] > 1 else "")
                          for r, v in sorted(mem.items()) if r != "gone")
        table.append([f"{c['rows']:,}", c["engine"], f"{c['wall_s']:.0f} s" if "error" not in c else "FAILED",
                      roles, c.get("packs", "-"), f"{c['gap']['gap']:.5%}" if "gap" in c else "-",
                      {True: "yes", False: "NO"}.get(c.get("same_bytes_as_local"), "-")])
    print(f"workers={args.workers} tokenizer={args.tokenizer or 'byte'} pack={args.pack_size} "
          f"load before={[round(x, 2) for x in load_before]} after={[round(x, 2) for x in os.getloadavg()]}")
    print(text_table(["rows", "engine", "wall", "peak PSS per process (MB)", "packs", "gap", "same bytes"], table))
    path = ROOT / "bench" / "results" / "scale.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"workers": args.workers, "tokenizer": args.tokenizer or "byte",
                                "pack_size": args.pack_size, "median_words": args.median_words, "cells": cells},
                               indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

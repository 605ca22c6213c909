"""Benchmark: seqpack beside Megatron-Bridge 0.6.2 on the same data, side by side, results checked equal.

Usage: python bench/bench_vs_bridge.py [--quick] [--rows 100000 1000000] [--pack-sizes 4096 8192]
           [--tokenizers qwen3 wordlevel] [--repeat 3] [--bridge-repeat-large 1]
           [--sections offline pack_stage read in_batch validate] [--max-rss-gb 14] [--plant-mismatch]

Needs the upstream lane (``scripts/setup_upstream.sh``; ``$SEQPACK_UPSTREAM_VENV``): every Bridge cell runs
``bench/bridge_side.py`` in the lane's interpreter (megatron-bridge 0.6.2, megatron-core 0.19.2), every
seqpack cell ``bench/seqpack_side.py`` in this one, each in a fresh process. In every repeat the two
sides take turns (the side that goes first alternates), so both see the same machine. Per cell: median
wall time of the process (interpreter start to exit), its CPU seconds (the process and its workers),
the peak RSS of the main process and of its workers (``ru_maxrss``; the cell's figure is their sum, the
most the two could hold at once), the load average around it. Sections:

* ``offline``: preparation end to end on the same prompt/completion JSONL (``gen_sft_jsonl.py``: seeded,
  heavy-tailed word counts) with the same tokenizer (the real Qwen3 bundle from
  ``.seqpack-cache/tokenizers`` and the tiny WordLevel one the lane tests use): Bridge's
  ``prepare_gpt_sft_packed_data`` (its default: serial tokenization) against ``seqpack pack`` with 1 and
  2 workers, with and without ``--bridge-compat``. Checked: with ``--bridge-compat`` the packed rows
  (``input_ids``, ``loss_mask``, ``seq_start_id``, in order) and the metadata file equal Bridge's;
  without it (best-fit decreasing) the packs hold the same samples (every segment, token for token)
  in no more packs. Each run reads its own hard link of the input, so no line index is reused.
* ``pack_stage``: the packing stage alone on the runtime lengths of Bridge's packs of the offline
  section (the same tokenized lengths for both): ``create_hist`` + ``create_packing_strategy`` +
  ``fill_packing_strategy`` against ``bridge_pack_csr`` (``--bridge-compat``'s packing; checked: the same samples in the same rows
  in the same order, the same metadata) and ``pack_lengths`` best-fit decreasing (checked: every sample
  once, no pack over the capacity, no more packs).
* ``read``: Bridge's packs read by ``GPTSFTPackedParquetDataset`` + ``collate_fn`` and by seqpack's
  ``PackedParquetDataset`` (``collate_bridge``: Bridge's batch form, checked equal key for key;
  ``collate``: the canonical THD micro-batch, checked on tokens, labels, positions and loss mask), one
  row per micro-batch.
* ``in_batch``: ``build_mcore_thd_sequence_batch_from_rows`` against ``build_thd_batch`` on the same rows
  at MBS 4, 8 and 16 (checked: tokens, labels, loss mask, positions, boundaries, max lengths).
* ``validate``: Bridge's ``runtime_config_update`` (building the ``ConfigContainer`` included) against
  ``validate_config`` on every rule's trigger and fixed example (checked: the same verdict, or a
  seqpack refusal whose rule names the later upstream failure); import time reported apart.

A cell whose results differ is reported as ``DIFFER`` and gets no speed-up. ``--plant-mismatch`` adds
one planted seqpack cell per section whose input was changed (another seed, another EOS id, another
alignment, no rules): each must be reported as differing (the negative control of the checks).
``--quick``: the first row count only, one pack size, one repeat. Writes ``bench/results/vs_bridge.json``.
Targets (issue 25): offline preparation at 1M samples >= 10x faster wall than Bridge with <= 1/5 of
its peak RSS; the packing stage alone >= 50x; reader and in-batch builder at least as fast as Bridge.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from gen_sft_jsonl import VOCAB, write_rows  # noqa: E402

from seqpack.core.textfmt import text_table  # noqa: E402

SEED = 1234
#: Bridge's recipe-shaped prompt/completion preprocessing: the generator's columns, one space between.
PC_CONFIG = {"prompt_column": "input", "completion_column": "output", "separator": " "}
#: The tiny tokenizer's special tokens (the lane tests' WordLevel tokenizer) and its words.
SPECIALS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
SECTIONS = ("offline", "pack_stage", "read", "in_batch", "validate")
BRIDGE = "Bridge 0.6.2"
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# ------------------------------------------------------------------------------------------------
# running one measured process


def _tree_pids(root: int) -> set[int]:
    """``root`` and its descendants (from /proc; just ``root`` where /proc cannot be read)."""
    parents: dict[int, int] = {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return {root}
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                parents[int(name)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == pid and p not in tree]
        tree.update(kids)
        frontier.extend(kids)
    return tree


def tree_memory_mb(root: int) -> float:
    """Memory the process tree of ``root`` holds now, in MB: the sum of its processes' proportional set
    sizes (PSS: a page shared by k processes counts 1/k in each, so forked workers' shared pages are
    not counted twice), from /proc/PID/smaps_rollup; RSS where that is unreadable; 0 without /proc."""
    total = 0.0
    for pid in _tree_pids(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            try:
                with open(f"/proc/{pid}/statm", "rb") as fh:
                    total += int(fh.read().split()[1]) * PAGE
            except (OSError, IndexError, ValueError):
                continue
    return total / 2**20


def self_interval(elapsed: float) -> float:
    """Seconds between memory samples: 0.25 s for the first 10 s of a process, then 1 s."""
    return 0.25 if elapsed < 10 else 1.0


def run_process(cmd: list[str], env: dict[str, str], result: Path, log: Path, max_rss_mb: float,
                timeout_s: float) -> dict[str, Any]:
    """Run ``cmd`` to its end and measure it: wall, CPU and peak RSS of the process tree (wait4), the
    sampled peak of its summed RSS, the load average around it, and the JSON it wrote to ``result``.

    A tree whose RSS passes ``max_rss_mb`` (or that runs past ``timeout_s``) is killed and reported
    as such (``killed``), so one side cannot take the machine's memory from everyone else."""
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=err, stderr=err, cwd=ROOT, start_new_session=True)
    sampled, killed, status, usage = 0.0, None, 0, None
    next_sample = start
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.perf_counter()
        if now >= next_sample:
            sampled = max(sampled, tree_memory_mb(proc.pid))
            next_sample = time.perf_counter() + self_interval(now - start)
            if killed is None and (sampled > max_rss_mb or now - start > timeout_s):
                killed = (f"killed: memory {sampled:,.0f} MB over the {max_rss_mb:,.0f} MB limit" if sampled > max_rss_mb
                          else f"killed: running past {timeout_s:,.0f} s")
                os.killpg(proc.pid, 9)
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    out: dict[str, Any] = {
        "wall_s": wall, "rc": proc.returncode, "load_before": load_before, "load_after": os.getloadavg()[0],
        "tree_cpu_s": usage.ru_utime + usage.ru_stime, "peak_memory_mb": sampled,
    }
    if killed:
        out["killed"] = killed
    if proc.returncode == 0 and result.is_file():
        out.update(json.loads(result.read_text(encoding="utf-8")))
        out["peak_memory_mb"] = max(sampled, out["main_peak_rss_mb"])
        out["cpu_s"] = out["main_cpu_s"] + out["worker_cpu_s"]
    elif not killed:
        out["error"] = log.read_text(encoding="utf-8", errors="replace")[-3000:]
    return out


class Runner:
    """Starts side tasks: Bridge's in the lane's interpreter, seqpack's in this one."""

    def __init__(self, tmp: Path, lane_python: Path, args: argparse.Namespace) -> None:
        from seqpack_lane.client import lane_environment

        self.tmp, self.lane_python, self.args = tmp, lane_python, args
        self.count = 0
        common = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TQDM_DISABLE": "1"}
        self.bridge_env = {**lane_environment(tmp / "lane"), **common}
        self.seqpack_env = {**os.environ, **common}

    def run(self, side: str, task: str, spec: dict) -> dict[str, Any]:
        """One task in a fresh process of ``side`` ("bridge" or "seqpack")."""
        self.count += 1
        stem = self.tmp / "runs" / f"{self.count:04d}-{side}-{task}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        spec_path, result = stem.with_suffix(".spec.json"), stem.with_suffix(".result.json")
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        if side == "bridge":
            cmd, env = [str(self.lane_python), str(HERE / "bridge_side.py")], self.bridge_env
        else:
            cmd, env = [sys.executable, str(HERE / "seqpack_side.py")], self.seqpack_env
        return run_process(cmd + [task, str(spec_path), str(result)], env, result, stem.with_suffix(".log"),
                           self.args.max_rss_gb * 1024, self.args.timeout)


# ------------------------------------------------------------------------------------------------
# cells: repeated runs and their summary


def summarize(runs: list[dict]) -> dict[str, Any]:
    """Median wall and CPU, highest peak RSS, load range of a cell's runs (failed runs excluded)."""
    good = [r for r in runs if r.get("rc") == 0 and "killed" not in r and "error" not in r]
    loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
    out: dict[str, Any] = {"runs": len(runs), "ok_runs": len(good), "load_min": min(loads), "load_max": max(loads)}
    if good:
        out.update(
            wall_s=statistics.median(r["wall_s"] for r in good),
            work_s=statistics.median(r["work_s"] for r in good),
            cpu_s=statistics.median(r["cpu_s"] for r in good),
            import_s=statistics.median(r.get("import_s", 0.0) for r in good),
            main_peak_rss_mb=max(r["main_peak_rss_mb"] for r in good),
            worker_peak_rss_mb=max(r["worker_peak_rss_mb"] for r in good),
            peak_memory_mb=max(r["peak_memory_mb"] for r in good),
        )
    failed = [r for r in runs if r not in good]
    if failed:
        out["failure"] = failed[0].get("killed") or (failed[0].get("error") or "")[-600:] or f"rc {failed[0]['rc']}"
    return out


def check(status: str, detail: str = "") -> dict[str, str]:
    """A cell's result check: ``equal`` (or ``same samples`` / ``valid``) or ``DIFFER`` / ``not checked``."""
    return {"status": status, "detail": detail}


def passed(chk: dict | None) -> bool:
    return bool(chk) and chk["status"] in ("equal", "same samples", "valid", "agree")


# ------------------------------------------------------------------------------------------------
# comparing packed Parquet files (seqpack's and Bridge's): in this interpreter, with pyarrow


def read_packs(path: str | Path) -> dict[str, np.ndarray]:
    """A packed Parquet file as flat int64 columns: ``input_ids``, ``loss_mask``, ``row_offsets`` (tokens
    per row, cumulative), ``seq_start_id`` (flat) and ``seq_counts`` (segments per row)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["input_ids", "loss_mask", "seq_start_id"])
    out = {}
    for name in ("input_ids", "loss_mask", "seq_start_id"):
        col = table.column(name).combine_chunks()
        out[name] = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False), dtype=np.int64)
        lengths = np.asarray(pc.list_value_length(col).to_numpy(zero_copy_only=False), dtype=np.int64)
        if name == "input_ids":
            out["row_offsets"] = np.concatenate([[0], np.cumsum(lengths)])
        if name == "seq_start_id":
            out["seq_counts"] = lengths
    return out


def segments(packs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Absolute (start, end) token offsets of every segment of every row."""
    row_of_segment = np.repeat(np.arange(packs["seq_counts"].size), packs["seq_counts"])
    starts = packs["row_offsets"][row_of_segment] + packs["seq_start_id"]
    ends = np.append(starts[1:], packs["row_offsets"][-1])
    last = np.cumsum(packs["seq_counts"]) - 1  # a row's last segment ends at the row's end
    ends[last] = packs["row_offsets"][1:][packs["seq_counts"] > 0]
    return starts, ends


def runtime_lengths(packs: dict[str, np.ndarray]) -> np.ndarray:
    """Runtime length of every packed sample (stored segment length minus one)."""
    starts, ends = segments(packs)
    return ends - starts - 1


def compare_rows(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> str | None:
    """None when both files hold the same rows in the same order, else where they first differ."""
    if ours["row_offsets"].size != theirs["row_offsets"].size:
        return f"{ours['row_offsets'].size - 1} packs (seqpack) vs {theirs['row_offsets'].size - 1} (Bridge)"
    for name in ("row_offsets", "seq_counts", "seq_start_id", "input_ids", "loss_mask"):
        a, b = ours[name], theirs[name]
        if a.shape != b.shape or not np.array_equal(a, b):
            where = int(np.flatnonzero(a[:min(a.size, b.size)] != b[:min(a.size, b.size)])[0]) \
                if a.size and b.size and not np.array_equal(a[:min(a.size, b.size)], b[:min(a.size, b.size)]) else -1
            return f"{name} differs (sizes {a.size} vs {b.size}, first at flat index {where})"
    return None


def segment_multiset(packs: dict[str, np.ndarray]) -> list[bytes]:
    """Sorted digests of every segment's (input_ids, loss_mask): the samples a file holds, in any order."""
    import hashlib

    starts, ends = segments(packs)
    ids, mask = packs["input_ids"], packs["loss_mask"]
    out = [hashlib.blake2b(ids[a:b].tobytes() + b"|" + mask[a:b].tobytes(), digest_size=12).digest()
           for a, b in zip(starts.tolist(), ends.tolist())]
    out.sort()
    return out


# ------------------------------------------------------------------------------------------------
# sections


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path, runner: Runner) -> None:
        self.args, self.tmp, self.runner = args, tmp, runner
        self.cells: dict[str, list[dict]] = {s: [] for s in SECTIONS}
        self.inputs: dict[int, Path] = {}
        self.tokenizers: dict[str, dict] = {}
        self.bridge_packs: dict[tuple, dict] = {}  # (rows, tokenizer, pack) -> Bridge's pack of the first run
        self.notes: list[str] = []
        self.folders = 0
        self.data_info: dict[int, dict] = {}

    # ---- inputs

    def input_for(self, rows: int) -> Path:
        if rows not in self.inputs:
            path = self.tmp / "data" / f"rows{rows}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            info = write_rows(path, rows, seed=self.args.data_seed, median_words=self.args.median_words)
            self.inputs[rows] = path
            self.data_info[rows] = info
            print(f"  input: {rows:,} rows, {info['words']:,} words, {info['bytes'] / 1e6:,.1f} MB", flush=True)
        return self.inputs[rows]

    def setup_tokenizers(self) -> None:
        bundles = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR", ROOT / ".seqpack-cache" / "tokenizers"))
        from seqpack.data.tokenizers import load_tokenizer

        for name in self.args.tokenizers:
            if name == "wordlevel":
                folder = self.tmp / "tokenizers" / "wordlevel"
                res = self.runner.run("bridge", "tokenizer", {"folder": str(folder), "words": list(VOCAB),
                                                              "specials": SPECIALS})
                if res.get("rc") != 0 or "ids" not in res:
                    raise SystemExit(f"could not make the WordLevel tokenizer in the lane: {res.get('error', res)}")
            else:
                folder = bundles / name
                if not (folder / "tokenizer.json").is_file():
                    self.notes.append(f"tokenizer {name!r} skipped: bundle absent from {bundles.name}/ "
                                      "(run scripts/fetch_tokenizers.py)")
                    print(f"  SKIPPED tokenizer {name}: bundle absent", flush=True)
                    continue
            self.tokenizers[name] = {"folder": str(folder), "eos_id": int(load_tokenizer(folder).eos_id)}

    def _alternate(self, rep: int, thunks: list) -> list:
        """Run the side thunks in order on even repeats and in reverse on odd ones; results in order."""
        order = list(range(len(thunks)))
        if rep % 2:
            order.reverse()
        results: dict[int, Any] = {}
        for i in order:
            results[i] = thunks[i]()
        return [results[i] for i in range(len(thunks))]

    # ---- offline preparation

    def offline(self) -> None:
        m = self.args.pad_seq_to_mult
        variants = [("seqpack pack -w1", 1, False), ("seqpack pack -w2", 2, False),
                    ("seqpack --bridge-compat -w1", 1, True), ("seqpack --bridge-compat -w2", 2, True)]
        if self.args.plant_mismatch:
            variants.append(("PLANTED --bridge-compat seed+1", 1, True))
        for rows in self.args.rows:
            data = self.input_for(rows)
            large = rows >= self.args.large_rows
            for tok_name, tok in self.tokenizers.items():
                if large and self.args.large_tokenizers and tok_name not in self.args.large_tokenizers:
                    continue
                for pack in self.args.pack_sizes:
                    key = (rows, tok_name, pack)
                    runs: dict[str, list[dict]] = {name: [] for name, *_ in [(BRIDGE,)] + variants}
                    checks: dict[str, dict] = {}
                    reps = self.args.repeat_large if large else self.args.repeat
                    for rep in range(reps):
                        thunks = []
                        if rep < (self.args.bridge_repeat_large if large else reps):
                            thunks.append(lambda rep=rep: (BRIDGE, self._bridge_prepare(data, tok, pack, m, rep)))
                        for name, workers, compat in variants:
                            thunks.append(lambda name=name, workers=workers, compat=compat, rep=rep:
                                          (name, self._seqpack_pack(data, tok, pack, m, workers, compat, rep,
                                                                    planted=name.startswith("PLANTED"))))
                        for name, res in self._alternate(rep, thunks):
                            runs[name].append(res)
                            print(f"  [{rep + 1}/{reps}] offline {rows:>8,} {tok_name:>9} P{pack}  {name:<30} "
                                  f"{self._brief(res)}", flush=True)
                        if rep == 0:
                            checks = self._offline_checks(key, runs)
                        self._drop_outputs(runs, keep_bridge=rep == 0)
                    for name, cell_runs in runs.items():
                        self.cells["offline"].append({
                            "rows": rows, "tokenizer": tok_name, "pack_size": pack, "impl": name,
                            **summarize(cell_runs), "check": checks.get(name),
                            "packs": cell_runs[0].get("packs") if cell_runs else None,
                            "run_details": cell_runs,
                        })

    def _brief(self, res: dict) -> str:
        if "killed" in res or res.get("rc") != 0 or "error" in res:
            return f"FAILED ({res.get('killed') or 'rc ' + str(res.get('rc'))})"
        return (f"{res['wall_s']:7.1f} s wall, {res['cpu_s']:7.1f} s CPU, {res['peak_memory_mb']:8,.0f} MB, "
                f"load {res['load_before']:.1f}->{res['load_after']:.1f}")

    def _fresh_dir(self, stem: str) -> Path:
        self.folders += 1
        folder = self.tmp / "cells" / f"{stem}-{self.folders:05d}"
        folder.mkdir(parents=True)
        return folder

    def _bridge_prepare(self, data: Path, tok: dict, pack: int, m: int, rep: int) -> dict:
        folder = self._fresh_dir("bridge")
        os.link(data, folder / "data.jsonl")  # a fresh name: Bridge's line index is built, not reused
        case = {"input_path": str(folder / "data.jsonl"), "output_path": str(folder / "training.idx.parquet"),
                "output_metadata_path": str(folder / "metadata.json"), "packed_sequence_size": pack,
                "tokenizer": tok["folder"], "max_seq_length": pack, "seed": SEED,
                "packing_algorithm": "first_fit_shuffle", "pad_seq_to_mult": m,
                "dataset_kwargs": {"prompt_completion_config": PC_CONFIG},
                "num_tokenizer_workers": self.args.bridge_workers}
        res = self.runner.run("bridge", "prepare", {"case": case})
        res["folder"] = str(folder)
        if res.get("answer", {}).get("raises"):
            res["error"] = f"Bridge raised {res['answer']['type']}: {res['answer']['message']}"
        else:
            res["output"], res["metadata_path"] = case["output_path"], case["output_metadata_path"]
        return res

    def _seqpack_pack(self, data: Path, tok: dict, pack: int, m: int, workers: int, compat: bool, rep: int,
                      planted: bool = False) -> dict:
        folder = self._fresh_dir("seqpack")
        os.link(data, folder / "data.jsonl")
        argv = ["pack", str(folder / "data.jsonl"), "--out", str(folder / "out"), "--pack-size", str(pack),
                "--pad-seq-to-mult", str(m), "--tokenizer", tok["folder"], "--prompt-column", "input",
                "--completion-column", "output", "--seed", str(SEED + int(planted)),
                "--metadata-path", str(folder / "metadata.json"), "--workers", str(workers), "--json", "--no-progress"]
        if compat:
            argv += ["--algorithm", "first_fit_shuffle", "--bridge-compat"]
        res = self.runner.run("seqpack", "pack", {"argv": argv})
        res["folder"] = str(folder)
        if res.get("rc") == 0 and res.get("exit_code") == 0:
            res["output"] = res["answer"]["files"]["training"]
            res["metadata_path"] = str(folder / "metadata.json")
        elif res.get("rc") == 0:
            res["error"] = f"seqpack pack exit {res.get('exit_code')}: {res.get('answer')}"
        return res

    def _offline_checks(self, key: tuple, runs: dict[str, list[dict]]) -> dict[str, dict]:
        theirs_run = runs[BRIDGE][0] if runs[BRIDGE] else None
        if theirs_run is None or "output" not in theirs_run:
            return {name: check("not checked", "Bridge produced no packs") for name in runs}
        theirs = read_packs(theirs_run["output"])
        theirs_meta = json.loads(Path(theirs_run["metadata_path"]).read_text())
        self.bridge_packs[key] = {"path": theirs_run["output"], "metadata": theirs_run["metadata_path"],
                                  "lengths": runtime_lengths(theirs), "packs": theirs["row_offsets"].size - 1}
        theirs_run["packs"] = theirs["row_offsets"].size - 1
        out: dict[str, dict] = {BRIDGE: check("reference")}
        multiset = None
        for name, cell_runs in runs.items():
            if name == BRIDGE:
                continue
            res = cell_runs[0]
            if "output" not in res:
                out[name] = check("not checked", res.get("error", "no output")[-300:])
                continue
            ours = read_packs(res["output"])
            res["packs"] = ours["row_offsets"].size - 1
            if "bridge-compat" in name:
                diff = compare_rows(ours, theirs)
                meta = json.loads(Path(res["metadata_path"]).read_text())
                if diff is None and meta != theirs_meta:
                    diff = f"metadata: seqpack {meta} vs Bridge {theirs_meta}"
                out[name] = check("equal", "same rows in the same order, same metadata file") if diff is None \
                    else check("DIFFER", diff)
            else:
                if multiset is None:
                    multiset = segment_multiset(theirs)
                same = segment_multiset(ours) == multiset
                fewer = res["packs"] <= theirs_run["packs"]
                out[name] = check("same samples", f"{res['packs']:,} packs vs Bridge's {theirs_run['packs']:,}") \
                    if same and fewer else check("DIFFER", f"same samples: {same}; packs {res['packs']} vs "
                                                           f"{theirs_run['packs']}")
        return out

    def _drop_outputs(self, runs: dict[str, list[dict]], keep_bridge: bool) -> None:
        """Delete the packs written in this repeat (Bridge's first one is kept for the later sections)."""
        for name, cell_runs in runs.items():
            res = cell_runs[-1] if cell_runs else None
            if not res or "folder" not in res or res.get("_dropped"):
                continue
            if name == BRIDGE and keep_bridge:
                for child in Path(res["folder"]).iterdir():
                    if child.name not in ("training.idx.parquet", "metadata.json"):
                        child.unlink() if child.is_file() else shutil.rmtree(child, ignore_errors=True)
            else:
                shutil.rmtree(res["folder"], ignore_errors=True)
            res["_dropped"] = True

    def _bridge_pack_for(self, rows: int, tok_name: str, pack: int) -> dict | None:
        """Bridge's pack of (rows, tokenizer, pack size): from the offline section, else made now."""
        key = (rows, tok_name, pack)
        if key not in self.bridge_packs:
            res = self._bridge_prepare(self.input_for(rows), self.tokenizers[tok_name], pack,
                                       self.args.pad_seq_to_mult, 0)
            if "output" not in res:
                return None
            packs = read_packs(res["output"])
            self.bridge_packs[key] = {"path": res["output"], "metadata": res["metadata_path"],
                                      "lengths": runtime_lengths(packs), "packs": packs["row_offsets"].size - 1}
        return self.bridge_packs[key]

    # ---- packing stage alone

    def pack_stage(self) -> None:
        variants = [("seqpack bridge_pack_csr", "bridge_compat", 0), ("seqpack pack_lengths BFD", "best_fit_decreasing", 0)]
        if self.args.plant_mismatch:
            variants.append(("PLANTED bridge_pack_csr seed+1", "bridge_compat", 1))
        for rows in self.args.rows:
            for pack in self.args.pack_sizes:
                # the lengths of a Bridge pack the offline section wrote (the real tokenizer's first)
                tok_name = next((t for t in self.tokenizers if (rows, t, pack) in self.bridge_packs),
                                next(iter(self.tokenizers)))
                source = self._bridge_pack_for(rows, tok_name, pack)
                if source is None:
                    self.notes.append(f"pack_stage {rows} P{pack}: no Bridge pack to take lengths from")
                    continue
                lengths_path = self.tmp / "cells" / f"lengths-{rows}-{pack}.npy"
                np.save(lengths_path, source["lengths"])
                large = rows >= self.args.large_rows
                reps = self.args.repeat_large if large else self.args.repeat
                runs: dict[str, list[dict]] = {BRIDGE: [], **{v[0]: [] for v in variants}}
                checks: dict[str, dict] = {}
                for rep in range(reps):
                    thunks = []
                    if rep < (self.args.bridge_repeat_large if large else reps):
                        thunks.append(lambda rep=rep: (BRIDGE, self.runner.run("bridge", "pack_stage", {
                            "lengths": str(lengths_path), "pack_size": pack, "algorithm": "first_fit_shuffle",
                            "seed": SEED, "out": str(self.tmp / "cells" / f"stage-bridge-{rows}-{pack}-{rep}.npz")})))
                    for name, impl, bump in variants:
                        thunks.append(lambda name=name, impl=impl, bump=bump, rep=rep: (name, self.runner.run(
                            "seqpack", "pack_stage", {
                                "lengths": str(lengths_path), "pack_size": pack, "impl": impl,
                                "algorithm": "first_fit_shuffle", "seed": SEED + bump,
                                "out": str(self.tmp / "cells" / f"stage-{impl}{bump}-{rows}-{pack}-{rep}.npz")})))
                    for name, res in self._alternate(rep, thunks):
                        runs[name].append(res)
                        print(f"  [{rep + 1}/{reps}] pack_stage {rows:>8,} P{pack}  {name:<36} "
                              f"{self._stage_brief(res)}", flush=True)
                    if rep == 0:
                        checks = self._stage_checks(rows, pack, lengths_path, runs, variants)
                for name, cell_runs in runs.items():
                    self.cells["pack_stage"].append({
                        "rows": rows, "tokenizer": tok_name, "pack_size": pack, "impl": name,
                        **summarize(cell_runs), "check": checks.get(name),
                        "packs": cell_runs[0].get("packs") if cell_runs else None,
                        "lengths_from": f"Bridge's {tok_name} packs (runtime lengths)", "run_details": cell_runs})

    def _stage_brief(self, res: dict) -> str:
        if "work_s" not in res:
            return f"FAILED ({res.get('killed') or res.get('error', '')[-200:]})"
        return f"{res['work_s']:8.3f} s stage, {res['wall_s']:6.1f} s process, {res['peak_memory_mb']:7,.0f} MB"

    def _stage_checks(self, rows: int, pack: int, lengths_path: Path, runs: dict, variants: list) -> dict:
        def load(name: str, impl: str, bump: int) -> dict | None:
            path = self.tmp / "cells" / (f"stage-bridge-{rows}-{pack}-0.npz" if name == BRIDGE
                                         else f"stage-{impl}{bump}-{rows}-{pack}-0.npz")
            return dict(np.load(path)) if path.is_file() else None

        theirs = load(BRIDGE, "", 0)
        if theirs is None:
            return {name: check("not checked", "Bridge produced no packs") for name in runs}
        theirs_meta = runs[BRIDGE][0].get("metadata")
        lengths = np.load(lengths_path)
        out = {BRIDGE: check("reference")}
        for name, impl, bump in variants:
            ours = load(name, impl, bump)
            if ours is None:
                out[name] = check("not checked", runs[name][0].get("error", "")[-300:])
            elif impl == "bridge_compat":
                same = np.array_equal(ours["samples"], theirs["samples"]) and np.array_equal(ours["counts"], theirs["counts"])
                meta = runs[name][0].get("metadata")
                out[name] = check("equal", "same samples in the same rows in the same order, same metadata") \
                    if same and meta == theirs_meta else check("DIFFER", f"rows equal: {same}; metadata {meta} vs "
                                                                       f"{theirs_meta}")
            else:
                once = np.array_equal(np.sort(ours["samples"]), np.arange(lengths.size))
                bins = np.repeat(np.arange(ours["counts"].size), ours["counts"])
                sums = np.bincount(bins, weights=lengths[ours["samples"]], minlength=ours["counts"].size)
                fits = bool((sums <= pack).all())
                fewer = ours["counts"].size <= theirs["counts"].size
                detail = f"{ours['counts'].size:,} packs vs Bridge's {theirs['counts'].size:,}"
                out[name] = check("valid", detail) if once and fits and fewer else \
                    check("DIFFER", f"every sample once: {once}; fits: {fits}; {detail}")
        return out

    # ---- reading

    def read(self) -> None:
        rows, tok_name = self.args.rows[0], next(iter(self.tokenizers))
        tok, m = self.tokenizers[tok_name], self.args.pad_seq_to_mult
        for pack in self.args.pack_sizes:
            source = self._bridge_pack_for(rows, tok_name, pack)
            if source is None:
                self.notes.append(f"read P{pack}: no Bridge pack to read")
                continue
            bridge_spec = {"case": {"path": source["path"], "tokenizer": tok["folder"], "seq_length": pack,
                                    "packed_sequence_size": pack, "metadata_path": source["metadata"],
                                    "pad_seq_to_mult": m, "seed": SEED, "dataset_kwargs": {}},
                           "limit": self.args.read_limit}
            seqpack_spec = {"path": source["path"], "metadata": source["metadata"], "pack_size": pack,
                            "pad_seq_to_mult": m, "eos_id": tok["eos_id"], "limit": self.args.read_limit}
            variants = [("seqpack collate_bridge", {**seqpack_spec, "form": "bridge"}),
                        ("seqpack collate (canonical)", {**seqpack_spec, "form": "canonical"})]
            if self.args.plant_mismatch:
                variants.append(("PLANTED collate_bridge eos+1", {**seqpack_spec, "form": "bridge",
                                                                  "eos_id": tok["eos_id"] + 1}))
            runs: dict[str, list[dict]] = {BRIDGE: [], **{v[0]: [] for v in variants}}
            for rep in range(self.args.repeat):
                thunks = [lambda: (BRIDGE, self.runner.run("bridge", "read", bridge_spec))]
                thunks += [lambda name=name, spec=spec: (name, self.runner.run("seqpack", "read", spec))
                           for name, spec in variants]
                for name, res in self._alternate(rep, thunks):
                    runs[name].append(res)
                    rate = res["micro_batches"] / res["work_s"] if res.get("work_s") else 0
                    print(f"  [{rep + 1}/{self.args.repeat}] read {rows:>8,} P{pack}  {name:<30} "
                          f"{rate:9,.0f} micro-batches/s" if "work_s" in res else f"FAILED {res.get('error', '')[-300:]}",
                          flush=True)
            theirs = runs[BRIDGE][0]
            checks = {BRIDGE: check("reference")}
            for name, spec in variants:
                ours = runs[name][0]
                if "digests" not in ours or "digests" not in theirs:
                    checks[name] = check("not checked", (ours.get("error") or theirs.get("error") or "")[-300:])
                    continue
                want = theirs["digests"] if spec["form"] == "bridge" else theirs["core_digests"]
                bad = [i for i, (a, b) in enumerate(zip(ours["digests"], want)) if a != b]
                if len(ours["digests"]) != len(want):
                    checks[name] = check("DIFFER", f"{len(ours['digests'])} micro-batches vs Bridge's {len(want)}")
                elif bad:
                    checks[name] = check("DIFFER", f"{len(bad)} of {len(want)} micro-batches differ, first #{bad[0]}")
                else:
                    what = "every key, dtype, shape and value" if spec["form"] == "bridge" else \
                        "tokens, labels, position ids and loss mask"
                    checks[name] = check("equal", f"{len(want):,} micro-batches equal ({what})")
            for name, cell_runs in runs.items():
                for r in cell_runs:
                    r.pop("digests", None)
                    r.pop("core_digests", None)
                cell = {"rows": rows, "tokenizer": tok_name, "pack_size": pack, "impl": name, **summarize(cell_runs),
                        "check": checks.get(name), "run_details": cell_runs}
                good = [r for r in cell_runs if "work_s" in r]
                if good:
                    cell["micro_batches"] = good[0]["micro_batches"]
                    cell["micro_batches_per_s"] = statistics.median(r["micro_batches"] / r["work_s"] for r in good)
                self.cells["read"].append(cell)

    # ---- in-batch THD builder

    def in_batch(self) -> None:
        m = self.args.pad_seq_to_mult
        spec = {"seed": SEED, "rows": self.args.in_batch_rows, "mbs": self.args.mbs, "m": m}
        variants = [("seqpack build_thd_batch", spec)]
        if self.args.plant_mismatch:
            variants.append(("PLANTED build_thd_batch m*2", {**spec, "m": 2 * m}))
        runs: dict[str, list[dict]] = {BRIDGE: [], **{v[0]: [] for v in variants}}
        for rep in range(self.args.repeat):
            thunks = [lambda: (BRIDGE, self.runner.run("bridge", "in_batch", spec))]
            thunks += [lambda name=name, s=s: (name, self.runner.run("seqpack", "in_batch", s)) for name, s in variants]
            for name, res in self._alternate(rep, thunks):
                runs[name].append(res)
                rates = ", ".join(f"MBS {k}: {v['micro_batches'] / v['work_s']:,.0f}/s"
                                  for k, v in res.get("by_mbs", {}).items())
                print(f"  [{rep + 1}/{self.args.repeat}] in_batch  {name:<28} {rates or 'FAILED'}", flush=True)
        theirs = runs[BRIDGE][0].get("by_mbs")
        for mbs in self.args.mbs:
            key = str(mbs)
            for name, cell_runs in runs.items():
                good = [r for r in cell_runs if "by_mbs" in r]
                chk = check("reference") if name == BRIDGE else check("not checked", "a side failed")
                if name != BRIDGE and good and theirs:
                    a, b = good[0]["by_mbs"][key]["digests"], theirs[key]["digests"]
                    bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
                    chk = check("equal", f"{len(a):,} micro-batches equal") if len(a) == len(b) and not bad else \
                        check("DIFFER", f"{len(bad)} of {len(b)} micro-batches differ" + (f", first #{bad[0]}" if bad else ""))
                cell = {"mbs": mbs, "impl": name, "check": chk, **summarize(cell_runs)}
                if good:
                    cell["micro_batches"] = good[0]["by_mbs"][key]["micro_batches"]
                    cell["micro_batches_per_s"] = statistics.median(
                        r["by_mbs"][key]["micro_batches"] / r["by_mbs"][key]["work_s"] for r in good)
                    cell["work_s"] = statistics.median(r["by_mbs"][key]["work_s"] for r in good)
                self.cells["in_batch"].append(cell)
        for cell_runs in runs.values():
            for r in cell_runs:
                for v in r.get("by_mbs", {}).values():
                    v.pop("digests", None)
        self.cells["in_batch_runs"] = {name: cell_runs for name, cell_runs in runs.items()}

    # ---- validation

    def validate(self) -> None:
        from seqpack.config import RULES
        from seqpack.config.load import load_config
        from seqpack_lane.bridge_config import bridge_spec
        from seqpack_lane.differences import LATER_FAILURES
        from seqpack.core.versions import BRIDGE_RELEASE

        overrides, cases = [], []
        for rule in RULES:
            for which, values in (("trigger", dict(rule.trigger)), ("fixed", {**rule.trigger, **rule.fixed})):
                cfg = load_config(None, list(values.items()))
                spec = bridge_spec(cfg, str(self.tmp / "validate" / f"{len(cases)}"))
                if spec.needs_vlm_provider:
                    continue  # a vision-language provider field: the GPT provider cannot express it
                overrides.append([[k, v] for k, v in values.items()])
                cases.append({"id": f"{rule.id} {which}", "spec": spec.spec})
        seqpack_spec = {"overrides": overrides, "bridge_version": BRIDGE_RELEASE}
        variants = [("seqpack validate_config", seqpack_spec)]
        if self.args.plant_mismatch:
            variants.append(("PLANTED validate_config, no rules", {**seqpack_spec, "no_rules": True}))
        runs: dict[str, list[dict]] = {BRIDGE: [], **{v[0]: [] for v in variants}}
        for rep in range(self.args.repeat):
            thunks = [lambda: (BRIDGE, self.runner.run("bridge", "validate", {"cases": cases}))]
            thunks += [lambda name=name, s=s: (name, self.runner.run("seqpack", "validate", s)) for name, s in variants]
            for name, res in self._alternate(rep, thunks):
                runs[name].append(res)
                per = statistics.median(res["per_config_s"]) * 1000 if "per_config_s" in res else float("nan")
                print(f"  [{rep + 1}/{self.args.repeat}] validate {len(cases)} configs  {name:<34} {per:8.3f} ms "
                      f"per config, import {res.get('import_s', float('nan')):.2f} s", flush=True)
        theirs = runs[BRIDGE][0].get("answers")
        for name, cell_runs in runs.items():
            chk = check("reference")
            if name != BRIDGE:
                ours = cell_runs[0].get("errors")
                if ours is None or theirs is None:
                    chk = check("not checked", "a side failed")
                else:
                    agree = by_design = 0
                    differ = []
                    for case, answer, errors in zip(cases, theirs, ours):
                        if answer["raises"] == bool(errors):
                            agree += 1
                        elif errors and all(e in LATER_FAILURES for e in errors):
                            by_design += 1
                        else:
                            differ.append(f"{case['id']}: Bridge {'raises ' + answer['type'] if answer['raises'] else 'accepts'}"
                                          f", seqpack errors {errors}")
                    detail = f"{agree} same verdict, {by_design} refused by seqpack for a later upstream failure"
                    chk = check("agree", detail) if not differ else \
                        check("DIFFER", f"{len(differ)} verdicts differ (first: {differ[0]}); {detail}")
            good = [r for r in cell_runs if "per_config_s" in r]
            cell = {"impl": name, "configs": len(cases), "check": chk, **summarize(cell_runs), "run_details": cell_runs}
            if good:
                cell["per_config_ms"] = statistics.median(statistics.median(r["per_config_s"]) for r in good) * 1000
                cell["all_configs_s"] = statistics.median(r["work_s"] for r in good)
            for r in cell_runs:
                r.pop("per_config_s", None)
                r.pop("answers", None)
                r.pop("errors", None)
            self.cells["validate"].append(cell)


# ------------------------------------------------------------------------------------------------
# tables and targets


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} MB"


def _s(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f} s"


def _ratio(ours: dict, theirs: dict | None, key: str, invert: bool = False) -> float | None:
    if not theirs or not passed(ours.get("check")) or ours.get(key) is None or theirs.get(key) is None:
        return None
    return (ours[key] / theirs[key]) if invert else (theirs[key] / ours[key])


def _status(cell: dict) -> str:
    chk = cell.get("check") or {}
    if cell.get("failure") and not cell.get("ok_runs"):
        return f"FAILED: {cell['failure'][:60]}"
    return chk.get("status", "-")


def tables(cells: dict[str, list[dict]]) -> tuple[str, list[dict]]:
    """The printed tables, and each timed comparison (speed-up and memory ratio) for the targets."""
    text, compared = [], []

    def bridge_of(section: str, cell: dict, keys: tuple) -> dict | None:
        for other in cells[section]:
            if other["impl"] == BRIDGE and all(other.get(k) == cell.get(k) for k in keys):
                return other
        return None

    if cells["offline"]:
        rows = []
        for cell in cells["offline"]:
            theirs = bridge_of("offline", cell, ("rows", "tokenizer", "pack_size"))
            speed = None if cell["impl"] == BRIDGE else _ratio(cell, theirs, "wall_s")
            mem = None if cell["impl"] == BRIDGE else _ratio(cell, theirs, "peak_memory_mb", invert=True)
            if cell["impl"] != BRIDGE:
                compared.append({"section": "offline", "rows": cell["rows"], "tokenizer": cell["tokenizer"],
                                 "pack_size": cell["pack_size"], "impl": cell["impl"], "speedup": speed,
                                 "rss_ratio": mem, "check": _status(cell)})
            rows.append([f"{cell['rows']:,}", cell["tokenizer"], cell["pack_size"], cell["impl"],
                         _s(cell.get("wall_s")), _s(cell.get("cpu_s")), _mb(cell.get("main_peak_rss_mb")),
                         _mb(cell.get("worker_peak_rss_mb")), _mb(cell.get("peak_memory_mb")),
                         "-" if speed is None else f"{speed:.1f}x", "-" if mem is None else f"{mem:.3f}",
                         f"{cell['ok_runs']}/{cell['runs']}", f"{cell['load_min']:.1f}-{cell['load_max']:.1f}",
                         _status(cell)])
        text.append("offline preparation (process wall and CPU incl. workers: median; peak RSS of the main process "
                    "and of its largest worker; peak memory: the tree's summed PSS, sampled):\n" +
                    text_table(["rows", "tokenizer", "pack", "impl", "wall", "CPU", "main RSS", "worker RSS",
                                "peak memory", "speed-up", "memory / Bridge", "runs", "load", "check"], rows))
    if cells["pack_stage"]:
        rows = []
        for cell in cells["pack_stage"]:
            theirs = bridge_of("pack_stage", cell, ("rows", "pack_size"))
            speed = None if cell["impl"] == BRIDGE else _ratio(cell, theirs, "work_s")
            if cell["impl"] != BRIDGE:
                compared.append({"section": "pack_stage", "rows": cell["rows"], "pack_size": cell["pack_size"],
                                 "impl": cell["impl"], "speedup": speed, "check": _status(cell)})
            rows.append([f"{cell['rows']:,}", cell["pack_size"], cell["impl"], _s(cell.get("work_s"), 3),
                         _s(cell.get("wall_s")), _mb(cell.get("peak_memory_mb")), cell.get("packs") or "-",
                         "-" if speed is None else f"{speed:,.0f}x", _status(cell)])
        text.append("packing stage alone (stage time, median; lengths: Bridge's packs of the offline section):\n" +
                    text_table(["rows", "pack", "impl", "stage", "process", "peak memory", "packs", "speed-up", "check"],
                               rows))
    if cells["read"]:
        rows = []
        for cell in cells["read"]:
            theirs = bridge_of("read", cell, ("rows", "pack_size"))
            speed = None
            if cell["impl"] != BRIDGE:
                if passed(cell.get("check")) and theirs and "micro_batches_per_s" in cell:
                    speed = cell["micro_batches_per_s"] / theirs["micro_batches_per_s"]
                compared.append({"section": "read", "pack_size": cell["pack_size"], "impl": cell["impl"],
                                 "speedup": speed, "check": _status(cell)})
            rows.append([f"{cell['rows']:,}", cell["pack_size"], cell["impl"], cell.get("micro_batches", "-"),
                         "-" if "micro_batches_per_s" not in cell else f"{cell['micro_batches_per_s']:,.0f}",
                         _s(cell.get("import_s"), 2), _mb(cell.get("peak_memory_mb")),
                         "-" if speed is None else f"{speed:.1f}x", _status(cell)])
        text.append("reading packs (micro-batch size 1, one row each; median micro-batches per second):\n" +
                    text_table(["rows", "pack", "impl", "micro-batches", "per s", "import", "peak memory", "speed-up",
                                "check"], rows))
    if cells["in_batch"]:
        rows = []
        for cell in cells["in_batch"]:
            theirs = bridge_of("in_batch", cell, ("mbs",))
            speed = None
            if cell["impl"] != BRIDGE and passed(cell.get("check")) and theirs and "micro_batches_per_s" in cell:
                speed = cell["micro_batches_per_s"] / theirs["micro_batches_per_s"]
            if cell["impl"] != BRIDGE:
                compared.append({"section": "in_batch", "mbs": cell["mbs"], "impl": cell["impl"], "speedup": speed,
                                 "check": _status(cell)})
            rows.append([cell["mbs"], cell["impl"], cell.get("micro_batches", "-"),
                         "-" if "micro_batches_per_s" not in cell else f"{cell['micro_batches_per_s']:,.0f}",
                         "-" if speed is None else f"{speed:.1f}x", _status(cell)])
        text.append("in-batch THD builder (rows of a heavy-tailed length mix; median micro-batches per second):\n" +
                    text_table(["MBS", "impl", "micro-batches", "per s", "speed-up", "check"], rows))
    if cells["validate"]:
        rows = []
        theirs = next((c for c in cells["validate"] if c["impl"] == BRIDGE), None)
        for cell in cells["validate"]:
            speed = None
            if cell["impl"] != BRIDGE and passed(cell.get("check")) and theirs and "per_config_ms" in cell:
                speed = theirs["per_config_ms"] / cell["per_config_ms"]
            if cell["impl"] != BRIDGE:
                compared.append({"section": "validate", "impl": cell["impl"], "speedup": speed, "check": _status(cell)})
            rows.append([cell["impl"], cell["configs"],
                         "-" if "per_config_ms" not in cell else f"{cell['per_config_ms']:.3f} ms",
                         _s(cell.get("import_s"), 2), _s(cell.get("wall_s")),
                         "-" if speed is None else f"{speed:,.0f}x", (cell.get("check") or {}).get("status", "-"),
                         ((cell.get("check") or {}).get("detail") or "")[:80]])
        text.append("validation (median per config; import of the validating modules apart; process wall):\n" +
                    text_table(["impl", "configs", "per config", "import", "process", "speed-up", "check", "detail"],
                               rows))
    return "\n\n".join(text), compared


def targets(compared: list[dict], large_rows: int) -> list[dict]:
    """The issue's targets, against the timed comparisons (planted cells never count)."""
    real = [c for c in compared if not c["impl"].startswith("PLANTED")]
    out = []

    def add(name: str, cells: list[dict], ok) -> None:
        if not cells:
            out.append({"target": name, "met": None, "detail": "not measured in this run"})
            return
        missing = [c for c in cells if c.get("speedup") is None]
        met = not missing and all(ok(c) for c in cells)
        worst = [f"{c['impl']}"
                 + "".join(f" {k}={c[k]}" for k in ("rows", "tokenizer", "pack_size", "mbs") if k in c)
                 + (f": {c['speedup']:.1f}x" if c.get("speedup") is not None else f": {c['check']}")
                 + (f", RSS {c['rss_ratio']:.2f}" if c.get("rss_ratio") is not None else "")
                 for c in cells if c in missing or not ok(c)]
        out.append({"target": name, "met": met, "detail": "; ".join(worst) if worst else "every cell"})

    offline = [c for c in real if c["section"] == "offline" and c["rows"] >= large_rows]
    add(f"offline preparation at >= {large_rows:,} samples: >= 10x faster wall, <= 1/5 peak RSS", offline,
        lambda c: c["speedup"] >= 10 and c["rss_ratio"] is not None and c["rss_ratio"] <= 0.2)
    add("packing stage alone: >= 50x", [c for c in real if c["section"] == "pack_stage"],
        lambda c: c["speedup"] >= 50)
    add("reader: at least as fast as Bridge's", [c for c in real if c["section"] == "read"],
        lambda c: c["speedup"] >= 1)
    add("in-batch builder: at least as fast as Bridge's", [c for c in real if c["section"] == "in_batch"],
        lambda c: c["speedup"] >= 1)
    return out


# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="first row count only, one pack size, one repeat")
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--pack-sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--tokenizers", nargs="+", default=["qwen3", "wordlevel"])
    parser.add_argument("--pad-seq-to-mult", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large-rows", type=int, default=1_000_000,
                        help="row counts from here on are 'large': --repeat-large repeats, Bridge --bridge-repeat-large")
    parser.add_argument("--repeat-large", type=int, default=1, help="repeats of the large offline cells")
    parser.add_argument("--bridge-repeat-large", type=int, default=1, help="of which Bridge runs this many")
    parser.add_argument("--large-tokenizers", nargs="*", default=["qwen3"],
                        help="tokenizers of the large offline cells (none given: all)")
    parser.add_argument("--bridge-workers", type=int, default=1,
                        help="Bridge's num_tokenizer_workers (its default, -1, is serial like 1)")
    parser.add_argument("--median-words", type=float, default=16.0,
                        help="median words per row of the input (16: about 60 Qwen3 tokens a row on average, so "
                             "that Bridge's 1M-row cell fits in the memory of a 24 GB machine)")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--read-limit", type=int, default=0, help="micro-batches read per cell (0: every row)")
    parser.add_argument("--in-batch-rows", type=int, default=4096)
    parser.add_argument("--mbs", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--max-rss-gb", type=float, default=14.0, help="kill a cell whose process tree passes this")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="kill a cell running longer (seconds)")
    parser.add_argument("--plant-mismatch", action="store_true",
                        help="add one planted seqpack cell per section whose results must be reported as differing")
    parser.add_argument("--tmp", default=None, help="scratch directory (default: the system temp dir)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "vs_bridge.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.pack_sizes, args.repeat = args.rows[:1], args.pack_sizes[:1], 1

    from seqpack_lane import build

    lane = build.status()
    if not lane.ready:
        print(f"bench_vs_bridge: the upstream lane is not usable: {lane.reason}", file=sys.stderr)
        return 2
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="seqpack-vs-bridge-", dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        bench = Bench(args, tmp, Runner(tmp, lane.python, args))
        bench.setup_tokenizers()
        if not bench.tokenizers:
            print("bench_vs_bridge: no tokenizer available", file=sys.stderr)
            return 2
        for section in SECTIONS:
            if section in args.sections:
                print(f"{section}:", flush=True)
                getattr(bench, section)()
                # what is measured so far survives a later failure (the large cells take an hour)
                write_report(Path(args.out), args, bench, started, load_start, os.getloadavg(), partial=True)
    load_end = os.getloadavg()
    text, compared, goals = write_report(Path(args.out), args, bench, started, load_start, load_end, partial=False)
    print()
    print(f"seqpack vs megatron-bridge 0.6.2 (megatron-core 0.19.2), {os.cpu_count()} CPUs; load average "
          f"{load_start[0]:.1f} at start, {load_end[0]:.1f} at the end (1-minute)")
    print(text)
    print("\ntargets:")
    for goal in goals:
        verdict = {True: "MET", False: "MISSED", None: "not measured"}[goal["met"]]
        print(f"  {verdict:>12}  {goal['target']}  ({goal['detail']})")
    for note in bench.notes:
        print(f"  note: {note}")
    out = Path(args.out)
    print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


def write_report(out: Path, args: argparse.Namespace, bench: Any, started: str, load_start: tuple, load_end: tuple,
                 *, partial: bool) -> tuple[str, list[dict], list[dict]]:
    """Write the JSON report of the cells measured so far (``partial``: a later section may still fail)
    and return the tables, the timed comparisons and the targets."""
    cells = {k: v for k, v in bench.cells.items() if k != "in_batch_runs"}
    text, compared = tables(cells)
    goals = targets(compared, args.large_rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({
        "args": vars(args), "started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "partial": partial, "cpus": os.cpu_count(), "load_start": load_start, "load_end": load_end,
        "versions": {"megatron-bridge": "0.6.2", "megatron-core": "0.19.2"},
        "inputs": {str(k): v for k, v in bench.data_info.items()}, "tokenizers": bench.tokenizers,
        "sections": cells, "in_batch_runs": bench.cells.get("in_batch_runs", {}), "compared": compared,
        "targets": goals, "notes": bench.notes,
    }, indent=1, default=str))
    os.replace(tmp, out)
    return text, compared, goals


if __name__ == "__main__":
    sys.exit(main())

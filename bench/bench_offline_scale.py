"""Benchmark: offline packing at scale, peak RSS against rows and tokens, rows/s and tokens/s per worker count.

Usage: python bench/bench_offline_scale.py [--rows 10000 100000 1000000] [--workers 1 2] [--repeat 2]
           [--long-rows 100000] [--baseline-ref main] [--baseline-max-rows 200000]

Inputs cycle the bundled prompt/completion demo rows (about 590 byte-tokenizer tokens per row, each
row with a unique prefix); ``--long-rows N`` adds an input of N rows whose completions are five
times longer, so the peak RSS can be compared at the same row count and about 3x the tokens.
Every cell runs `prepare_packed_dataset` (pack size 8192, pad_seq_to_mult 8, byte tokenizer) in a
fresh child process and records its wall time, the peak RSS of the main process (ru_maxrss) and
of its worker processes, its CPU time (main and workers), and the load average around it. With ``--baseline-ref``, the same cells
run the package as it is at that git revision (exported with `git archive`), taking turns with
the working tree in each repeat; the baseline holds all tokens in memory, so it runs only up to
``--baseline-max-rows``. Best wall time and highest peak RSS over the repeats are reported.

Each repeat also times a control: a perfectly parallel pure-CPU job in one process and in two. On
a shared machine with ``sched_autogroup`` (one CPU share per session, whatever the number of its
processes) its speedup is the ceiling any second worker can reach at that moment; compare the
packing speedup with it.

From the cells of the working tree it fits the peak RSS against rows (short rows) and against
tokens (short vs long rows at the same row count): the first slope is what memory costs per
sample, the second what it costs per token (it must be near zero). Writes
bench/results/offline_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqpack.core.textfmt import text_table  # noqa: E402

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from seqpack.packing.offline.prepare import prepare_packed_dataset
t0 = time.perf_counter()
res = prepare_packed_dataset(sys.argv[2], sys.argv[3], pack_size=int(sys.argv[4]), pad_seq_to_mult=int(sys.argv[5]),
                             num_workers=int(sys.argv[6]))
wall = time.perf_counter() - t0
info = res.manifest["splits"]["training"]
print(json.dumps({
    "wall_s": wall, "rows": info["accounting"]["rows_in"], "tokens": info["real_tokens"], "packs": info["packs"],
    "main_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    "output_mb": os.path.getsize(res.files["training"]) / 1e6,
    "main_cpu_s": sum(getattr(resource.getrusage(resource.RUSAGE_SELF), f) for f in ("ru_utime", "ru_stime")),
    "cpu_s": sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                 for f in ("ru_utime", "ru_stime")),
}))
"""


CONTROL = r"""
import json, multiprocessing as mp, sys, time
def unit(n):
    return sum(i * i for i in range(n))
n, workers = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
if workers == 1:
    [unit(n) for _ in range(2)]
else:
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(unit, [n, n])
print(json.dumps({"wall_s": time.perf_counter() - t0}))
"""


def run_control(workers: int, n: int) -> dict:
    """A perfectly parallel pure-CPU job (two equal units) in one process or two: the speedup the
    machine allows a second process at this moment (on a busy machine with ``sched_autogroup``, a
    session's processes share one slice of the CPU, so this ceiling can be far below 2)."""
    load_before = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", CONTROL, str(n), str(workers)], capture_output=True, text=True,
                          check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**result, "load_before": load_before, "load_after": os.getloadavg()[0]}


def build_input(path: Path, rows: int, stretch: int = 1) -> int:
    """Cycle the demo prompt/completion rows into ``rows`` lines; ``stretch`` repeats each completion."""
    from seqpack.data import demo_path

    demo = [json.loads(line) for line in demo_path("prompt_completion").read_text().splitlines()]
    size = 0
    with open(path, "w") as fh:
        for i in range(rows):
            row = dict(demo[i % len(demo)])
            row["prompt"] = f"[{i}] {row['prompt']}"
            row["completion"] = " ".join([row["completion"]] * stretch)
            line = json.dumps(row) + "\n"
            size += len(line)
            fh.write(line)
    return size


def export_revision(ref: str, target: Path) -> Path:
    """The package at git revision ``ref``, exported into ``target`` (returned as an import root)."""
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "reference_impl"], capture_output=True,
                             check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / "reference_impl"


def run_cell(code_root: Path, data: Path, out: Path, args: argparse.Namespace, workers: int) -> dict:
    load_before = os.getloadavg()[0]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(code_root), str(data), str(out), str(args.pack_size),
         str(args.pad_seq_to_mult), str(workers)],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        raise SystemExit(f"cell failed ({code_root}, {data.name}, workers={workers}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load_before"] = load_before
    result["load_after"] = os.getloadavg()[0]
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return result


def fit(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--long-rows", type=int, default=100_000, help="rows of the long-row input (0: none)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--pack-size", type=int, default=8192)
    parser.add_argument("--pad-seq-to-mult", type=int, default=8)
    parser.add_argument("--baseline-ref", default=None, help="git revision to compare against (e.g. main)")
    parser.add_argument("--baseline-dir", default=None,
                        help="or: a directory holding the baseline's seqpack (named by --baseline-ref)")
    parser.add_argument("--baseline-max-rows", type=int, default=200_000)
    parser.add_argument("--tmp", default=None, help="scratch directory (default: the system temp dir)")
    parser.add_argument("--control", type=int, default=20_000_000,
                        help="iterations of one unit of the parallel control job (0: no control)")
    args = parser.parse_args()

    cells: dict[tuple, dict] = {}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        impls = {"current": ROOT}
        if args.baseline_dir:
            impls[f"baseline:{args.baseline_ref or args.baseline_dir}"] = Path(args.baseline_dir).resolve()
        elif args.baseline_ref:
            impls[f"baseline:{args.baseline_ref}"] = export_revision(args.baseline_ref, tmp / "baseline")
        inputs = []
        for rows in args.rows:
            inputs.append(("short", rows, tmp / f"short_{rows}.jsonl", 1))
        if args.long_rows:
            inputs.append(("long", args.long_rows, tmp / f"long_{args.long_rows}.jsonl", 5))
        sizes = {}
        for kind, rows, path, stretch in inputs:
            sizes[(kind, rows)] = build_input(path, rows, stretch)
        control: dict[int, list[dict]] = {}
        for rep in range(args.repeat):
            if args.control and 1 in args.workers and 2 in args.workers:
                for workers in (1, 2):
                    control.setdefault(workers, []).append(run_control(workers, args.control))
                print(f"  [{rep + 1}/{args.repeat}] control (perfectly parallel CPU job): 1 process "
                      f"{control[1][-1]['wall_s']:.1f} s, 2 processes {control[2][-1]['wall_s']:.1f} s", flush=True)
            for kind, rows, path, _ in inputs:
                for workers in args.workers:
                    for name, code_root in impls.items():
                        if name != "current" and rows > args.baseline_max_rows:
                            continue
                        res = run_cell(code_root, path, tmp / "out", args, workers)
                        key = (name, kind, rows, workers)
                        cell = cells.setdefault(key, {"runs": []})
                        cell["runs"].append(res)
                        print(f"  [{rep + 1}/{args.repeat}] {name:>14} {kind:>5} {rows:>8} rows w={workers}: "
                              f"{res['wall_s']:.1f} s, main {res['main_peak_rss_mb']:.0f} MB, "
                              f"load {res['load_before']:.1f}->{res['load_after']:.1f}", flush=True)

    table, results = [], []
    for (name, kind, rows, workers), cell in cells.items():
        runs = cell["runs"]
        best = min(runs, key=lambda r: r["wall_s"])
        peak = max(r["main_peak_rss_mb"] for r in runs)
        wpeak = max(r["worker_peak_rss_mb"] for r in runs)
        loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
        entry = {
            "impl": name, "input": kind, "rows": rows, "tokens": best["tokens"], "workers": workers,
            "wall_s": best["wall_s"], "rows_per_s": rows / best["wall_s"],
            "tokens_per_s": best["tokens"] / best["wall_s"],
            "main_peak_rss_mb": peak, "worker_peak_rss_mb": wpeak, "output_mb": best["output_mb"],
            "cpu_s": best["cpu_s"], "main_cpu_s": best["main_cpu_s"],
            "load_min": min(loads), "load_max": max(loads), "runs": runs,
        }
        results.append(entry)
        table.append([name, kind, f"{rows:,}", f"{best['tokens'] / 1e6:.1f} M", workers, f"{best['wall_s']:.1f} s",
                      f"{entry['rows_per_s']:,.0f}", f"{entry['tokens_per_s'] / 1e6:.2f} M", f"{peak:,.0f} MB",
                      f"{wpeak:,.0f} MB", f"{best['cpu_s']:.1f} / {best['main_cpu_s']:.1f} s", f"{min(loads):.1f}-{max(loads):.1f}"])
    print(f"\npack_size={args.pack_size}, pad_seq_to_mult={args.pad_seq_to_mult}, byte tokenizer, best of {args.repeat}"
          f" (wall) / highest (RSS), {os.cpu_count()} CPUs")
    print(text_table(["impl", "input", "rows", "tokens", "workers", "wall", "rows/s", "tokens/s", "main peak RSS",
                      "worker peak RSS", "CPU all / main", "load"], table))

    summary = {}
    by_key = {(r["impl"], r["input"], r["rows"], r["workers"]): r for r in results}
    for name in {r["impl"] for r in results}:
        for workers in args.workers:
            short = sorted((r for r in results if (r["impl"], r["input"], r["workers"]) == (name, "short", workers)),
                           key=lambda r: r["rows"])
            s = {}
            if len(short) >= 2:
                s["rss_mb_per_1k_rows"] = fit([r["rows"] for r in short], [r["main_peak_rss_mb"] for r in short]) * 1000
                s["rss_bytes_per_token_across_rows"] = fit([r["tokens"] for r in short],
                                                           [r["main_peak_rss_mb"] * 2**20 for r in short])
            long = by_key.get((name, "long", args.long_rows, workers))
            same = by_key.get((name, "short", args.long_rows, workers))
            if long and same:
                s["rss_bytes_per_extra_token_same_rows"] = (
                    (long["main_peak_rss_mb"] - same["main_peak_rss_mb"]) * 2**20 / (long["tokens"] - same["tokens"]))
            summary[f"{name} workers={workers}"] = s
        for rows in args.rows:
            one, two = by_key.get((name, "short", rows, 1)), by_key.get((name, "short", rows, 2))
            if one and two:
                summary.setdefault(f"{name} speedup 2 vs 1 workers", {})[rows] = one["wall_s"] / two["wall_s"]
    if args.control and 1 in args.workers and 2 in args.workers:
        pairs = [a["wall_s"] / b["wall_s"] for a, b in zip(control[1], control[2])]
        best = min(r["wall_s"] for r in control[1]) / min(r["wall_s"] for r in control[2])
        summary["control: 2 vs 1 processes on a perfectly parallel job"] = {
            "mean_of_repeats": sum(pairs) / len(pairs), "best_vs_best": best}
    print("\nslopes and speedups:")
    for key, value in summary.items():
        print(f"  {key}: " + ", ".join(f"{k}={v:.3g}" for k, v in value.items()))
    out = ROOT / "bench" / "results" / "offline_scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "cells": results, "control": control,
                               "summary": {k: {str(kk): vv for kk, vv in v.items()} for k, v in summary.items()},
                               "cpus": os.cpu_count(), "finished": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Benchmark: ``seqpack pack`` end to end against the tokenizer's own batch encode of the same rows.

Usage: python bench/bench_throughput.py [--rows 100000] [--workers 1 2] [--repeat 3] [--family qwen3]
           [--median-words 16] [--pack-size 4096] [--profile]

The physical limit of offline packing on a given number of cores is the tokenizer's own batch
throughput. On the same rows (``gen_sft_jsonl.py``: prompt/completion, median 16 words, heavy-tailed)
and the same real tokenizer bundle, for each worker count it times, each in a fresh process and taking
turns in every repeat:

* (a) ``encode``: the tokenizer alone (``tokenizers.Tokenizer.encode_batch_fast`` on exactly the texts
  seqpack encodes, the prompt and the separator + completion of each row, 1,024 rows per call, the ids
  of every encoding pulled out), with the texts already in memory and the tokenizer already loaded, so
  only the encoding is timed; with W workers, W forked processes each encode a contiguous share;
* (b) ``pack``: ``seqpack pack ROWS.jsonl --workers W`` as a command, interpreter start to exit
  (imports, tokenizer loading, reading and parsing the JSONL, tokenizing, spilling, bin packing,
  filling and writing the Parquet, the manifest).

Every process encodes single-threaded (``TOKENIZERS_PARALLELISM=false``), so worker counts compare like
with like. Reported: the median wall time of each, (b)/(a), rows/s, the CPU time and the peak RSS of
(b) (its process tree, ``wait4``). ``--profile`` adds a cProfile of (b) with one worker, its time by
stage (encode, JSON rows, per-row Python, spill, fill and Parquet write, tokenizer load, imports,
other): what bounds (b)/(a). Writes ``bench/results/throughput.json``. Target (issue 33): (b)/(a) <=
1.5 with one worker at 100k rows.
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
sys.path.insert(0, str(HERE))

ENV = {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
ROWS_PER_CALL = 1024
SEPARATOR = " "  # PromptCompletionSchema's default separator (Qwen3 is space-sensitive, so it is kept)


def _run_child(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd``: wall time, CPU and peak RSS of its process tree (``wait4``), stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env}, cwd=ROOT)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd[:4]))} ... failed ({proc.returncode}): {err.decode()[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
            "stdout": out.decode()}


def encode_side(rows: str, family_dir: str, workers: int) -> None:
    """(a): the tokenizer alone on the texts seqpack encodes (runs in its own process; prints JSON)."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(Path(family_dir) / "tokenizer.json"))
    texts: list[str] = []
    with open(rows, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                texts += [row["input"], SEPARATOR + row["output"]]
    n = len(texts) // 2
    calls = [(a, min(n, a + ROWS_PER_CALL)) for a in range(0, n, ROWS_PER_CALL)]

    def encode(share: list[tuple[int, int]]) -> int:
        tokens = 0
        for a, b in share:
            encs = tok.encode_batch_fast([t for t in texts[2 * a: 2 * b] if t], add_special_tokens=False)
            tokens += sum(len(e.ids) for e in encs)
        return tokens

    t0 = time.perf_counter()
    if workers <= 1:
        tokens = encode(calls)
    else:
        pids, per = [], -(-len(calls) // workers)
        for w in range(workers):
            pid = os.fork()
            if pid == 0:
                encode(calls[w * per: (w + 1) * per])
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        tokens = -1  # counted by the one-worker run
    print(json.dumps({"encode_s": time.perf_counter() - t0, "rows": n, "tokens": tokens}))


def _pack_cmd(rows: Path, out: Path, family_dir: Path, workers: int, pack: int) -> list[str]:
    return [sys.executable, "-m", "seqpack", "pack", str(rows), "--out", str(out), "--pack-size", str(pack),
            "--pad-seq-to-mult", "8", "--tokenizer", str(family_dir), "--prompt-column", "input",
            "--completion-column", "output", "--workers", str(workers), "--no-progress", "--json"]


STAGES = (  # (stage, substrings of "file:function" that charge a profile entry to it), first match wins
    ("encode", ("encode_batch_fast", "tokenizers.py:_encodings")),
    ("ids out of encodings", ("tokenizers.py:encode_batch_flat",)),
    ("JSON rows", ("jsonl.py:rows", "jsontext.py", "orjson", "json/decoder")),
    ("per-row Python", ("tokenize.py:", "schemas.py:")),
    ("spill", ("spill.py:append", "jobs.py:tokenize_job")),
    ("fill and Parquet write", ("fill.py:", "parquet", "parquet_concat.py", "spill.py:read")),
    ("bins", ("algorithms.py", "fit.py", "bins.py")),
    ("tokenizer load", ("from_str", "from_file", "tokenizers.py:load_tokenizer", "tokenizers.py:__init__")),
    ("hashing", ("sha256", "blake2b", "sources.py:file_sha256", "ownership.py:record_files")),
    ("imports", ("<frozen importlib", "exec_module", "_find_and_load")),
)


def profile_pack(rows: Path, family_dir: Path, pack: int, tmp: Path) -> dict[str, float]:
    """cProfile of (b) with one worker: exclusive time per stage (``STAGES``)."""
    import pstats

    prof = tmp / "pack.prof"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "seqpack", *_pack_cmd(
        rows, tmp / "prof_out", family_dir, 1, pack)[3:]]
    _run_child(cmd, ENV)
    stats = pstats.Stats(str(prof)).stats  # {(file, line, fn): (cc, nc, tt, ct, callers)}
    total = max(ct for (_, _, _, ct, _) in stats.values())
    # charge each function's own time to the first stage on its call path that matches (callers walked up)
    out: dict[str, float] = {name: 0.0 for name, _ in STAGES}
    out["other"] = 0.0

    def stage_of(key: tuple, depth: int = 0, seen: frozenset = frozenset()) -> str | None:
        label = f"{Path(key[0]).name}:{key[2]}" if key[0] != "~" else key[2]
        for name, needles in STAGES:
            if any(n in label or n in key[0] for n in needles):
                return name
        if depth > 40 or key in seen:
            return None
        callers = stats.get(key, (0, 0, 0, 0, {}))[4]
        best = max(callers, key=lambda c: callers[c][3], default=None)  # the caller that spent most through it
        return stage_of(best, depth + 1, seen | {key}) if best is not None else None

    for key, (_, _, tt, _, _) in stats.items():
        out[stage_of(key) or "other"] += tt
    out["total (profiled)"] = total
    return {k: round(v, 3) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--family", default="qwen3")
    ap.add_argument("--median-words", type=float, default=16.0)
    ap.add_argument("--pack-size", type=int, default=4096)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--encode-side", nargs=3, metavar=("ROWS", "FAMILY_DIR", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.encode_side:
        encode_side(args.encode_side[0], args.encode_side[1], int(args.encode_side[2]))
        return 0
    family_dir = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR", ROOT / ".seqpack-cache" / "tokenizers")) / args.family
    if not (family_dir / "tokenizer.json").is_file():
        print(f"skipped: no tokenizer bundle at {family_dir} (run scripts/fetch_tokenizers.py --only {args.family})")
        return 0
    from gen_sft_jsonl import write_rows

    tmp = Path(tempfile.mkdtemp(prefix="seqpack-throughput-"))
    try:
        rows = tmp / "rows.jsonl"
        info = write_rows(rows, args.rows, seed=0, median_words=args.median_words)
        load_before = os.getloadavg()
        cells: dict[tuple[str, int], list[dict]] = {}
        for rep in range(args.repeat):
            for workers in args.workers:
                sides = ["encode", "pack"] if (rep + workers) % 2 == 0 else ["pack", "encode"]
                for side in sides:
                    if side == "encode":
                        res = _run_child([sys.executable, __file__, "--encode-side", str(rows), str(family_dir),
                                          str(workers)], ENV)
                        res.update(json.loads(res.pop("stdout")))
                        res["measured_s"] = res["encode_s"]
                    else:
                        out = tmp / f"out-{rep}-{workers}"
                        res = _run_child(_pack_cmd(rows, out, family_dir, workers, args.pack_size), ENV)
                        answer = json.loads(res.pop("stdout"))
                        res["measured_s"] = res["wall_s"]
                        res["packs"] = answer["splits"]["training"]["packs"]
                        res["tokens"] = answer["splits"]["training"]["real_tokens"]
                        shutil.rmtree(out)
                    cells.setdefault((side, workers), []).append(res)
        profile = profile_pack(rows, family_dir, args.pack_size, tmp) if args.profile else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    table, results = [], []
    for workers in args.workers:
        enc = statistics.median(r["measured_s"] for r in cells[("encode", workers)])
        pack = statistics.median(r["measured_s"] for r in cells[("pack", workers)])
        rss = max(r["peak_rss_mb"] for r in cells[("pack", workers)])
        cpu = statistics.median(r["cpu_s"] for r in cells[("pack", workers)])
        row = {"workers": workers, "rows": args.rows, "encode_s": round(enc, 3), "pack_s": round(pack, 3),
               "ratio": round(pack / enc, 3), "pack_rows_per_s": round(args.rows / pack), "pack_cpu_s": round(cpu, 2),
               "pack_peak_rss_mb": round(rss), "runs": len(cells[("pack", workers)]),
               "encode_runs_s": [round(r["measured_s"], 3) for r in cells[("encode", workers)]],
               "pack_runs_s": [round(r["measured_s"], 3) for r in cells[("pack", workers)]]}
        results.append(row)
        table.append([workers, f"{args.rows:,}", f"{enc:.2f} s", f"{pack:.2f} s", f"{pack / enc:.2f}",
                      f"{args.rows / pack:,.0f}", f"{cpu:.1f} s", f"{rss:,.0f} MB"])
    from seqpack.core.textfmt import text_table

    print(f"family={args.family} rows={args.rows} ({info['words']:,} words) pack={args.pack_size} "
          f"repeat={args.repeat} cpus={os.cpu_count()} load before={load['before']} after={load['after']}")
    print(text_table(["workers", "rows", "(a) encode", "(b) pack", "(b)/(a)", "pack rows/s", "pack CPU",
                      "pack peak RSS"], table))
    if profile:
        print("profile of (b), 1 worker (seconds of exclusive time by stage):")
        print(text_table(["stage", "seconds"], [[k, f"{v:.2f}"] for k, v in profile.items()]))
    path = ROOT / "bench" / "results" / "throughput.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"family": args.family, "rows": args.rows, "median_words": args.median_words,
                                "pack_size": args.pack_size, "repeat": args.repeat, "cpus": os.cpu_count(),
                                "load_average": load, "results": results, "profile": profile}, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

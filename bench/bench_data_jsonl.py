"""Data-layer throughput: JSONL line index (cold build, cached open), lazy row access, tokenization.

Run:  python bench/bench_data_jsonl.py [--mb 64] [--reads 20000] [--seed 0]

The input is the shipped prompt/completion demo file repeated until it reaches ``--mb`` MiB,
written to a temporary folder. Baselines run in the same process, side by side:
* index build vs. a plain Python loop over the lines (``for line in fh``) recording offsets;
* random ``row(i)`` vs. parsing every line into a list first (time to first row).
Prints a table and writes ``bench/results/data_jsonl.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqpack.data.demo import demo_path  # noqa: E402
from seqpack.data.jsonl import JsonlFile, build_line_index  # noqa: E402
from seqpack.data.schemas import default_schema  # noqa: E402
from seqpack.data.tokenize import to_training_example, tokenize_row  # noqa: E402
from seqpack.data.tokenizers import ByteTokenizer  # noqa: E402


def make_input(folder: Path, mib: int) -> Path:
    block = demo_path("prompt_completion").read_bytes()
    path = folder / "big.jsonl"
    with open(path, "wb") as fh:
        written = 0
        while written < mib << 20:
            fh.write(block)
            written += len(block)
    return path


def naive_offsets(path: Path) -> int:
    offsets, pos = [], 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                offsets.append(pos)
            pos += len(line)
    return len(offsets)


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows_out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = make_input(folder, args.mb)
        size_mib = path.stat().st_size / (1 << 20)

        t_index, index = timed(lambda: build_line_index(path))
        t_naive, n_naive = timed(lambda: naive_offsets(path))
        assert n_naive == len(index)
        cache = folder / "cache"
        t_first, _ = timed(lambda: JsonlFile(path, cache_dir=cache), repeat=1)
        t_cached, f = timed(lambda: JsonlFile(path, cache_dir=cache))
        assert f.index_source == "cache"
        rows_out += [
            {"step": "index build (chunked numpy scan)", "seconds": t_index, "MiB/s": size_mib / t_index},
            {"step": "baseline: python line loop", "seconds": t_naive, "MiB/s": size_mib / t_naive},
            {"step": "open, cold (build + write cache)", "seconds": t_first, "MiB/s": size_mib / t_first},
            {"step": "open, cached index", "seconds": t_cached, "MiB/s": size_mib / t_cached},
        ]

        rng = np.random.default_rng(args.seed)
        picks = rng.integers(0, len(f), size=args.reads)
        t_rand, _ = timed(lambda: [f.row(int(i)) for i in picks], repeat=1)
        t_full, _ = timed(lambda: [json.loads(line) for line in open(path, "rb") if line.strip()], repeat=1)
        rows_out += [
            {"step": f"random row(i) x{args.reads}", "seconds": t_rand, "us/row": 1e6 * t_rand / args.reads},
            {"step": "baseline: parse all rows before the first", "seconds": t_full, "us/row": 1e6 * t_full / len(f)},
        ]

        tok = ByteTokenizer()
        for schema in ("prompt_completion", "chat"):
            demo = JsonlFile(demo_path(schema), cache_dir=cache)
            spec = default_schema(schema)

            def run(demo=demo, spec=spec) -> int:
                return sum(to_training_example(tokenize_row(demo.row(i), spec, tok, max_length=4096)).tokens.size
                           for i in range(len(demo)))

            t_tok, n_tok = timed(run, repeat=1)
            rows_out.append({"step": f"read+tokenize+shift {schema} ({len(demo)} rows)", "seconds": t_tok,
                             "rows/s": len(demo) / t_tok, "tokens/s": n_tok / t_tok})

    print(f"input: {size_mib:.0f} MiB, {len(index)} rows")
    print(f"{'step':50s} {'seconds':>9s}  rate")
    for r in rows_out:
        rate = ", ".join(f"{v:,.1f} {k}" for k, v in r.items() if k not in ("step", "seconds"))
        print(f"{r['step']:50s} {r['seconds']:9.4f}  {rate}")
    print(f"index build vs python loop: {t_naive / t_index:.1f}x faster; cached open vs cold build: "
          f"{t_index / t_cached:.0f}x faster")
    out = Path(__file__).resolve().parent / "results" / "data_jsonl.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"input_mib": size_mib, "rows": len(index), "results": rows_out}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

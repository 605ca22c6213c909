"""Benchmark: end-to-end offline packing (`prepare_packed_dataset`) on a 100k-row JSONL.

Usage: python bench/bench_offline_pack.py [--rows 100000] [--pack-size 8192] [--workers 1 2]
Builds a JSONL by cycling the bundled prompt/completion demo rows (each row gets a unique prefix),
packs it with the byte tokenizer, and reports rows/s and tokens/s per worker count, side by side
in one run. Writes bench/results/offline_pack.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_impl.data import demo_path  # noqa: E402
from reference_impl.packing.offline import prepare_packed_dataset  # noqa: E402
from reference_impl.textfmt import text_table  # noqa: E402


def build_input(path: Path, rows: int) -> int:
    demo = [json.loads(line) for line in demo_path("prompt_completion").read_text().splitlines()]
    size = 0
    with open(path, "w") as fh:
        for i in range(rows):
            row = dict(demo[i % len(demo)])
            row["prompt"] = f"[{i}] {row['prompt']}"
            line = json.dumps(row) + "\n"
            size += len(line)
            fh.write(line)
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--pack-size", type=int, default=8192)
    parser.add_argument("--pad-seq-to-mult", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    results, table = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "input.jsonl"
        size = build_input(data, args.rows)
        for workers in args.workers:
            t0 = time.perf_counter()
            res = prepare_packed_dataset(
                data, Path(tmp) / f"out{workers}", pack_size=args.pack_size,
                pad_seq_to_mult=args.pad_seq_to_mult, num_workers=workers,
            )
            wall = time.perf_counter() - t0
            info = res.manifest["splits"]["training"]
            rows = info["accounting"]["rows_in"]
            tokens = info["real_tokens"]
            results[f"workers={workers}"] = {
                "wall_s": wall, "rows": rows, "rows_per_s": rows / wall, "tokens": tokens,
                "tokens_per_s": tokens / wall, "packs": info["packs"],
                "efficiency": info["aligned_tokens"] / info["token_slots"], "input_mb": size / 1e6,
            }
            table.append([workers, f"{wall:.2f} s", f"{rows / wall:,.0f}", f"{tokens / wall / 1e6:.2f} M",
                          info["packs"], f"{info['aligned_tokens'] / info['token_slots']:.4%}"])
    print(f"{args.rows} rows ({size / 1e6:.0f} MB), pack_size={args.pack_size}, pad_seq_to_mult={args.pad_seq_to_mult}, "
          "byte tokenizer, best-fit decreasing")
    print(text_table(["workers", "wall", "rows/s", "tokens/s", "packs", "efficiency"], table))
    out = ROOT / "bench" / "results" / "offline_pack.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

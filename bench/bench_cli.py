"""Benchmark: cold start of the light CLI commands and in-process validate_config.

Usage: python bench/bench_cli.py [--repeat N]
Prints a table and writes bench/results/cli.json. Targets: CLI cold start < 0.3 s (nothing heavy
is imported), validate_config < 1 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqpack.core.textfmt import text_table  # noqa: E402

COMMANDS = {
    "python -c pass (interpreter floor)": [sys.executable, "-c", "pass"],
    "seqpack align --tp 4 --cp 2 --sp": [sys.executable, "-m", "seqpack", "align", "--tp", "4", "--cp", "2", "--sp"],
    "seqpack validate --example offline_8k_tp4_cp2_sp": [
        sys.executable, "-m", "seqpack", "validate", "--example", "offline_8k_tp4_cp2_sp"],
    "seqpack rules --json": [sys.executable, "-m", "seqpack", "rules", "--json"],
}


def time_command(cmd: list[str], repeat: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    rows, results = [], {}
    for name, cmd in COMMANDS.items():
        times = time_command(cmd, args.repeat)
        med, best = statistics.median(times), min(times)
        results[name] = {"median_s": med, "min_s": best, "runs": times}
        rows.append([name, f"{med * 1000:.0f} ms", f"{best * 1000:.0f} ms"])

    from seqpack.config import load_config, validate_config
    from seqpack.config.examples import example_path

    cfg = load_config(example_path("offline_8k_tp4_cp2_sp"))
    n = 2000
    validate_config(cfg)
    t0 = time.perf_counter()
    for _ in range(n):
        validate_config(cfg)
    per_call = (time.perf_counter() - t0) / n
    results["validate_config (in process, loaded config)"] = {"mean_s": per_call, "calls": n}
    rows.append(["validate_config (in process, per call)", f"{per_call * 1e6:.0f} us", ""])

    t0 = time.perf_counter()
    for _ in range(200):
        validate_config(example_path("offline_8k_tp4_cp2_sp"))
    per_file = (time.perf_counter() - t0) / 200
    results["validate_config (in process, YAML file incl. parsing)"] = {"mean_s": per_file, "calls": 200}
    rows.append(["validate_config (in process, from YAML file)", f"{per_file * 1e6:.0f} us", ""])

    print(text_table(["what", "median", "best"], rows))
    out = ROOT / "bench" / "results" / "cli.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

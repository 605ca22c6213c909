"""Benchmark: wall time of the packing smoke test per path.

Usage: python bench/bench_smoke.py [--size small]
Measures, in one run: the in-process smoke test (everything but the multi-process CP check) for
each path, their sum (target: offline + in-batch under 10 s on a 2-core machine), and the CP=2
check including process start (target: under 30 s). Writes bench/results/smoke.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

from reference_impl.packing_paths import path_names  # noqa: E402
from reference_impl.smoke import run_packing_smoke_test  # noqa: E402
from reference_impl.textfmt import text_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    args = parser.parse_args()
    rows, results = [], {}
    in_process_total = 0.0
    for path in path_names():
        t0 = time.perf_counter()
        report = run_packing_smoke_test(path, size=args.size, cp_check=False)
        in_process = time.perf_counter() - t0
        in_process_total += in_process
        t0 = time.perf_counter()
        cp_report = run_packing_smoke_test(path, size=args.size, cp_check=True)
        with_cp = time.perf_counter() - t0
        cp_only = cp_report.timings.get("cp_check_s", float("nan"))
        results[path] = {"in_process_s": in_process, "with_cp_s": with_cp, "cp_check_s": cp_only,
                         # without the CP check the first run is incomplete: it must only not fail
                         "ok": report.result != "fail" and cp_report.ok, "batches": report.data["batches"],
                         "samples": report.data["samples"]}
        rows.append([path, f"{in_process:.1f} s", f"{cp_only:.1f} s", f"{with_cp:.1f} s",
                     report.data["samples"], report.data["batches"], "pass" if results[path]["ok"] else "FAIL"])
    rows.append(["sum in-process", f"{in_process_total:.1f} s", "", "", "", "", ""])
    results["in_process_total_s"] = in_process_total
    print(f"smoke test wall time, size={args.size} (float64 tiny GPT, CPU)")
    print(text_table(["path", "in-process", "CP=2 check", "total with CP", "samples", "batches", "result"], rows))
    out = ROOT / "bench" / "results" / "smoke.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

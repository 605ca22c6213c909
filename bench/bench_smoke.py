"""Benchmark: wall time of the packing smoke test per path, after a warm-up.

Usage: python bench/bench_smoke.py [--size small] [--paths offline in_batch ...] [--no-cp]
       [--repeat N] [--command]

The first smoke test in a process pays for importing torch, Megatron-Core and the path's own
libraries, so timing the paths one after the other in a fresh process charges all of that to
whichever path comes first. This benchmark therefore runs, in one process:

1. a warm-up pass: every path once, in process, without the CP check; its times are reported as
   ``first run`` (what a fresh process pays, imports included) and are not used for the per-path
   figures;
2. the timed pass: every path ``--repeat`` times, the paths taking turns (median reported), with
   the CP=2 check (unless ``--no-cp``), split into batch building, the equivalence checks (in
   process) and the CP check (a two-rank launch, process start included). On a shared machine the
   same run varies by 2x; use ``--repeat 3`` or more before comparing paths.

With ``--command`` it also times the command users run, ``seqpack smoke --size S [--no-cp]`` for
all paths, end to end in a fresh process (issue 19's targets: all paths with CP <= 15 s on a
quiet machine, ``--no-cp`` <= 6 s). Writes ``bench/results/smoke.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

from reference_impl.smoke import PATHS, run_packing_smoke_test  # noqa: E402
from reference_impl.textfmt import text_table  # noqa: E402

COMMAND_TARGETS_S = {"with_cp": 15.0, "no_cp": 6.0}


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _passed(report: Any) -> bool:
    return bool(getattr(report, "ok", False))


def time_paths(paths: list[str], size: str, *, cp: bool, repeat: int) -> dict[str, dict[str, Any]]:
    """Warm-up pass, then the timed pass (see the module docstring); per-path figures in seconds."""
    results: dict[str, dict[str, Any]] = {}
    for path in paths:
        started = time.perf_counter()
        report = run_packing_smoke_test(path, size=size, cp_check=False)
        results[path] = {"first_run_s": time.perf_counter() - started, "first_run_passed": _passed(report)}
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in paths}
    for _ in range(repeat):  # the paths take turns, so machine noise hits them alike
        for path in paths:
            started = time.perf_counter()
            report = run_packing_smoke_test(path, size=size, cp_check=cp)
            wall = time.perf_counter() - started
            t = report.timings
            cp_s = t.get("cp_check_s") if cp else None
            runs[path].append({"wall_s": wall, "in_process_s": wall - (cp_s or 0.0),
                               "build_batches_s": t.get("build_batches_s"), "equivalence_s": t.get("equivalence_s"),
                               "cp_check_s": cp_s, "passed": _passed(report),
                               "samples": report.data.get("samples"), "batches": report.data.get("batches")})
    for path, path_runs in runs.items():

        def median(key: str, path_runs: list[dict[str, Any]] = path_runs) -> float | None:
            values = [r[key] for r in path_runs if r[key] is not None]
            return statistics.median(values) if values else None

        results[path].update({
            "repeat": repeat, "in_process_s": median("in_process_s"), "build_batches_s": median("build_batches_s"),
            "equivalence_s": median("equivalence_s"), "cp_check_s": median("cp_check_s"),
            "with_cp_s": median("wall_s") if cp else None, "passed": all(r["passed"] for r in path_runs),
            "samples": path_runs[-1]["samples"], "batches": path_runs[-1]["batches"],
            "in_process_runs_s": [round(r["in_process_s"], 3) for r in path_runs],
        })
    return results


def time_command(size: str, *, cp: bool) -> dict[str, Any]:
    """Wall time of ``seqpack smoke --size SIZE [--no-cp]`` (all paths) in a fresh process."""
    command = [sys.executable, "-m", "reference_impl", "smoke", "--size", size, "--json"] + ([] if cp else ["--no-cp"])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    return {"command": " ".join(["seqpack", *command[3:]]), "wall_s": wall, "exit_code": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    parser.add_argument("--no-cp", action="store_true", help="skip the CP=2 check in the timed pass")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per path (median; default 1)")
    parser.add_argument("--command", action="store_true",
                        help="also time `seqpack smoke` for all paths, with and without the CP check")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "smoke.json")
    args = parser.parse_args()
    cp = not args.no_cp

    results = time_paths(args.paths, args.size, cp=cp, repeat=max(1, args.repeat))
    rows = []
    for path, r in results.items():
        rows.append([path, _seconds(r["first_run_s"]), _seconds(r["in_process_s"]), _seconds(r["build_batches_s"]),
                     _seconds(r["equivalence_s"]), _seconds(r["cp_check_s"]), _seconds(r["with_cp_s"]),
                     r["samples"], r["batches"], "pass" if r["passed"] and r["first_run_passed"] else "FAIL"])
    totals = {
        "first_pass_s": sum(r["first_run_s"] for r in results.values()),
        "in_process_s": sum(r["in_process_s"] for r in results.values()),
        "cp_check_s": sum(r["cp_check_s"] for r in results.values()) if cp else None,
        "with_cp_s": sum(r["with_cp_s"] for r in results.values()) if cp else None,
    }
    rows.append(["all paths", _seconds(totals["first_pass_s"]), _seconds(totals["in_process_s"]), "", "",
                 _seconds(totals["cp_check_s"]), _seconds(totals["with_cp_s"]), "", "", ""])
    print(f"smoke test wall time per path, size={args.size} (float64 tiny GPT, CPU); 'first run' is the warm-up "
          f"pass (imports included, first path pays most); the other columns are the timed pass after it "
          f"(median of {max(1, args.repeat)})")
    print(text_table(["path", "first run", "in-process", "build batches", "equivalence", "CP=2 check",
                      "total with CP", "samples", "batches", "result"], rows))

    commands = []
    if args.command:
        for with_cp in (True, False):
            c = time_command(args.size, cp=with_cp)
            key = "with_cp" if with_cp else "no_cp"
            c["target_s"] = COMMAND_TARGETS_S[key]
            c["met"] = c["exit_code"] == 0 and c["wall_s"] <= c["target_s"]
            commands.append(c)
            print(f"{'MET ' if c['met'] else 'MISS'} `{c['command']}`: {c['wall_s']:.1f} s "
                  f"(target <= {c['target_s']:g} s, exit code {c['exit_code']})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
               "size": args.size, "cp_check": cp, "paths": results, "totals": totals, "commands": commands}
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

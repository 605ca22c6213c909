"""Benchmark: wall and CPU time of the packing smoke test, per path after a warm-up, and end to end.

Usage: python bench/bench_smoke.py [--size small] [--paths offline in_batch ...] [--no-cp]
       [--repeat N] [--command] [--command-repeat N] [--compare-root DIR]

The first smoke test in a process pays for importing torch and the path's own libraries, so
timing the paths one after the other in a fresh process charges all of that to whichever path
comes first. This benchmark therefore runs, in one process:

1. a warm-up pass: every path once, in process, without the CP check; its times are reported as
   ``first run`` (what a fresh process pays, imports included) and are not used for the per-path
   figures;
2. the timed pass: every path ``--repeat`` times, the paths taking turns (median reported), with
   the CP=2 check (unless ``--no-cp``), split into batch building, the equivalence checks (in
   process) and the CP check (a launch of two ranks forked from a process that started importing
   torch and Megatron-Core when the run began: what of that import the path's in-process checks
   did not hide is included; a path alone pays a whole launch);
3. all paths in one run (``run_packing_smoke_tests``: the in-process checks two paths at a time on
   threads, the CP checks in one launch), as ``seqpack smoke`` does, ``--repeat`` times.

With ``--command`` it also times the command users run, ``seqpack smoke --size S [--no-cp]`` for
all paths, end to end in a fresh process (issue 25's targets on a quiet 2-core machine: all paths
with CP <= 10 s, ``--no-cp`` <= 5 s), ``--command-repeat`` times each (median); with
``--compare-root DIR`` the same commands run from another checkout (say the base revision) in
turn with this one, so before and after are measured side by side under the same load.

Every figure comes with its CPU time (this process plus the processes it waited for: the rank
server and the ranks forked from it, the commands); the load average is recorded before and after. On a busy machine wall time can be several times the CPU
time; quote both. Writes ``bench/results/smoke.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

from seqpack.core.packing_paths import path_names  # noqa: E402
from seqpack.smoke.run import run_packing_smoke_test, run_packing_smoke_tests  # noqa: E402
from seqpack.core.textfmt import text_table  # noqa: E402

PATHS = path_names()
COMMAND_TARGETS_S = {"with_cp": 10.0, "no_cp": 5.0}  # issue 25, wall seconds on a quiet 2-core machine


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu() -> float:
    """CPU seconds of this process and of the children it waited for (the CP ranks, commands)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    cpu, started = _cpu(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started, _cpu() - cpu


def _passed(report: Any) -> bool:
    """Every check that ran passed (a run without the CP check is incomplete, not failed)."""
    return report.result == "pass" or (report.result == "incomplete" and report.skipped == ["cp_matches_cp1"])


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def time_paths(paths: list[str], size: str, *, cp: bool, repeat: int) -> dict[str, dict[str, Any]]:
    """Warm-up pass, then the timed pass (see the module docstring); per-path figures in seconds."""
    results: dict[str, dict[str, Any]] = {}
    for path in paths:
        report, wall, cpu = _timed(lambda path=path: run_packing_smoke_test(path, size=size, cp_check=False))
        results[path] = {"first_run_s": wall, "first_run_cpu_s": cpu, "first_run_passed": _passed(report)}
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in paths}
    for _ in range(repeat):  # the paths take turns, so machine noise hits them alike
        for path in paths:
            report, wall, cpu = _timed(lambda path=path: run_packing_smoke_test(path, size=size, cp_check=cp))
            t = report.timings
            cp_s = t.get("cp_check_s") if cp else None
            runs[path].append({"wall_s": wall, "cpu_s": cpu, "in_process_s": t.get("in_process_s"),
                               "build_batches_s": t.get("build_batches_s"), "equivalence_s": t.get("equivalence_s"),
                               "cp_check_s": cp_s, "megatron_core_import_s": t.get("megatron_core_import_s"),
                               "passed": _passed(report), "samples": report.data.get("samples"),
                               "batches": report.data.get("batches")})
    for path, path_runs in runs.items():
        results[path].update({k: _median([r[k] for r in path_runs]) for k in (
            "in_process_s", "build_batches_s", "equivalence_s", "cp_check_s", "megatron_core_import_s", "cpu_s")})
        results[path].update({
            "repeat": repeat, "with_cp_s": _median([r["wall_s"] for r in path_runs]) if cp else None,
            "passed": all(r["passed"] for r in path_runs),
            "samples": path_runs[-1]["samples"], "batches": path_runs[-1]["batches"],
            "in_process_runs_s": [round(r["in_process_s"], 3) for r in path_runs],
        })
    return results


def time_together(paths: list[str], size: str, *, cp: bool, repeat: int) -> dict[str, Any]:
    """All paths in one run, as ``seqpack smoke`` does (one CP launch), ``repeat`` times (median)."""
    runs = []
    for _ in range(repeat):
        reports, wall, cpu = _timed(lambda: run_packing_smoke_tests(paths, size=size, cp_check=cp))
        runs.append({"wall_s": wall, "cpu_s": cpu, "passed": all(_passed(r) for r in reports),
                     "cp_check_s": reports[0].timings.get("cp_check_s"),
                     "megatron_core_import_s": reports[0].timings.get("megatron_core_import_s")})
    return {"repeat": repeat, "passed": all(r["passed"] for r in runs),
            **{k: _median([r[k] for r in runs]) for k in ("wall_s", "cpu_s", "cp_check_s", "megatron_core_import_s")},
            "wall_runs_s": [round(r["wall_s"], 2) for r in runs]}


def time_command(root: Path, size: str, *, cp: bool) -> dict[str, Any]:
    """Wall and CPU time of ``seqpack smoke --size SIZE [--no-cp]`` (all paths) from ``root``, in a fresh process."""
    command = [sys.executable, "-m", "seqpack", "smoke", "--size", size, "--json"] + ([] if cp else ["--no-cp"])
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load = _load()
    done, wall, cpu = _timed(lambda: subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                                                    check=False))
    return {"wall_s": wall, "cpu_s": cpu, "exit_code": done.returncode, "load_before": load}


def time_commands(roots: dict[str, Path], size: str, repeat: int) -> list[dict[str, Any]]:
    """Each root's command with and without CP, ``repeat`` times, roots and modes taking turns."""
    runs: dict[tuple[str, bool], list[dict[str, Any]]] = {(n, cp): [] for n in roots for cp in (True, False)}
    for _ in range(repeat):
        for with_cp in (True, False):
            for name, root in roots.items():
                runs[(name, with_cp)].append(time_command(root, size, cp=with_cp))
    out = []
    for (name, with_cp), rs in runs.items():
        key = "with_cp" if with_cp else "no_cp"
        exits = sorted({r["exit_code"] for r in rs})
        wall = statistics.median(r["wall_s"] for r in rs)
        out.append({
            "root": name, "command": "seqpack smoke --size " + size + ("" if with_cp else " --no-cp"),
            "wall_s": wall, "cpu_s": statistics.median(r["cpu_s"] for r in rs), "exit_codes": exits,
            "wall_runs_s": [round(r["wall_s"], 2) for r in rs], "cpu_runs_s": [round(r["cpu_s"], 2) for r in rs],
            "load_before": [r["load_before"] for r in rs], "target_s": COMMAND_TARGETS_S[key],
            # without the CP check every run is incomplete (exit 1), never a pass
            "met": exits == [0 if with_cp else 1] and wall <= COMMAND_TARGETS_S[key],
        })
    return out


def _in_process_passes(args: argparse.Namespace, cp: bool, repeat: int,
                       load_start: list[float]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The per-path passes and the all-paths run, printed as a table: (per path, all paths, totals)."""
    results = time_paths(args.paths, args.size, cp=cp, repeat=repeat)
    together = time_together(args.paths, args.size, cp=cp, repeat=repeat)
    rows = []
    for path, r in results.items():
        rows.append([path, _seconds(r["first_run_s"]), _seconds(r["in_process_s"]), _seconds(r["build_batches_s"]),
                     _seconds(r["equivalence_s"]), _seconds(r["cp_check_s"]), _seconds(r["with_cp_s"]),
                     _seconds(r["cpu_s"]), r["samples"], r["batches"],
                     "pass" if r["passed"] and r["first_run_passed"] else "FAIL"])
    totals = {
        "first_pass_s": sum(r["first_run_s"] for r in results.values()),
        "in_process_s": sum(r["in_process_s"] for r in results.values()),
        "cp_check_s": sum(r["cp_check_s"] for r in results.values()) if cp else None,
        "with_cp_s": sum(r["with_cp_s"] for r in results.values()) if cp else None,
        "cpu_s": sum(r["cpu_s"] for r in results.values()),
    }
    rows.append(["sum of paths", _seconds(totals["first_pass_s"]), _seconds(totals["in_process_s"]), "", "",
                 _seconds(totals["cp_check_s"]), _seconds(totals["with_cp_s"]), _seconds(totals["cpu_s"]), "", "", ""])
    rows.append(["all paths, one run", "", "", "", "", _seconds(together["cp_check_s"]), _seconds(together["wall_s"]),
                 _seconds(together["cpu_s"]), "", "", "pass" if together["passed"] else "FAIL"])
    print(f"smoke test per path, size={args.size} (float64 tiny GPT, CPU); 'first run' is the warm-up pass (imports "
          f"included, first path pays most); the other columns are timed after it (median of {repeat}); "
          f"'total' is the path's wall time {'with' if cp else 'without'} its CP check; 'all paths, one run' shares "
          f"one CP launch; load average at start {load_start}")
    print(text_table(["path", "first run", "in-process", "build batches", "equivalence", "CP=2 check",
                      "total", "CPU", "samples", "batches", "result"], rows))
    return results, together, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    parser.add_argument("--no-cp", action="store_true", help="skip the CP=2 check in the timed passes")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per path (median; default 1)")
    parser.add_argument("--command", action="store_true",
                        help="also time `seqpack smoke` for all paths, with and without the CP check")
    parser.add_argument("--command-repeat", type=int, default=1, help="runs of each command (median; default 1)")
    parser.add_argument("--command-only", action="store_true",
                        help="time only the commands (implies --command; no per-path and in-process passes)")
    parser.add_argument("--compare-root", type=Path,
                        help="another checkout (e.g. the base revision) whose commands run in turn with this one's")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "smoke.json")
    args = parser.parse_args()
    cp, repeat = not args.no_cp, max(1, args.repeat)
    load_start = _load()

    if args.command_only:
        args.command = True
        results, together, totals = {}, {}, {}
    else:
        results, together, totals = _in_process_passes(args, cp, repeat, load_start)

    commands = []
    if args.command:
        roots = {"this": ROOT}
        if args.compare_root is not None:
            roots["compare"] = args.compare_root.resolve()
        commands = time_commands(roots, args.size, max(1, args.command_repeat))
        for c in commands:
            busy = statistics.median(load[0] for load in c["load_before"]) > 1.0
            print(f"{'MET ' if c['met'] else 'MISS'} [{c['root']}] `{c['command']}`: {c['wall_s']:.1f} s wall, "
                  f"{c['cpu_s']:.1f} s CPU (median of {len(c['wall_runs_s'])}: {c['wall_runs_s']}; target <= "
                  f"{c['target_s']:g} s wall on a quiet machine; exit codes {c['exit_codes']}; load before "
                  f"{c['load_before']})" + ("; BUSY machine: compare CPU seconds, not wall" if busy else ""))

    load_end = _load()
    print(f"load average: start {load_start}, end {load_end} ({os.cpu_count()} CPUs)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
               "size": args.size, "cp_check": cp, "load_start": load_start, "load_end": load_end, "paths": results,
               "totals": totals, "all_paths_one_run": together, "commands": commands,
               "compare_root": str(args.compare_root) if args.compare_root else None}
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

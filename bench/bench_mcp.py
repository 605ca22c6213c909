"""Benchmark: MCP server cold start and tool latency over stdio.

Usage: python bench/bench_mcp.py [--starts N] [--calls N]
Prints a table and writes bench/results/mcp.json. Targets: cold start (spawn to the first
list_tools answer) under 2 s; p99 latency of derive_alignment and validate_config under 20 ms.
The interpreter and SDK import floors are measured in the same run, interleaved with the cold
starts; a floor is a whole ``python -c`` process (interpreter exit included), a cold start stops
the clock at the list_tools answer, so the two are close when the server adds little to the import.
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

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from seqpack.core.textfmt import text_table  # noqa: E402

START_TARGET_S = 2.0
P99_TARGET_S = 0.020
CONFIG = (ROOT / "reference_impl" / "seqpack" / "config" / "examples" / "offline_8k_tp4_cp2_sp.yaml").read_text()


def _params() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "seqpack", "mcp", "--root", str(ROOT)],
        env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
    )


def floor(code: str) -> float:
    """Wall time of ``python -c code`` (what any Python process, or the SDK import, costs)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0


async def cold_start(devnull) -> float:  # noqa: ANN001
    """Spawn the server and time until the first list_tools answer."""
    t0 = time.perf_counter()
    async with stdio_client(_params(), errlog=devnull) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=60) as session:
            await session.initialize()
            tools = await session.list_tools()
            elapsed = time.perf_counter() - t0
            assert len(tools.tools) >= 10
    return elapsed


async def latencies(calls: int, devnull) -> dict[str, list[float]]:  # noqa: ANN001
    """Per-call round trips of two light tools on one warm session."""
    cases = {
        "derive_alignment (TP4/CP2/SP)": ("derive_alignment", {"tp": 4, "cp": 2, "sp": True}),
        "validate_config (example YAML text)": ("validate_config", {"config_text": CONFIG}),
    }
    out: dict[str, list[float]] = {}
    async with stdio_client(_params(), errlog=devnull) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=60) as session:
            await session.initialize()
            for name, (tool, args) in cases.items():
                for _ in range(20):  # warm-up: first-call imports and caches
                    await session.call_tool(tool, args)
                times = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    result = await session.call_tool(tool, args)
                    times.append(time.perf_counter() - t0)
                    assert not result.is_error
                out[name] = times
    return out


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10, help="cold starts to time")
    parser.add_argument("--calls", type=int, default=500, help="timed calls per tool")
    args = parser.parse_args()

    results: dict[str, object] = {"targets": {"cold_start_s": START_TARGET_S, "p99_s": P99_TARGET_S}}
    rows = []
    python_floor, sdk_floor, starts = [], [], []
    with open("/dev/null", "w") as devnull:
        for _ in range(args.starts):  # interleaved, so machine load hits all three alike
            python_floor.append(floor("pass"))
            sdk_floor.append(floor("import mcp.server.mcpserver"))
            starts.append(anyio.run(cold_start, devnull))
        lat = anyio.run(latencies, args.calls, devnull)

    start_med = statistics.median(starts)
    timed = (("python -c pass (floor)", python_floor), ("import mcp.server.mcpserver (SDK floor)", sdk_floor),
             ("server cold start -> first list_tools", starts))
    for name, times in timed:
        med = statistics.median(times)
        rows.append([name, f"{med * 1000:.0f} ms", f"{min(times) * 1000:.0f} ms", "", ""])
        results[name] = {"median_s": med, "min_s": min(times), "runs": times}
    results["cold_start_ok"] = start_med < START_TARGET_S
    results["cold_start_over_sdk_import"] = start_med / statistics.median(sdk_floor)
    results["load_average_1min"] = os.getloadavg()[0]
    for name, times in lat.items():
        p50, p99 = pct(times, 0.50), pct(times, 0.99)
        rows.append([name, f"{p50 * 1000:.2f} ms", f"{min(times) * 1000:.2f} ms", f"{p99 * 1000:.2f} ms",
                     "ok" if p99 < P99_TARGET_S else "OVER"])
        results[name] = {"p50_s": p50, "p99_s": p99, "mean_s": statistics.fmean(times), "calls": len(times),
                         "p99_ok": p99 < P99_TARGET_S}

    print(text_table(["what", "median / p50", "best", "p99", "target"], rows))
    print(f"\n(1-minute load average at the end: {results['load_average_1min']:.2f} on {os.cpu_count()} CPUs)")
    print(f"cold start target < {START_TARGET_S:.0f} s: {'ok' if results['cold_start_ok'] else 'OVER'} "
          f"({results['cold_start_over_sdk_import']:.1f}x the bare SDK import); p99 target < "
          f"{P99_TARGET_S * 1000:.0f} ms")
    out = ROOT / "bench" / "results" / "mcp.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

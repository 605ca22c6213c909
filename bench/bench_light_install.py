"""Benchmark: the light install against the full one, side by side: install size and MCP server start.

Usage: python bench/bench_light_install.py [--starts N] [--workdir DIR] [--reuse]

Builds the wheel (``python -m build``), installs it into two new venvs: ``light`` (the wheel alone,
with the dependencies it declares: no torch) and ``all`` (``torch==2.13.0`` first, as
``scripts/setup.sh`` does, then the wheel with the ``all`` extra), and reports for each

* the size of its site-packages and the number of distributions in it;
* the start of ``seqpack mcp`` over stdio until ``tools/list`` is answered (initialize, initialized,
  tools/list written at once; the clock stops at the answer): wall time and the server process's
  CPU time at that moment (from /proc), the two venvs taking turns, median of ``--starts`` runs;
* the import floor of the MCP SDK in that venv (``python -c "import mcp.server.mcpserver"``, CPU).

Issue 24's target: tools/list answered in < 1.5 s from start in the light install. On a shared,
busy machine wall time can be several times the CPU time; quote both (the load average is
recorded). ``--reuse`` keeps the venvs in ``--workdir`` (default ``.seqpack-cache/bench_light_install``)
and only reinstalls the freshly built wheel. Writes ``bench/results/light_install.json``.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqpack.core.textfmt import text_table  # noqa: E402
from tests.release_env import copy_sources  # noqa: E402 - what a distribution is built from

TARGET_S = 1.5
MESSAGES = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
]


def _run(argv: list, **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def build_wheel(out: Path) -> Path:
    """``python -m build --wheel`` of a copy of the checkout."""
    shutil.rmtree(out / "src", ignore_errors=True)
    src = copy_sources(out / "src")
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, src])
    (wheel,) = dist.glob("seqpack-*.whl")
    return wheel


def make_venv(venv: Path, wheel: Path, *, full: bool, reuse: bool) -> None:
    """A venv with the wheel (light), or torch==2.13.0 and the wheel with the ``all`` extra (full)."""
    py = venv / "bin" / "python"
    if not (reuse and py.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", venv])
    if full:
        _run([py, "-m", "pip", "install", "--quiet", "torch==2.13.0"])
    spec = f"{wheel}[all]" if full else str(wheel)
    _run([py, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", wheel])
    _run([py, "-m", "pip", "install", "--quiet", spec])


def site_size(venv: Path) -> tuple[int, int]:
    """Bytes under site-packages and the number of installed distributions."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    return total, len(list(site.glob("*.dist-info")))


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_start(venv: Path, root: Path) -> tuple[float, float]:
    """Spawn ``seqpack mcp --root ROOT``; (wall s, server CPU s) when tools/list is answered."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([venv / "bin" / "seqpack", "mcp", "--root", root], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=root)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in MESSAGES).encode())
    proc.stdin.flush()
    try:
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"{venv}: the server exited before answering tools/list")
            answer = json.loads(line)
            if answer.get("id") == 2:
                wall, cpu = time.perf_counter() - t0, _cpu_of(proc.pid)
                if len(answer["result"]["tools"]) < 10:
                    raise SystemExit(f"{venv}: tools/list answered {answer}")
                return wall, cpu
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def sdk_floor(venv: Path) -> float:
    """CPU seconds of ``python -c "import mcp.server.mcpserver"`` in the venv."""
    code = ("import resource, mcp.server.mcpserver; r = resource.getrusage(resource.RUSAGE_SELF); "
            "print(r.ru_utime + r.ru_stime)")
    return float(_run([venv / "bin" / "python", "-c", code]).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=7, help="cold starts per venv (median reported)")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".seqpack-cache" / "bench_light_install")
    parser.add_argument("--reuse", action="store_true", help="keep the venvs of an earlier run (reinstall the wheel)")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    wheel = build_wheel(args.workdir)
    venvs = {"light": args.workdir / "light", "all": args.workdir / "all"}
    for name, venv in venvs.items():
        make_venv(venv, wheel, full=name == "all", reuse=args.reuse)
    setup_s = time.perf_counter() - t0
    load_before = os.getloadavg()[0]
    starts: dict[str, list[tuple[float, float]]] = {name: [] for name in venvs}
    floors: dict[str, list[float]] = {name: [] for name in venvs}
    with tempfile.TemporaryDirectory() as root:
        for _ in range(args.starts):  # taking turns, so the machine's load hits both alike
            for name, venv in venvs.items():
                starts[name].append(cold_start(venv, Path(root)))
                floors[name].append(sdk_floor(venv))
    results: dict[str, object] = {"target_s": TARGET_S, "wheel": wheel.name, "setup_s": setup_s,
                                  "load_average_1min": [load_before, os.getloadavg()[0]], "venvs": {}}
    rows = []
    for name, venv in venvs.items():
        size, dists = site_size(venv)
        walls, cpus = [w for w, _ in starts[name]], [c for _, c in starts[name]]
        entry = {"site_packages_bytes": size, "distributions": dists, "start_wall_s": walls, "start_cpu_s": cpus,
                 "start_wall_median_s": statistics.median(walls), "start_cpu_median_s": statistics.median(cpus),
                 "sdk_import_cpu_median_s": statistics.median(floors[name])}
        results["venvs"][name] = entry  # type: ignore[index]
        rows.append([name, f"{size / 2**20:,.0f} MiB", str(dists), f"{entry['start_wall_median_s']:.2f} s",
                     f"{entry['start_cpu_median_s']:.2f} s", f"{entry['sdk_import_cpu_median_s']:.2f} s"])
    light = results["venvs"]["light"]  # type: ignore[index]
    results["light_ok_cpu"] = light["start_cpu_median_s"] < TARGET_S
    results["light_ok_wall"] = light["start_wall_median_s"] < TARGET_S
    print(text_table(["install", "site-packages", "distributions", "start -> tools/list (wall)",
                      "start -> tools/list (CPU)", "import mcp SDK (CPU)"], rows))
    print(f"target: light tools/list < {TARGET_S} s; load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "light_install.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'light_install.json'}")


if __name__ == "__main__":
    main()

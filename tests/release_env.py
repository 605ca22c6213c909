"""Helpers for the tests that need what users install: the built sdist and wheel, a clean venv with only the
wheel, and the real npm clients (``scripts/npm_clients.py``).

A check that cannot run here (no npm, no package index) is skipped with the reason, except in CI
(``CI=1`` or ``SEQPACK_CI=1``, also ``true``/``yes``), where a lane that cannot run is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What a source distribution is built from (a copy, so the checkout gets no build/ or egg-info).
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "reference_impl", "skills")


def in_ci() -> bool:
    """True under CI: ``CI`` or ``SEQPACK_CI`` set to 1, true or yes."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes") for name in ("CI", "SEQPACK_CI"))


def unavailable(reason: str) -> None:
    """Skip the test with ``reason``, or fail it in CI (a lane that cannot run is a failure there)."""
    if in_ci():
        pytest.fail(f"{reason} (CI: a check that cannot run fails)", pytrace=False)
    pytest.skip(reason)


def run(argv: list[str], *, timeout: float = 900, check: bool = True, **kw) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; with ``check``, fail the test with its output when it exits non-zero."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        pytest.fail(f"{argv} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return proc


def npm_clients() -> ModuleType:
    """``scripts/npm_clients.py`` as a module."""
    spec = importlib.util.spec_from_file_location("seqpack_npm_clients", ROOT / "scripts" / "npm_clients.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def client(name: str) -> list[str]:
    """The argv prefix of npm client ``name``, installed on demand (skipped, or failed in CI, when it cannot be)."""
    clients = npm_clients()
    try:
        return clients.command(name)
    except clients.InstallError as exc:
        unavailable(f"npm client {name} unavailable: {exc}")
        raise  # unreachable


def copy_sources(src: Path) -> Path:
    """Copy what a distribution is built from into ``src`` (a new directory); returns it."""
    src.mkdir(parents=True)
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    return src


def build_dists(out: Path) -> tuple[Path, Path]:
    """``python -m build`` (sdist, then the wheel from it) of a copy of the checkout; returns (sdist, wheel)."""
    src = copy_sources(out / "src")
    dist = out / "dist"
    proc = run([sys.executable, "-m", "build", "--outdir", dist, src], check=False, timeout=1200)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if "No matching distribution" in text or "Could not find a version" in text or "NewConnectionError" in text:
            unavailable(f"python -m build could not get its build requirements: {text.strip().splitlines()[-1]}")
        pytest.fail(f"python -m build failed:\n{text[-4000:]}", pytrace=False)
    (sdist,) = dist.glob("seqpack-*.tar.gz")
    (wheel,) = dist.glob("seqpack-*.whl")
    return sdist, wheel


def light_venv(wheel: Path, venv: Path) -> Path:
    """A new venv with only ``wheel`` and the dependencies it declares, from the package index; returns its bin."""
    run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    proc = run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel], check=False,
               timeout=1200)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if "No matching distribution" in text or "Could not find a version" in text or "NewConnectionError" in text:
            unavailable(f"pip could not install the wheel's dependencies: {text.strip().splitlines()[-1]}")
        pytest.fail(f"pip install {wheel.name} failed:\n{text[-4000:]}", pytrace=False)
    return venv / "bin"


def clean_env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for a command of an installed seqpack: no PYTHONPATH (the checkout stays out of
    sight), ``bin_dir`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def tool_names() -> set[str]:
    """The names of every MCP tool the server registers (importing the tool modules registers them)."""
    import seqpack.faces.mcp.server  # noqa: F401 - registers server_info
    from seqpack.faces.mcp import generate  # noqa: F401 - registers the verbs' tools
    from seqpack.faces.mcp.registry import TOOLS

    return set(TOOLS)

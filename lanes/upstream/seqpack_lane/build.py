"""Build, find and check the upstream lane's virtual environment (Python 3.12, from PyPI only).

The lane is built once and reused while its fingerprint (:func:`pins.fingerprint`) matches the
stamp written after a successful build; a lane built from other pins is rebuilt. Nothing here
imports the upstream packages: the lane's own interpreter does that (``worker.py``).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from seqpack_lane import pins

STAMP = "seqpack-lane.json"
SHIM_MODULE = "seqpack_lane_te_shim"
VENV_ENV = "SEQPACK_UPSTREAM_VENV"
PYTHON_ENV = "SEQPACK_UPSTREAM_PYTHON"
#: What the lane's interpreter must import after the build (and the versions it must report).
_CHECK = (
    "import importlib.metadata as m, json, megatron.bridge, megatron.core, sys;"
    "from megatron.bridge.training.config import ConfigContainer;"
    "print(json.dumps({'python': list(sys.version_info[:2]), 'megatron-bridge': m.version('megatron-bridge'),"
    "'megatron-core': m.version('megatron-core'), 'torch': m.version('torch'),"
    "'transformer_engine': 'transformer_engine' in sys.modules}))"
)


class LaneError(RuntimeError):
    """The lane cannot be built or started; the message is one line saying what is missing."""


@dataclass(frozen=True)
class LaneStatus:
    """Whether a lane venv is ready, and why not."""

    venv: Path
    ready: bool
    reason: str

    @property
    def python(self) -> Path:
        """The lane's interpreter."""
        return self.venv / "bin" / "python"


def default_venv() -> Path:
    """``$SEQPACK_UPSTREAM_VENV``, else ``.venv-upstream`` in a source checkout, else a user cache folder."""
    if os.environ.get(VENV_ENV):
        return Path(os.environ[VENV_ENV]).expanduser()
    root = pins.HERE.parents[2]
    if (root / "pyproject.toml").is_file() and (root / "reference_impl" / "seqpack").is_dir():
        return root / ".venv-upstream"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "seqpack" / "venv-upstream"


def _series(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.stdout.split()
    return (int(parts[0]), int(parts[1])) if out.returncode == 0 and len(parts) == 2 else None


def find_python() -> Path | None:
    """A Python 3.12 interpreter: ``$SEQPACK_UPSTREAM_PYTHON``, ``python3.12`` on PATH, or pyenv's 3.12.x."""
    want = pins.PYTHON_SERIES
    candidates: list[str] = []
    if os.environ.get(PYTHON_ENV):
        candidates.append(os.environ[PYTHON_ENV])
    name = f"python{want[0]}.{want[1]}"
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted(glob.glob(str(pyenv_root / "versions" / f"{want[0]}.{want[1]}.*" / "bin" / name)), reverse=True)
    for candidate in candidates:
        if _series(candidate) == want:
            return Path(candidate)
    return None


def status(venv: Path | None = None) -> LaneStatus:
    """Is the lane at ``venv`` built from the current pins?"""
    venv = venv or default_venv()
    stamp = venv / STAMP
    if not (venv / "bin" / "python").exists():
        return LaneStatus(venv, False, f"no upstream lane at {venv} (run: bash scripts/setup_upstream.sh)")
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return LaneStatus(venv, False, f"the upstream lane at {venv} has no valid {STAMP} (an unfinished build)")
    if recorded.get("fingerprint") != pins.fingerprint():
        return LaneStatus(venv, False, f"the upstream lane at {venv} was built from other pins (rebuild it)")
    return LaneStatus(venv, True, "ready")


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _run(cmd: list[str], what: str, log: Callable[[str], None]) -> None:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise LaneError(f"upstream lane: {what} failed: {tail[0][:300]}")
    log(f"upstream lane: {what} ({time.monotonic() - start:.0f} s)")


def build(venv: Path | None = None, *, python: Path | None = None, log: Callable[[str], None] = print) -> LaneStatus:
    """Build (or reuse) the lane venv; raise :class:`LaneError` with one line when it cannot be built."""
    venv = venv or default_venv()
    current = status(venv)
    if current.ready:
        log(f"upstream lane: reusing {venv} (pins match)")
        return current
    python = python or find_python()
    if python is None:
        raise LaneError("upstream lane: no Python 3.12 interpreter found (looked at $SEQPACK_UPSTREAM_PYTHON, "
                        "python3.12 on PATH and $PYENV_ROOT/versions/3.12.*); install Python 3.12")
    if venv.exists():
        if not (venv / "pyvenv.cfg").is_file():
            raise LaneError(f"upstream lane: {venv} exists and is not a virtual environment; remove it or set "
                            f"{VENV_ENV}")
        shutil.rmtree(venv)
    _run([str(python), "-m", "venv", str(venv)], f"venv with {python}", log)
    vpy = venv / "bin" / "python"
    pip = [str(vpy), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(pins.CONSTRAINTS)]
    for packages, no_deps in pins.STEPS:
        _run(pip + (["--no-deps"] if no_deps else []) + list(packages), "pip install " + " ".join(packages), log)
    site = _site_packages(vpy)
    shutil.copyfile(pins.SHIM, site / f"{SHIM_MODULE}.py")
    (site / f"{SHIM_MODULE}.pth").write_text(f"import {SHIM_MODULE}; {SHIM_MODULE}.install()\n", encoding="utf-8")
    check = subprocess.run([str(vpy), "-c", _CHECK], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        tail = check.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise LaneError(f"upstream lane: megatron.bridge does not import in {venv}: {tail[0][:300]}")
    found = json.loads(check.stdout.strip().splitlines()[-1])
    expected = {"megatron-bridge": pins.BRIDGE_VERSION, "megatron-core": pins.MCORE_VERSION,
                "torch": pins.TORCH_VERSION, "transformer_engine": False}
    wrong = {k: found.get(k) for k, v in expected.items() if found.get(k) != v}
    if wrong:
        raise LaneError(f"upstream lane: unexpected versions in {venv}: {wrong}")
    tmp = venv / (STAMP + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": pins.fingerprint(), "versions": found}, indent=1), encoding="utf-8")
    os.replace(tmp, venv / STAMP)
    log(f"upstream lane: ready at {venv} (megatron-bridge {found['megatron-bridge']}, "
        f"megatron-core {found['megatron-core']}, Python {found['python'][0]}.{found['python'][1]})")
    return status(venv)


def main(argv: list[str] | None = None) -> int:
    """``python -m seqpack_lane [setup|status] [--venv DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m seqpack_lane",
                                     description="build or check the upstream lane (megatron-bridge "
                                                 f"{pins.BRIDGE_VERSION}, megatron-core {pins.MCORE_VERSION})")
    parser.add_argument("action", choices=("setup", "status"), nargs="?", default="status")
    parser.add_argument("--venv", type=Path, default=None, help=f"lane venv (default: {default_venv()})")
    args = parser.parse_args(argv)
    if args.action == "status":
        st = status(args.venv)
        print(st.reason if not st.ready else f"upstream lane ready at {st.venv}")
        return 0 if st.ready else 1
    try:
        build(args.venv, log=lambda line: print(line, file=sys.stderr, flush=True))
    except LaneError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0

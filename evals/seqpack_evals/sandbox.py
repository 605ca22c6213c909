"""Where an agent under evaluation runs: the product installed as a wheel, and a bubblewrap sandbox around the agent.

**The product environment** (:func:`build_product_env`) is a virtual environment made for the run: the seqpack
*wheel* (built from the checkout into a temporary copy, or the one ``--wheel`` names) installed into it, and the
third-party packages seqpack needs taken read-only from the harness's own environment through a folder of links
that leaves out seqpack, the eval harness and the upstream lane (their editable installs point into the checkout).
The agent's ``python`` and ``seqpack`` are this environment's; nothing in it can import the harness or read the
answer key.

**The sandbox** (:func:`bwrap_argv`, ``bwrap`` from the Debian package ``bubblewrap``, the mechanism Codex CLI and
Claude Code use on Linux) gives the agent:

* read-write: its working directory only (a fresh directory outside the run directory);
* read-only: the system (``/usr``, ``/etc`` and the ``/bin``, ``/lib`` links), the Python installation the
  environment was made from, the product environment and the packages it links to, the installed skill (bound over
  ``.claude/skills/<name>`` and ``.agents/skills/<name>`` of the working directory), and the paths the caller adds
  with ``--sandbox-ro`` (recorded in the run and printed on its report);
* its own ``/tmp`` (empty, also its ``HOME``), ``/proc`` of a new PID namespace (it cannot see the harness), a
  minimal ``/dev``, no capabilities, a new session (no terminal), and the network unless ``--no-network``.

Nothing else of the file system exists in there: not the run directory, the answer key, the checkout, ``$HOME`` or
another task's directory. :func:`check_isolation` refuses a sandbox whose read-only paths would contain any of
those. A missing ``bwrap`` is an error with the install line (:func:`find_bwrap`); ``--no-sandbox`` runs the agent
without it, for debugging only (the run records it and every report prints it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from seqpack.core.errors import UsageError

INSTALL_HINT = ("install bubblewrap: apt-get install -y bubblewrap (Debian, Ubuntu), dnf install bubblewrap (Fedora), "
                "or pass --no-sandbox (debugging only: the agent can then read the run and the answer key)")
#: The distributions of this checkout that must never reach the agent's environment (their editable installs point
#: into the checkout): the product comes from its wheel, the harness and the lane not at all.
OWN_DISTRIBUTIONS = ("seqpack", "seqpack_evals", "seqpack-evals", "seqpack_lane", "seqpack-lane", "reference_impl")
ENV_MARKER = "seqpack-product-env.json"
#: The shell profile of a product environment, bound as the agent's ``~/.profile``.
PROFILE = "profile.sh"
#: System paths bound read-only when they exist (a symlink is recreated as the same link).
#: The agent's own /tmp inside the sandbox (an empty tmpfs, not the host's) and its HOME there.
SANDBOX_TMP = "/tmp"
SANDBOX_HOME = SANDBOX_TMP + "/home"
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Environment variables never passed to a sandboxed agent (they point into the harness's environment).
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "CONDA_PREFIX",
               "LD_PRELOAD", "LD_LIBRARY_PATH", "SEQPACK_UPSTREAM_VENV", "OLDPWD", "PWD")


def checkout_root() -> Path:
    """The source checkout this harness runs from (``evals/seqpack_evals/`` lies two levels below it)."""
    return Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------
# The product environment
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProductEnv:
    """A virtual environment holding the seqpack wheel (see the module docstring)."""

    root: Path
    wheel: str
    deps: tuple[str, ...]  # the harness's site-packages folders the dependency links point into
    base_prefix: str  # the Python installation the environment was made from

    @property
    def bin(self) -> Path:
        """Its ``bin`` folder (``python``, ``seqpack``)."""
        return self.root / "bin"

    def to_dict(self) -> dict:
        """JSON-able form (what the run records)."""
        out = asdict(self)
        out["root"] = str(self.root)
        out["deps"] = list(self.deps)
        return out


def _site_dirs() -> list[Path]:
    """The harness's own site-packages folders (where seqpack's dependencies are installed)."""
    paths = sysconfig.get_paths()
    out = []
    for key in ("purelib", "platlib"):
        p = Path(paths[key]).resolve()
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def _own(name: str) -> bool:
    low = name.lower().replace("-", "_")
    if low.startswith("__editable__") or low.endswith(".pth") and "seqpack" in low:
        return True
    stem = low.split("-", 1)[0] if low.endswith((".dist-info", ".egg-info", ".egg-link")) else low
    return stem.removesuffix(".py") in {d.replace("-", "_") for d in OWN_DISTRIBUTIONS}


def _link_dependencies(env_root: Path, sites: Sequence[Path]) -> Path:
    """A folder of links to every entry of ``sites`` except this checkout's own distributions, added to the
    environment's path by a ``.pth`` file (``site.addsitedir``, so the packages' own ``.pth`` files work)."""
    farm = env_root / "deps"
    farm.mkdir()
    for site in sites:
        for entry in sorted(site.iterdir()):
            if _own(entry.name) or (farm / entry.name).exists():
                continue
            (farm / entry.name).symlink_to(entry)
    purelib = Path(subprocess.run([str(env_root / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "_seqpack_product_deps.pth").write_text(f"import site; site.addsitedir({str(farm)!r})\n",
                                                         encoding="utf-8")
    return farm


def build_wheel(out: Path, source: Path | None = None) -> Path:
    """Build the seqpack wheel of ``source`` (default: this checkout) from a copy (the checkout gets no build
    files), into ``out``; returns the wheel's path."""
    source = source or checkout_root()
    copy = out / "src"
    copy.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "reference_impl", "skills"):
        path = source / name
        if path.is_dir():
            shutil.copytree(path, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        elif path.is_file():
            shutil.copy2(path, copy / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-w", str(out / "dist"), str(copy)],
                          capture_output=True, text=True, check=False)
    wheels = sorted((out / "dist").glob("seqpack-*.whl")) if (out / "dist").is_dir() else []
    if proc.returncode != 0 or not wheels:
        raise UsageError(f"could not build the seqpack wheel: {(proc.stderr or proc.stdout).strip()[-400:]}",
                         fix="pass --wheel with a built seqpack wheel")
    shutil.rmtree(copy)
    return wheels[0]


def build_product_env(dest: str | os.PathLike[str], *, wheel: str | os.PathLike[str] | None = None) -> ProductEnv:
    """Make the product environment at ``dest`` (a new folder): the wheel (built from the checkout unless given)
    installed, the dependencies linked (module docstring)."""
    root = Path(dest).resolve()
    if root.exists():
        raise UsageError(f"the product environment folder {root} already exists", file=str(root))
    root.mkdir(parents=True)
    if wheel is None:
        with tempfile.TemporaryDirectory(prefix="seqpack-wheel-") as tmp:
            built = build_wheel(Path(tmp))
            kept = root / built.name
            shutil.copy2(built, kept)
    else:
        kept = Path(wheel)
        if not kept.is_file() or not kept.name.endswith(".whl"):
            raise UsageError(f"--wheel must name a seqpack wheel file, got {wheel}", file=str(wheel))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True,
                   capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "venv" / "bin" / "python"), "install",
                           "--quiet", "--no-deps", "--no-index", "--disable-pip-version-check", str(kept)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UsageError(f"could not install {kept.name}: {proc.stderr.strip()[-400:]}", file=str(kept))
    sites = _site_dirs()
    _link_dependencies(root / "venv", sites)
    if kept.parent == root:
        kept.unlink()  # the agent needs the installed package, not the archive
    env = ProductEnv(root / "venv", kept.name, tuple(str(s) for s in sites), sys.base_prefix)
    (root / ENV_MARKER).write_text(json.dumps(env.to_dict(), indent=2) + "\n", encoding="utf-8")
    # a login shell (bash --login, as agent tools start it) resets PATH from /etc/profile: ~/.profile puts it back
    (root / PROFILE).write_text(f'export PATH="{env.bin}:$PATH"\nexport VIRTUAL_ENV="{env.root}"\n', encoding="utf-8")
    return env


def load_product_env(path: str | os.PathLike[str]) -> ProductEnv:
    """A product environment :func:`build_product_env` (or ``seqpack eval env``) made earlier."""
    marker = Path(path) / ENV_MARKER
    if not marker.is_file():
        raise UsageError(f"{path} is not a product environment (no {ENV_MARKER})", file=str(path),
                         fix="make one with: seqpack eval env --out DIR")
    data = json.loads(marker.read_text(encoding="utf-8"))
    return ProductEnv(Path(data["root"]), data["wheel"], tuple(data["deps"]), data["base_prefix"])


# ------------------------------------------------------------------------------------------------
# The sandbox
# ------------------------------------------------------------------------------------------------


def find_bwrap() -> str:
    """The ``bwrap`` executable, or a UsageError with the install line."""
    found = shutil.which("bwrap")
    if found is None:
        raise UsageError("bubblewrap (bwrap) is not installed; the agent cannot be sandboxed", fix=INSTALL_HINT)
    return found


def check_bwrap(bwrap: str) -> None:
    """Start one trivial sandbox, so a bwrap that cannot work here (no user namespaces) fails before any task."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", *_system_args(), "--proc", "/proc",
            "--dev", "/dev", "--", "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise UsageError(f"bubblewrap cannot start a sandbox here: {proc.stderr.strip()[-300:] or proc.returncode}",
                         fix="allow unprivileged user namespaces (kernel.unprivileged_userns_clone=1), run as a user "
                             "bwrap works for, or pass --no-sandbox (debugging only)")


def _system_args() -> list[str]:
    out: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            out += ["--ro-bind", path, path]
    return out


@dataclass
class Sandbox:
    """How agents run: inside bwrap (``enabled``) or not, with or without network, in which product environment,
    with which extra read-only paths."""

    env: ProductEnv
    enabled: bool = True
    network: bool = True
    read_only: list[str] = field(default_factory=list)
    bwrap: str | None = None

    def describe(self) -> dict:
        """What the run records (``run.json``: ``sandbox``)."""
        return {"enabled": self.enabled, "mechanism": "bubblewrap" if self.enabled else None,
                "bwrap": self.bwrap, "network": self.network, "read_only_extra": list(self.read_only),
                "product_env": self.env.to_dict()}

    def read_only_paths(self) -> list[str]:
        """Every host path the agent can read (besides its working directory and its own /tmp)."""
        paths = [p for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p)]
        paths += [self.env.base_prefix, str(self.env.root), *self.env.deps, *self.read_only]
        return list(dict.fromkeys(os.path.realpath(p) for p in paths))


def check_isolation(sandbox: Sandbox, secret: Iterable[str | os.PathLike[str]]) -> None:
    """Refuse a sandbox that would let the agent read one of ``secret`` (the run directory, the answer key, the
    checkout): none may lie inside a path bound read-only (``--sandbox-ro`` may add one only explicitly)."""
    bound = sandbox.read_only_paths()
    for item in secret:
        real = os.path.realpath(item)
        for path in bound:
            if path in sandbox.read_only:
                continue  # the caller chose to show it (the oracle reads the key); the run records it
            if real == path or real.startswith(path.rstrip("/") + "/"):
                raise UsageError(f"the sandbox would show the agent {item}: it lies inside {path}, which the agent "
                                 "reads", file=str(item), fix="keep the checkout, the answer key and the run "
                                 "directory outside the system folders and the Python installation")


def bwrap_argv(sandbox: Sandbox, argv: Sequence[str], workdir: Path, *, skill: Path | None, skill_homes: Sequence[str],
               home: str) -> list[str]:
    """The bwrap command line that runs ``argv`` in ``workdir`` (module docstring)."""
    assert sandbox.bwrap is not None
    out = [sandbox.bwrap, "--unshare-all", *(["--share-net"] if sandbox.network else []), "--die-with-parent",
           "--new-session", "--cap-drop", "ALL", *_system_args(), "--proc", "/proc", "--dev", "/dev",
           "--tmpfs", SANDBOX_TMP, "--dir", home]  # /tmp first: the binds below it must not be hidden by it
    for path in dict.fromkeys([sandbox.env.base_prefix, *sandbox.env.deps, str(sandbox.env.root.parent),
                               *sandbox.read_only]):
        if not any(path == s or path.startswith(s + "/") for s in SYSTEM_PATHS):
            out += ["--ro-bind", path, path]
    profile = sandbox.env.root.parent / PROFILE
    if profile.is_file():
        out += ["--ro-bind", str(profile), f"{home}/.profile"]
    out += ["--bind", str(workdir), str(workdir)]
    if skill is not None:
        for rel in skill_homes:
            out += ["--ro-bind", str(skill), str(workdir / rel)]
    out += ["--chdir", str(workdir), "--", *argv]
    return out


def agent_environment(base: dict[str, str], sandbox: Sandbox, *, home: str, tmp: str) -> dict[str, str]:
    """The environment an agent gets: the caller's (API keys and the like), without the variables that point into
    the harness's environment, with the product environment first on ``PATH`` and a private ``HOME``."""
    env = {k: v for k, v in base.items() if k not in DROPPED_ENV}
    env["PATH"] = os.pathsep.join([str(sandbox.env.bin), "/usr/local/bin", "/usr/bin", "/bin"])
    env["HOME"] = home
    env["TMPDIR"] = tmp
    env["VIRTUAL_ENV"] = str(sandbox.env.root)
    return env


__all__ = ["INSTALL_HINT", "ProductEnv", "SANDBOX_HOME", "SANDBOX_TMP", "Sandbox", "agent_environment",
           "build_product_env", "build_wheel", "bwrap_argv", "check_bwrap", "check_isolation", "checkout_root",
           "find_bwrap", "load_product_env"]

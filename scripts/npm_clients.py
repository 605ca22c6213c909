#!/usr/bin/env python3
"""Install the real agent and MCP clients the tests drive, from the npm registry, pinned and cached.

Each client is installed once with the ordinary npm client (``npm install --prefix``) into
``.seqpack-cache/npm/<name>-<version>/`` (git-ignored), with npm's cache and HOME inside
``.seqpack-cache/npm/`` too, so nothing outside the checkout is written; later calls reuse it.
Prints the path of each client's executable; exits 1 when one cannot be installed.

    python scripts/npm_clients.py claude conformance inspector

``node`` is a Node.js 22 build from the npm registry (package ``node``), used by the clients that
need a newer Node than the system one (the conformance suite needs ``fs.globSync``, Node >= 22).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".seqpack-cache" / "npm"


@dataclass(frozen=True)
class Client:
    """One npm package, its pinned version, the executable it installs and the Node major it needs."""

    package: str
    version: str
    executable: str
    node_major: int = 18


#: The pinned clients (the versions the tests and the conformance baseline were made with).
CLIENTS: dict[str, Client] = {
    "claude": Client("@anthropic-ai/claude-code", "2.1.332", "claude"),
    "codex": Client("@openai/codex", "0.171.0", "codex"),
    "conformance": Client("@modelcontextprotocol/conformance", "0.2.0-alpha.12", "conformance", node_major=22),
    "inspector": Client("@modelcontextprotocol/inspector", "2.12.0", "mcp-inspector", node_major=20),
    "node": Client("node", "22.23.3", "node"),
}


class InstallError(RuntimeError):
    """A client could not be installed (no npm, no registry, a failed install)."""


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(home), "npm_config_cache": str(CACHE / "_cache"),
            "npm_config_update_notifier": "false", "npm_config_fund": "false", "npm_config_audit": "false"}


def folder(name: str) -> Path:
    """Where client ``name`` is (or would be) installed."""
    client = CLIENTS[name]
    return CACHE / f"{name}-{client.version}"


def executable(name: str) -> Path:
    """The installed executable of ``name`` (it may not exist yet)."""
    return folder(name) / "node_modules" / ".bin" / CLIENTS[name].executable


def install(name: str, *, timeout: float = 600) -> Path:
    """Install client ``name`` (once) and return its executable; InstallError when that fails."""
    if name not in CLIENTS:
        raise InstallError(f"unknown client {name!r}; known: {', '.join(CLIENTS)}")
    client, target, exe = CLIENTS[name], folder(name), executable(name)
    marker = target / ".installed.json"
    if marker.is_file() and exe.exists():
        return exe
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not on PATH (install Node.js and npm, e.g. apt-get install nodejs npm)")
    home = CACHE / "_home"
    home.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    spec = f"{client.package}@{client.version}"
    try:
        proc = subprocess.run([npm, "install", "--prefix", str(target), "--no-save", "--no-package-lock", spec],
                              capture_output=True, text=True, timeout=timeout, env=_env(home), cwd=str(target))
    except subprocess.TimeoutExpired:
        raise InstallError(f"npm install {spec} took longer than {timeout:g} s") from None
    if proc.returncode != 0 or not exe.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise InstallError(f"npm install {spec} failed (exit {proc.returncode}): {' | '.join(tail)}")
    marker.write_text(json.dumps({"package": client.package, "version": client.version}) + "\n")
    return exe


def _node_major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        return int(out.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def node_for(name: str) -> Path:
    """A Node.js that can run client ``name``: the system one when new enough, else the pinned ``node``."""
    system = shutil.which("node")
    if system is not None and _node_major(system) >= CLIENTS[name].node_major:
        return Path(system)
    return install("node")


def command(name: str) -> list[str]:
    """The argv prefix that runs client ``name`` (installed on demand): a JavaScript entry point under a
    Node.js it can use, a native executable (Claude Code ships one) as it is."""
    exe = install(name).resolve()
    if exe.suffix in (".js", ".mjs", ".cjs"):
        return [str(node_for(name)), str(exe)]
    return [str(exe)]


def main(argv: list[str]) -> int:
    """Install the named clients (all by default) and print their executables."""
    status = 0
    for name in argv or list(CLIENTS):
        try:
            print(f"{name}: {install(name)}")
        except InstallError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

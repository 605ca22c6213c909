"""Real clients against the real artifacts: Claude Code, Codex, the official MCP conformance suite and the MCP
Inspector, each installed from npm at test time (``scripts/npm_clients.py``, pinned, cached under
``.seqpack-cache/npm/``) and run with an isolated HOME.

Claude Code validates the repository's marketplace and plugin, installs the plugin from that marketplace and
shows its skill and its MCP server Connected (the server from the light, torch-free install); Codex installs
the plugin from ``.agents/plugins/marketplace.json``; the conformance suite runs against
``seqpack mcp --transport http`` with the committed baselines of expected failures
(``tests/data/mcp_conformance/``), so any new failure fails; the Inspector lists the tools of the light install
and verifies the skill's digests. Where a client cannot be installed the test is skipped, and in CI
(``CI=1`` or ``SEQPACK_CI=1``) it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from seqpack.faces.install_skill import SKILL_NAME
from tests.release_env import ROOT, client, run, tool_names

pytestmark = pytest.mark.slow  # installs and starts clients and servers

BASELINES = ROOT / "tests" / "data" / "mcp_conformance"
ERAS = ("2026-07-28", "2025-11-25")
TOKEN = "conformance-token-0123456789"


def _env(home: Path, path_first: Path | None = None) -> dict[str, str]:
    """An isolated HOME (no client configuration of the machine is read or written) and, first on PATH, the
    directory whose ``seqpack`` the clients should start."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CODEX_HOME")}
    env.update(HOME=str(home), DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
               NO_COLOR="1")
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """``seqpack mcp --transport http`` from an installed ``bin`` directory, until the test ends."""

    def __init__(self, bin_dir: Path, root: Path, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = (root / f"server-{self.port}.log").open("w+")
        self.proc = subprocess.Popen([bin_dir / "seqpack", "mcp", "--transport", "http", "--port", str(self.port),
                                      "--root", str(root), "--lifetime", "600", *extra],
                                     stdout=subprocess.DEVNULL, stderr=self.log, cwd=str(root),
                                     env=_env(root / "home", bin_dir))
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the HTTP server did not start:\n{self.text()}")
            time.sleep(0.2)
        time.sleep(0.5)  # the listening socket is bound before uvicorn finishes starting

    def text(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def http_server(light_install, tmp_path):
    servers: list[HttpServer] = []

    def start(*extra: str) -> HttpServer:
        servers.append(HttpServer(light_install, tmp_path, *extra))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


# ------------------------------------------------------------------------------------------------
# Claude Code
# ------------------------------------------------------------------------------------------------


def test_claude_code_validates_the_marketplace_and_the_plugin(tmp_path):
    claude = client("claude")
    env = _env(tmp_path / "home")
    market = run([*claude, "plugin", "validate", ".", "--json", "--strict"], cwd=ROOT, env=env, check=False)
    report = json.loads(market.stdout)
    assert market.returncode == 0 and report["success"] is True, market.stdout
    assert report["manifest"]["type"] == "marketplace" and report["manifest"]["errors"] == []
    plugin = run([*claude, "plugin", "validate", "plugins/seqpack", "--json", "--strict", "--profile", "directory"],
                 cwd=ROOT, env=env, check=False)
    report = json.loads(plugin.stdout)
    assert plugin.returncode == 0 and report["success"] is True, plugin.stdout
    assert report["manifest"]["warnings"] == [] and report["directory"]["findings"] == []
    assert report["directory"]["incomplete"] is False
    # negative control: a plugin whose manifest is broken is refused
    broken = tmp_path / "broken"
    shutil.copytree(ROOT / "plugins" / "seqpack", broken)
    manifest = json.loads((broken / ".claude-plugin" / "plugin.json").read_text())
    manifest["name"] = "Not A Name"
    (broken / ".claude-plugin" / "plugin.json").write_text(json.dumps(manifest))
    assert run([*claude, "plugin", "validate", broken, "--strict"], env=env, check=False).returncode == 1


def test_claude_code_installs_the_plugin_and_its_server_connects(light_install, tmp_path):
    claude = client("claude")
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    env = _env(home, light_install)
    added = run([*claude, "plugin", "marketplace", "add", ROOT], cwd=project, env=env)
    assert "seqpack" in added.stdout + added.stderr
    installed = run([*claude, "plugin", "install", "seqpack@seqpack", "--json"], cwd=project, env=env)
    assert json.loads(installed.stdout.strip().splitlines()[-1])["outcome"] == "ok"
    details = " ".join(run([*claude, "plugin", "details", "seqpack@seqpack"], cwd=project, env=env).stdout.split())
    assert f"Skills (1) {SKILL_NAME}" in details and "MCP servers (1) seqpack" in details
    listed = run([*claude, "mcp", "list"], cwd=project, env=env, timeout=300).stdout
    line = next(ln for ln in listed.splitlines() if ln.startswith("plugin:seqpack:seqpack:"))
    assert "seqpack mcp --root ." in line and "Connected" in line, listed
    # negative control: without the seqpack command on PATH the same server cannot connect
    bare = {**env, "PATH": os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                           if not (Path(p) / "seqpack").exists())}
    failed = run([*claude, "mcp", "list"], cwd=project, env=bare, timeout=300).stdout
    line = next(ln for ln in failed.splitlines() if ln.startswith("plugin:seqpack:seqpack:"))
    assert "Connected" not in line and "Failed" in line, failed
    assert not (project / ".mcp.json").exists()  # nothing written into the project


def test_claude_code_connects_the_registered_server_over_stdio_and_http(light_install, http_server, tmp_path):
    claude = client("claude")
    project = tmp_path / "project"
    project.mkdir()
    env = _env(tmp_path / "home")
    run([*claude, "mcp", "add", "seqpack", "--", light_install / "seqpack", "mcp", "--root", project], cwd=project,
        env=env)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    server = http_server("--token-file", str(token))
    run([*claude, "mcp", "add", "--transport", "http", "seqpack-http", server.url, "--header",
         f"Authorization: Bearer {TOKEN}"], cwd=project, env=env)
    run([*claude, "mcp", "add", "--transport", "http", "seqpack-no-token", server.url], cwd=project, env=env)
    listed = run([*claude, "mcp", "list"], cwd=project, env=env, timeout=300).stdout
    lines = {ln.split(":", 1)[0]: ln for ln in listed.splitlines() if ln.startswith("seqpack")}
    assert "Connected" in lines["seqpack"] and "Connected" in lines["seqpack-http"], listed
    assert "Connected" not in lines["seqpack-no-token"], listed  # 401 without the bearer token
    assert TOKEN not in server.text()


# ------------------------------------------------------------------------------------------------
# Codex
# ------------------------------------------------------------------------------------------------


def test_codex_installs_the_plugin_from_the_marketplace(tmp_path):
    codex = client("codex")
    project = tmp_path / "project"
    project.mkdir()
    env = _env(tmp_path / "home")
    run([*codex, "plugin", "marketplace", "add", ROOT], cwd=project, env=env)
    listed = json.loads(run([*codex, "plugin", "list", "--json", "--available"], cwd=project, env=env).stdout)
    (available,) = [p for p in listed["available"] if p["pluginId"] == "seqpack@seqpack"]
    assert Path(available["source"]["path"]).resolve() == (ROOT / "plugins" / "seqpack").resolve()
    result = json.loads(run([*codex, "plugin", "add", "seqpack@seqpack", "--json"], cwd=project, env=env).stdout)
    installed = Path(result["installedPath"])
    assert installed.is_relative_to(tmp_path / "home")
    skill = installed / "skills" / SKILL_NAME
    source = ROOT / "skills" / SKILL_NAME
    assert (skill / "SKILL.md").read_bytes() == (source / "SKILL.md").read_bytes()
    assert not [p for p in installed.rglob("*") if p.is_symlink()]
    servers = json.loads(run([*codex, "mcp", "list", "--json"], cwd=project, env=env).stdout)
    (server,) = [s for s in servers if s["name"] == "seqpack"]
    assert server["enabled"] and server["transport"]["command"] == "seqpack"
    assert server["transport"]["args"] == ["mcp", "--root", "."]


# ------------------------------------------------------------------------------------------------
# The official MCP conformance suite
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_conformance_suite_passes_against_its_baseline(http_server, tmp_path, era):
    conformance = client("conformance")
    server = http_server()
    env = _env(tmp_path / "home")
    baseline = BASELINES / f"{era}.yml"
    proc = run([*conformance, "server", "--url", server.url, "--requirements", era, "--expected-failures", baseline,
                "-o", tmp_path / "results"], env=env, check=False, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Baseline check passed" in out, out[-4000:]
    # negative control: without the baseline the same run fails, so a new failure would fail it too
    empty = tmp_path / "empty.yml"
    empty.write_text("server: []\n")
    bare = run([*conformance, "server", "--url", server.url, "--requirements", era, "--expected-failures", empty],
               env=env, check=False, timeout=900)
    assert bare.returncode == 1 and "Unexpected failures" in bare.stdout + bare.stderr


@pytest.mark.parametrize("scenario, least", [("sep-2640-skills-enumeration", 30), ("sep-2640-skills-manifest", 5)])
def test_conformance_skills_extension_scenarios_pass(http_server, tmp_path, scenario, least):
    conformance = client("conformance")
    server = http_server()
    out_dir = tmp_path / "results"
    proc = run([*conformance, "server", "--url", server.url, "--scenario", scenario, "-o", out_dir],
               env=_env(tmp_path / "home"), check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (checks_file,) = out_dir.glob(f"server-{scenario}-*/checks.json")
    checks = json.loads(checks_file.read_text())
    assert not [c for c in checks if c["status"] in ("FAILURE", "WARNING", "SKIPPED")], checks
    assert sum(c["status"] == "SUCCESS" for c in checks) >= least  # the scenario ran, it was not skipped


# ------------------------------------------------------------------------------------------------
# The MCP Inspector
# ------------------------------------------------------------------------------------------------


def test_inspector_lists_the_tools_of_the_light_install(light_install, tmp_path):
    inspector = client("inspector")
    env = _env(tmp_path / "home", light_install)
    proc = run([*inspector, "--cli", light_install / "seqpack", "mcp", "--root", tmp_path, "--method", "tools/list",
                "--format", "json"], env=env, cwd=tmp_path, timeout=300)
    tools = {t["name"] for t in json.loads(proc.stdout)["result"]["tools"]}
    assert tools == tool_names()


def test_inspector_verifies_the_skill_digests(http_server, tmp_path):
    inspector = client("inspector")
    server = http_server()
    proc = run([*inspector, "--cli", server.url, "--protocol-era", "modern", "--method", "skills/list", "--verify",
                "--require-digests", "--format", "json"], env=_env(tmp_path / "home"), cwd=tmp_path, timeout=300,
               check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[0])
    assert report["uri"] == f"skill://{SKILL_NAME}/SKILL.md" and report["conformance"] == []
    files = report["files"]
    assert len(files) >= 10 and all(f["status"] == "verified" and f["actualDigest"] == f["expectedDigest"]
                                    for f in files)

"""The skill bundle follows the Agent Skills spec and stays clean for static skill scanners."""

import os
import re
import stat
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "skills" / "megatron-sequence-packing"
ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
ALLOWED_ROOT = {"SKILL.md", "README.md", "agents", "references", "scripts", "assets", "evals", "tests", "tools",
                "config", "skill-card.md", "BENCHMARK.md", "skill.oms.sig", "LICENSE.txt"}
#: paths that exist only in the seqpack source repository, never in an installed bundle
REPO_ONLY = re.compile(r"(?<![\w./-])(?:bench|docs|tests|seqpack|evals/files)/[\w./-]+")
CODE_BLOCK = re.compile(r"```.*?```", re.S)


def _split(text):
    assert text.startswith("---\n"), "SKILL.md must start with YAML frontmatter"
    head, body = text[4:].split("\n---\n", 1)
    return head, body


@pytest.fixture(scope="module")
def skill():
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    head, body = _split(text)
    return yaml.safe_load(head), head, body


def test_frontmatter_follows_the_spec(skill):
    meta, head, _ = skill
    assert set(meta) <= ALLOWED_KEYS, set(meta) - ALLOWED_KEYS
    name = meta["name"]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and len(name) <= 64
    assert name == SKILL.name
    for reserved in ("anthropic", "claude"):
        assert reserved not in name
    desc = meta["description"]
    assert 1 <= len(desc) <= 1024 and "<" not in desc and ">" not in desc
    assert "Use when" in desc and "Do not use" in desc  # when to use it, and when not
    assert 1 <= len(meta["compatibility"]) <= 500
    assert isinstance(meta["metadata"], dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta["metadata"].items())
    assert re.fullmatch(r"[^<>]+ <[^@\s]+@[^>\s]+>", meta["metadata"]["author"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["metadata"]["version"])
    assert meta["metadata"]["tags"]
    # allowed-tools space-separated, as the Agent Skills spec says (SkillSpector >= 2.11 reads this form), never
    # YAML flow style or commas
    tools = meta["allowed-tools"]
    assert isinstance(tools, str) and "[" not in head.split("allowed-tools:")[1].splitlines()[0]
    assert "," not in tools and tools.split() == ["Read", "Bash"]
    # a wheel or plugin install, not a checkout: no editable install, no repository script
    assert "pip install seqpack" in meta["compatibility"] and "plugin" in meta["compatibility"]
    assert "-e ." not in meta["compatibility"] and "setup.sh" not in meta["compatibility"]


def test_body_sections_and_size(skill):
    _, _, body = skill
    assert body.lstrip().startswith("# ")
    for section in ("## Purpose", "## Prerequisites", "## Instructions", "## Available Scripts", "## Examples",
                    "## Gotchas", "## Limitations", "## Troubleshooting"):
        assert f"\n{section}\n" in body, section
    assert "| Script | Purpose | Arguments |" in body
    assert len((SKILL / "SKILL.md").read_text().splitlines()) < 500


def test_bundle_root_has_only_expected_entries():
    assert {p.name for p in SKILL.iterdir()} <= ALLOWED_ROOT


def _links(path):
    text = CODE_BLOCK.sub("", path.read_text(encoding="utf-8"))
    return re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)


def test_every_link_resolves_inside_the_bundle_and_every_reference_is_linked():
    pages = [SKILL / "SKILL.md", *sorted((SKILL / "references").glob("*.md"))]
    for page in pages:
        for target in _links(page):
            assert not target.startswith(("http:", "https:")), f"{page.name} links outside: {target}"
            resolved = (page.parent / target).resolve()
            assert resolved.is_file() and SKILL.resolve() in resolved.parents, f"{page.name}: {target}"
    linked = {(SKILL / t).resolve() for t in _links(SKILL / "SKILL.md")}
    for ref in (SKILL / "references").glob("*.md"):
        assert ref.resolve() in linked, f"{ref.name} is not linked from SKILL.md"


def test_no_unresolvable_file_like_tokens_in_skill_body(skill):
    """Scanners read backticked dotted tokens and slash words as file references."""
    _, _, body = skill
    prose = CODE_BLOCK.sub("", body)
    for token in re.findall(r"`([^`]+)`", prose):
        if "." in token or "/" in token:
            assert (SKILL / token.split()[0]).exists(), f"backticked {token!r} is not a file in the bundle"
    for word in re.findall(r"(?<![\w/.(\[])([A-Za-z][\w-]*/[\w.-]+(?:/[\w.-]+)*)", prose):
        assert (SKILL / word).exists() or (SKILL / word.split()[0]).exists(), f"slash word {word!r}"


def test_scripts_are_executable_and_read_no_environment():
    scripts = sorted((SKILL / "scripts").glob("*.py"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env python3")
        assert os.stat(script).st_mode & stat.S_IXUSR
        assert "environ" not in text and "getenv" not in text


def test_codex_agent_file_declares_the_stdio_server_install_skill_registers(tmp_path):
    from seqpack.faces.install_skill import SERVER_NAME, TRANSPORT, install_skill

    data = yaml.safe_load((SKILL / "agents" / "openai.yaml").read_text())
    iface = data["interface"]
    assert 25 <= len(iface["short_description"]) <= 64
    assert "$megatron-sequence-packing" in iface["default_prompt"]
    (tool,) = data["dependencies"]["tools"]
    assert tool["type"] == "mcp" and tool["value"] == SERVER_NAME and tool["transport"] == TRANSPORT == "stdio"
    assert tool["command"] == "seqpack" and tool["args"][:2] == ["mcp", "--root"]
    printed = install_skill("codex", project=tmp_path).mcp_command
    assert printed.startswith(f"codex mcp add {SERVER_NAME} -- ") and printed.split(" -- ", 1)[1].split()[-3:] == [
        "mcp", "--root", str(tmp_path)]
    start = printed.split(" -- ", 1)[1].split()[:-3]  # the installed console script, else python -m seqpack
    assert start in ([str(Path(sys.executable).parent / "seqpack")], [sys.executable, "-m", "seqpack"])


def test_bundle_ships_text_only_and_no_repo_only_paths():
    """Scanners flag binaries (embedded NUL); an installed copy cannot follow paths of the source repository."""
    from seqpack_evals.tasks import is_text_file

    for path in SKILL.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert is_text_file(path), f"{path.relative_to(SKILL)} is not a text file"
            if path.suffix in (".md", ".yaml", ".py"):
                hits = REPO_ONLY.findall(path.read_text(encoding="utf-8"))
                assert hits == [], f"{path.relative_to(SKILL)} names repo-only paths: {hits}"
    assert REPO_ONLY.findall("see bench/gpu_check.py and docs/compatibility.md") == ["bench/gpu_check.py",
                                                                                   "docs/compatibility.md"]
    assert (SKILL / "LICENSE.txt").read_text() == (ROOT / "LICENSE").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()


def test_repo_client_links_point_at_the_skills():
    for client in (".claude", ".agents"):
        link = ROOT / client / "skills"
        assert link.is_symlink() and link.resolve() == (ROOT / "skills").resolve()


def test_wrapper_script_prints_json(tmp_path):
    import json
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(SKILL / "scripts" / "seqpack_json.py"), "align", "--tp", "4", "--cp", "2",
                          "--sp"], capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out)["pad_seq_to_mult"] == 8
    bad = subprocess.run([sys.executable, str(SKILL / "scripts" / "seqpack_json.py"), "rm"], capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_install_skill(tmp_path, capsys):
    from seqpack.faces.cli import main

    assert main(["install-skill", "--client", "claude", "--project", str(tmp_path), "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    dest = Path(out["destination"])
    assert dest == tmp_path / ".claude" / "skills" / "megatron-sequence-packing"
    assert (dest / "SKILL.md").read_text() == (SKILL / "SKILL.md").read_text()
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert "claude mcp add" in out["mcp_command"] and str(tmp_path) in out["mcp_command"]
    assert main(["install-skill", "--client", "claude", "--project", str(tmp_path)]) == 2
    assert "already installed" in capsys.readouterr().err
    assert main(["install-skill", "--client", "codex", "--project", str(tmp_path)]) == 0
    assert (tmp_path / ".agents" / "skills" / "megatron-sequence-packing" / "SKILL.md").is_file()
    assert main(["install-skill", "--client", "claude", "--project", str(tmp_path), "--force"]) == 0
    # a project folder that does not exist yet is created
    fresh = tmp_path / "new" / "project"
    assert main(["install-skill", "--client", "agents", "--project", str(fresh)]) == 0
    assert (fresh / ".agents" / "skills" / "megatron-sequence-packing" / "SKILL.md").is_file()
    (tmp_path / "a-file").write_text("x")
    assert main(["install-skill", "--client", "agents", "--project", str(tmp_path / "a-file")]) == 2


def test_skill_ships_no_eval_answers():
    """The bundle holds no task set (answers stay in the repository's evals/; tests/test_evals_leaks.py)."""
    assert not (SKILL / "evals").exists()


def test_skill_names_every_mcp_tool_and_every_json_script_command(skill):
    """SKILL.md lists every registered MCP tool and documents every command the JSON wrapper accepts."""
    import importlib
    import pkgutil

    import seqpack.faces.mcp.server  # noqa: F401  (registers server_info)
    import seqpack.faces.mcp as mcp_support
    from seqpack.faces.mcp.registry import TOOLS

    for mod in pkgutil.iter_modules(mcp_support.__path__):
        importlib.import_module(f"seqpack.faces.mcp.{mod.name}")
    _, _, body = skill
    listed = body.split("The MCP server offers the same as tools:", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"[a-z_]+_[a-z_]+", listed))
    assert TOOLS and named == set(TOOLS), (set(TOOLS) - named, named - set(TOOLS))

    wrapper = (SKILL / "scripts" / "seqpack_json.py").read_text(encoding="utf-8")
    commands = re.search(r"COMMANDS = \(([^)]*)\)", wrapper).group(1)
    commands = set(re.findall(r'"([a-z-]+)"', commands))
    rows = set(re.findall(r"^\| scripts/seqpack_json\.py ([a-z-]+) \|", body, re.M))
    assert commands and rows == commands, (commands - rows, rows - commands)


def test_tests_never_see_the_real_home(tmp_path):
    """conftest gives every test an empty HOME, so `install-skill --user` in a test cannot touch the real one."""
    from seqpack.faces.cli import main

    home = Path.home()
    assert os.environ.get("SEQPACK_REAL_HOME") is not None and str(home) != os.environ["SEQPACK_REAL_HOME"]
    assert home.name.startswith("seqpack-test-home-")
    assert main(["install-skill", "--client", "agents", "--user"]) == 0
    assert (home / ".agents" / "skills" / "megatron-sequence-packing" / "SKILL.md").is_file()

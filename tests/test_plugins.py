"""The distribution files for agent clients and the MCP registry: generated from one source and never stale,
one version number everywhere, and each file in the shape its consumer documents.

The real clients (Claude Code, Codex, the conformance suite, the Inspector) run in tests/test_clients.py;
here are the fast, offline checks.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import struct
import tomllib
from pathlib import Path

import anyio
import jsonschema
import pytest
import yaml
from mcp import Client

from seqpack import __version__
from seqpack.faces.mcp.server import build_server
from seqpack.faces.install_skill import SKILL_NAME, read_frontmatter, skill_files

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "seqpack"
SKILL = ROOT / "skills" / SKILL_NAME


def _builder():
    spec = importlib.util.spec_from_file_location("seqpack_build_plugins", ROOT / "scripts" / "build_plugins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------
# One source: the plugin copy and the manifests are what scripts/build_plugins.py writes
# ------------------------------------------------------------------------------------------------


def test_generated_files_are_up_to_date():
    builder = _builder()
    files = builder.expected_files()
    problems = builder._differences(files)
    assert problems == [], "\n".join(problems) + "\nrun: python scripts/build_plugins.py"
    # negative controls: a changed byte, a lost executable bit and a missing file are each reported
    some = next(rel for rel in files if rel.name == "SKILL.md")
    script = next(rel for rel, (_, x) in files.items() if x)
    broken = {**files, some: (files[some][0] + b"x", False), script: (files[script][0], False),
              Path("plugins/seqpack/missing.md"): (b"", False)}
    found = builder._differences(broken)
    assert any(str(some) in p and "differs" in p for p in found)
    assert any(str(script) in p and "executable" in p for p in found)
    assert any("missing.md" in p and "missing" in p for p in found)


def test_the_plugin_carries_every_skill_file_as_a_real_file():
    copy_root = PLUGIN / "skills" / SKILL_NAME
    assert skill_files(copy_root) == skill_files(SKILL)  # evals/ included: whatever the bundle holds
    for rel in skill_files(SKILL):
        assert (copy_root / rel).read_bytes() == (SKILL / rel).read_bytes(), rel
    assert not [p for p in PLUGIN.rglob("*") if p.is_symlink()]
    assert not [p for p in (ROOT / ".claude-plugin").rglob("*") if p.is_symlink()]
    assert not (ROOT / ".agents" / "plugins").is_symlink()


def test_skill_files_leave_out_dotfiles_symlinks_and_caches(tmp_path):
    (tmp_path / "SKILL.md").write_text("x")
    (tmp_path / "scripts" / "__pycache__").mkdir(parents=True)
    (tmp_path / "scripts" / "run.py").write_text("x")
    (tmp_path / "scripts" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"x")
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / "link.md").symlink_to(tmp_path / "SKILL.md")
    (tmp_path / "linked").symlink_to(tmp_path / "scripts", target_is_directory=True)
    assert skill_files(tmp_path) == ["SKILL.md", "scripts/run.py"]


# ------------------------------------------------------------------------------------------------
# One version number
# ------------------------------------------------------------------------------------------------


def _served_version() -> str:
    async def ask() -> str:
        async with Client(build_server([ROOT], skill_dir=None)) as client:
            return client.server_info.version  # type: ignore[union-attr]

    return anyio.run(ask)


def test_one_version_number_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "seqpack.__version__"}
    claude, codex = _json(PLUGIN / ".claude-plugin" / "plugin.json"), _json(PLUGIN / ".codex-plugin" / "plugin.json")
    market = _json(ROOT / ".claude-plugin" / "marketplace.json")
    server = _json(ROOT / "server.json")
    card = (SKILL / "skill-card.md").read_text()
    versions = {
        "seqpack.__version__": __version__,
        "SKILL.md metadata.version": read_frontmatter(SKILL / "SKILL.md")["metadata"]["version"],
        "skill-card.md Skill version": re.search(r"## Skill version\s+(\S+)", card, re.I).group(1),
        "MCP serverInfo.version": _served_version(),
        "Claude Code plugin.json": claude["version"],
        "Codex plugin.json": codex["version"],
        "Claude Code marketplace entry": market["plugins"][0]["version"],
        "Claude Code marketplace metadata": market["metadata"]["version"],
        "server.json version": server["version"],
        "server.json package version": server["packages"][0]["version"],
    }
    assert set(versions.values()) == {__version__}, versions
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


# ------------------------------------------------------------------------------------------------
# Claude Code: plugin, .mcp.json, marketplace
# ------------------------------------------------------------------------------------------------


def test_claude_plugin_and_marketplace():
    plugin = _json(PLUGIN / ".claude-plugin" / "plugin.json")
    assert plugin["name"] == "seqpack" and plugin["skills"] == ["./skills/"]
    assert (PLUGIN / "skills" / SKILL_NAME / "SKILL.md").is_file()
    servers = _json(PLUGIN / plugin["mcpServers"])["mcpServers"]
    assert servers == {"seqpack": {"command": "seqpack", "args": ["mcp", "--root", "."]}}
    market = _json(ROOT / ".claude-plugin" / "marketplace.json")
    (entry,) = market["plugins"]
    assert entry["name"] == plugin["name"] and (ROOT / entry["source"]).resolve() == PLUGIN.resolve()
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", market["name"]) and market["owner"]["name"]
    icon = PLUGIN / plugin["icon"]
    head = icon.read_bytes()[:24]
    width, height = struct.unpack(">II", head[16:24])
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and width == height and 512 <= width <= 2048  # what the directory asks


# ------------------------------------------------------------------------------------------------
# Codex: the readiness rules of openai/plugins, plugin-creator scripts/check_plugin_readiness.py at 55d14ba
# (the checker is not on a package registry; these are its documented ERROR-level checks, written here)
# ------------------------------------------------------------------------------------------------

_URL = re.compile(r"^https?://")


def codex_readiness_errors(plugin_root: Path, marketplace: dict) -> list[str]:
    """The ERROR-level findings of the Codex plugin readiness rules for ``plugin_root``."""
    errors: list[str] = []
    try:
        manifest = json.loads((plugin_root / ".codex-plugin" / "plugin.json").read_text())
    except (OSError, ValueError) as exc:
        return [f"plugin.json unreadable: {exc}"]

    def text(obj: dict, key: str, where: str) -> str | None:
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            errors.append(f"{where}.{key} must be a non-empty string")
            return None
        return value

    for key in ("name", "version", "description", "license"):
        text(manifest, key, "plugin")
    name = manifest.get("name")
    if isinstance(name, str) and (not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) or name != plugin_root.name):
        errors.append("plugin.name must be lower-case hyphen-case and equal the plugin folder name")
    if not re.fullmatch(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?", str(manifest.get("version"))):
        errors.append("plugin.version must be a semantic version")
    author = manifest.get("author")
    if not isinstance(author, dict):
        errors.append("plugin.author must be an object")
    else:
        for key in ("name", "email", "url"):
            text(author, key, "plugin.author")
        if "@" not in str(author.get("email")):
            errors.append("plugin.author.email must be an email address")
        if not _URL.match(str(author.get("url"))):
            errors.append("plugin.author.url must be an http(s) URL")
    for key in ("homepage", "repository"):
        if not _URL.match(str(manifest.get(key))):
            errors.append(f"plugin.{key} must be an http(s) URL")
    if not isinstance(manifest.get("keywords"), list) or not manifest["keywords"]:
        errors.append("plugin.keywords must be a non-empty array")
    for key, kind in (("skills", "dir"), ("hooks", "file"), ("mcpServers", "file"), ("apps", "file")):
        value = manifest.get(key)
        if value is None:
            continue
        target = plugin_root / str(value)
        if not str(value).startswith("./") or ".." in Path(str(value)).parts:
            errors.append(f"plugin.{key} must be a relative plugin path starting with './'")
        elif not (target.is_dir() if kind == "dir" else target.is_file()):
            errors.append(f"plugin.{key} must point to an existing {kind}")
    mcp = manifest.get("mcpServers")
    if isinstance(mcp, str) and (plugin_root / mcp).is_file():
        servers = json.loads((plugin_root / mcp).read_text()).get("mcpServers")
        if not isinstance(servers, dict) or not servers:
            errors.append("the mcpServers file must hold a non-empty 'mcpServers' object")
    iface = manifest.get("interface")
    if not isinstance(iface, dict):
        return [*errors, "plugin.interface must be an object"]
    for key in ("displayName", "shortDescription", "longDescription", "developerName", "category"):
        text(iface, key, "interface")
    if not _URL.match(str(iface.get("websiteURL"))):
        errors.append("interface.websiteURL must be an http(s) URL")
    for key in ("privacyPolicyURL", "termsOfServiceURL"):  # recommended; must be URLs when given
        if key in iface and not _URL.match(str(iface[key])):
            errors.append(f"interface.{key} must be an http(s) URL")
    if not isinstance(iface.get("capabilities"), list) or not iface["capabilities"]:
        errors.append("interface.capabilities must be a non-empty array")
    if not re.fullmatch(r"#[0-9A-Fa-f]{6}", str(iface.get("brandColor"))):
        errors.append("interface.brandColor must be a 6-digit hex colour")
    prompts = iface.get("defaultPrompt")
    if not isinstance(prompts, list) or not 1 <= len(prompts) <= 3 or any(
            not isinstance(p, str) or not p.strip() or len(p) > 128 for p in prompts):
        errors.append("interface.defaultPrompt must hold 1 to 3 non-empty prompts of at most 128 characters")
    for key in ("composerIcon", "logo"):
        value = str(iface.get(key))
        asset = plugin_root / value
        if not value.startswith("./") or asset.suffix.lower() not in (".png", ".jpg", ".jpeg", ".svg", ".webp") or \
                not asset.is_file() or asset.stat().st_size == 0:
            errors.append(f"interface.{key} must be a non-empty image inside the plugin")
    skills_root = plugin_root / str(manifest.get("skills", "./skills/"))
    for skill_md in sorted(skills_root.rglob("SKILL.md")):
        front = read_frontmatter(skill_md)
        if not front.get("name") or not front.get("description"):
            errors.append(f"{skill_md.parent.name}: SKILL.md needs name and description")
        agent = skill_md.parent / "agents" / "openai.yaml"
        ui = yaml.safe_load(agent.read_text()).get("interface", {}) if agent.is_file() else {}
        if not ui.get("display_name") or not ui.get("short_description"):
            errors.append(f"{skill_md.parent.name}: agents/openai.yaml needs interface display_name and "
                          "short_description")
    entries = [e for e in marketplace.get("plugins", []) if isinstance(e, dict) and e.get("name") == name]
    if len(entries) != 1:
        return [*errors, f"the marketplace lists {name!r} {len(entries)} times"]
    (entry,) = entries
    source = entry.get("source") or {}
    if source.get("source") != "local" or source.get("path") != f"./plugins/{name}":
        errors.append(f"marketplace entry: source must be local with path ./plugins/{name}")
    policy = entry.get("policy") or {}
    if policy.get("installation") not in ("NOT_AVAILABLE", "AVAILABLE", "INSTALLED_BY_DEFAULT") or \
            policy.get("authentication") not in ("ON_INSTALL", "ON_USE"):
        errors.append("marketplace entry: invalid policy")
    if not entry.get("category"):
        errors.append("marketplace entry needs a category")
    return errors


def test_codex_plugin_meets_the_readiness_rules(tmp_path):
    marketplace = _json(ROOT / ".agents" / "plugins" / "marketplace.json")
    assert codex_readiness_errors(PLUGIN, marketplace) == []
    assert (ROOT / marketplace["plugins"][0]["source"]["path"]).resolve() == PLUGIN.resolve()
    iface = _json(PLUGIN / ".codex-plugin" / "plugin.json")["interface"]
    assert set(iface) >= {"displayName", "shortDescription", "longDescription", "developerName", "category",
                          "capabilities", "websiteURL", "brandColor", "defaultPrompt", "composerIcon", "logo"}
    # negative controls: each broken copy is caught
    manifest = _json(PLUGIN / ".codex-plugin" / "plugin.json")
    breaks = {
        "interface.longDescription": lambda m: m["interface"].pop("longDescription"),
        "defaultPrompt": lambda m: m["interface"].__setitem__("defaultPrompt", ["x" * 129]),
        "brandColor": lambda m: m["interface"].__setitem__("brandColor", "green"),
        "plugin.version": lambda m: m.__setitem__("version", "one"),
        "plugin.skills": lambda m: m.__setitem__("skills", "./nowhere/"),
    }
    for expected, change in breaks.items():
        broken = copy.deepcopy(manifest)
        change(broken)
        folder = tmp_path / expected / "seqpack"
        (folder / ".codex-plugin").mkdir(parents=True)
        (folder / ".codex-plugin" / "plugin.json").write_text(json.dumps(broken))
        for rel in (".mcp.json", "assets/icon.png"):
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes((PLUGIN / rel).read_bytes())
        (folder / "skills").mkdir()
        errors = codex_readiness_errors(folder, marketplace)
        assert any(expected in e for e in errors), (expected, errors)
    wrong_path = copy.deepcopy(marketplace)
    wrong_path["plugins"][0]["source"]["path"] = "./"
    assert any("source must be local" in e for e in codex_readiness_errors(PLUGIN, wrong_path))


# ------------------------------------------------------------------------------------------------
# The MCP registry: server.json against the documented requirements of its 2025-12-11 schema
# ------------------------------------------------------------------------------------------------

#: The requirements of server.json that apply to a PyPI package served over stdio, written from the
#: registry's schema (modelcontextprotocol/registry, docs/reference/server-json/server.schema.json at
#: 7c0bbf25: ServerDetail, RegistryPackage, PackageBase, StdioTransport, Repository, Positional/NamedArgument)
#: and its CHANGELOG.md (2025-10-11, 2025-10-17 and 2025-12-11 change nothing used here). The published
#: schema is not on a package registry, so no copy of it is vendored.
SERVER_JSON_REQUIREMENTS = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["name", "description", "version"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "name": {"type": "string", "minLength": 3, "maxLength": 200, "pattern": r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$"},
        "title": {"type": "string", "minLength": 1, "maxLength": 100},
        "description": {"type": "string", "minLength": 1, "maxLength": 100},
        "version": {"type": "string", "maxLength": 255, "not": {"pattern": r"^[\^~><=]|\.x$|\*|^latest$"}},
        "websiteUrl": {"type": "string", "format": "uri"},
        "repository": {"type": "object", "required": ["url", "source"],
                       "properties": {"url": {"type": "string"}, "source": {"type": "string"}}},
        "packages": {"type": "array", "items": {"$ref": "#/definitions/package"}},
    },
    "definitions": {
        "input": {"type": "object", "properties": {
            "description": {"type": "string"}, "isRequired": {"type": "boolean"}, "isSecret": {"type": "boolean"},
            "format": {"enum": ["string", "number", "boolean", "filepath"]}, "value": {"type": "string"},
            "default": {"type": "string"}, "variables": {"type": "object"}}},
        "argument": {"anyOf": [
            {"allOf": [{"$ref": "#/definitions/input"},
                       {"required": ["type"], "properties": {"type": {"const": "positional"}},
                        "anyOf": [{"required": ["value"]}, {"required": ["valueHint"]}]}]},
            {"allOf": [{"$ref": "#/definitions/input"},
                       {"required": ["type", "name"], "properties": {"type": {"const": "named"},
                                                                      "name": {"type": "string"}}}]}]},
        "package": {"type": "object", "required": ["registryType", "identifier", "version", "transport"],
                    "properties": {
                        "registryType": {"enum": ["npm", "pypi", "nuget", "oci", "mcpb"]},
                        "identifier": {"type": "string", "minLength": 1},
                        "version": {"type": "string", "minLength": 1, "not": {"const": "latest"}},
                        "runtimeHint": {"type": "string"},
                        "transport": {"type": "object", "required": ["type"],
                                      "properties": {"type": {"enum": ["stdio", "streamable-http", "sse"]}}},
                        "packageArguments": {"type": "array", "items": {"$ref": "#/definitions/argument"}},
                        "runtimeArguments": {"type": "array", "items": {"$ref": "#/definitions/argument"}}}},
    },
}


def _server_json_errors(data: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(SERVER_JSON_REQUIREMENTS)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(data)]


def test_server_json_meets_the_registry_schema():
    server = _json(ROOT / "server.json")
    assert _server_json_errors(server) == []
    assert server["$schema"] == "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
    assert server["name"].startswith("io.github.") and server["name"].endswith("/seqpack")
    (package,) = server["packages"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert package["registryType"] == "pypi" and package["identifier"] == project["name"]
    assert package["runtimeHint"] == "uvx" and package["transport"] == {"type": "stdio"}
    args = package["packageArguments"]
    assert args[0] == {"type": "positional", "value": "mcp"} and args[1]["name"] == "--root"
    assert args[1]["variables"]["root"]["format"] == "filepath"
    assert "remotes" not in server  # a local server only
    # negative controls: what the registry rejects is rejected here
    for change, expected in [
        (lambda d: d.pop("name"), "'name' is a required property"),
        (lambda d: d.__setitem__("name", "seqpack"), "does not match"),
        (lambda d: d.__setitem__("description", "x" * 101), "is too long"),
        (lambda d: d["packages"][0].__setitem__("version", "latest"), "should not be valid"),
        (lambda d: d.__setitem__("version", "^0.1.0"), "should not be valid"),
        (lambda d: d["packages"][0].pop("transport"), "'transport' is a required property"),
        (lambda d: d["packages"][0]["packageArguments"][0].pop("value"), "is not valid under any"),
    ]:
        broken = copy.deepcopy(server)
        change(broken)
        assert any(expected in e for e in _server_json_errors(broken)), expected


def test_readme_carries_the_mcp_name_line():
    name = _json(ROOT / "server.json")["name"]
    readme = (ROOT / "README.md").read_text()
    assert re.findall(r"<!-- mcp-name: (\S+) -->", readme) == [name]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["readme"] == "README.md"  # the README is the PyPI description the registry reads


def test_the_builder_writes_what_it_checks(tmp_path, monkeypatch):
    """``write`` then ``_differences`` on a scratch root: nothing left to report, and a stray file is removed."""
    builder = _builder()
    files = builder.expected_files()
    monkeypatch.setattr(builder, "ROOT", tmp_path)
    stray = tmp_path / builder.PLUGIN_DIR / "stray.txt"
    stray.parent.mkdir(parents=True)
    stray.write_text("left over")
    assert any("stray.txt" in p for p in builder._differences(files))
    builder.write(files)
    assert builder._differences(files) == [] and not stray.exists()


# ------------------------------------------------------------------------------------------------
# The lanes that need a registry: skipped here, failed in CI
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env, ci", [({}, False), ({"CI": "1"}, True), ({"CI": "true"}, True), ({"SEQPACK_CI": "1"}, True),
                                     ({"CI": "0"}, False), ({"SEQPACK_CI": ""}, False)])
def test_a_check_that_cannot_run_fails_in_ci_and_is_skipped_elsewhere(monkeypatch, env, ci):
    from tests.release_env import in_ci, unavailable

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("SEQPACK_CI", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert in_ci() is ci
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception, match="npm client x unavailable"):
        unavailable("npm client x unavailable")


def test_ci_entry_point_marks_the_run_as_ci():
    assert "export SEQPACK_CI=1" in (ROOT / ".ci" / "run").read_text()

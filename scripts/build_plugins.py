#!/usr/bin/env python3
"""Build the distribution files of seqpack for agent clients and the MCP registry from one source.

Writes, from ``pyproject.toml``, ``seqpack.__version__`` and the skill bundle
``skills/megatron-sequence-packing/``:

* ``plugins/seqpack/``: one plugin folder for Claude Code (``.claude-plugin/plugin.json``) and Codex
  (``.codex-plugin/plugin.json`` with its ``interface`` block), the stdio MCP server both start
  (``.mcp.json``: ``seqpack mcp --root .``, the project directory the client runs in), a README,
  an icon, and a copy of the skill as real files under ``skills/`` (no symlinks: client plugin
  installs drop them);
* ``.claude-plugin/marketplace.json`` (Claude Code) and ``.agents/plugins/marketplace.json`` (Codex),
  each listing the plugin folder;
* ``server.json``: the MCP registry entry (schema 2025-12-11, the ``seqpack`` PyPI package run
  with ``uvx``, arguments ``mcp --root DIR``).

The skill copy is never edited by hand: change the skill and run this script again.
``--check`` writes nothing and exits 1 when a file is missing, differs (content or executable
bit) or should not be there (``tests/test_plugins.py`` runs it). The skill's files are the ones
:func:`seqpack.faces.install_skill.skill_files` selects, whatever the bundle holds at the time.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tomllib
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seqpack import __version__  # noqa: E402 - after the path set-up
from seqpack.faces.install_skill import SKILL_NAME, read_frontmatter, skill_files  # noqa: E402

PLUGIN = "seqpack"
PLUGIN_DIR = Path("plugins") / PLUGIN
SKILL_SOURCE = Path("skills") / SKILL_NAME
#: The GitHub repository that holds the marketplaces (the URLs of pyproject.toml name the same one).
MARKETPLACE_REPO = "seqpack/seqpack"
#: The MCP registry name (``io.github.<owner>/<name>``); the README carries it in its mcp-name line.
REGISTRY_NAME = "io.github.seqpack/seqpack"
SERVER_SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
#: The stdio server every client starts: the project directory it runs in is the allowed root.
SERVER_ARGS = ["mcp", "--root", "."]
BRAND = (0x1F, 0x5C, 0x4E)  # the icon's background and the Codex card colour
SHORT = "Configure, validate and verify sequence packing for Megatron fine-tuning"
LONG = ("Computes the packing settings of Megatron-Bridge and Megatron-Core fine-tuning instead of guessing them: "
        "pad_seq_to_mult for TP, CP and SP, pack-length plans at equal token slots, config validation against "
        "every packing rule, offline packing into Megatron-Bridge's packed Parquet, inspection of packs, and a "
        "smoke test that proves packed training equals unpacked training. Ships the megatron-sequence-packing "
        "skill and the seqpack MCP server (stdio), which needs the seqpack Python package on PATH "
        "(pip install seqpack).")
PROMPTS = [
    "Check the sequence-packing settings of my training config with seqpack.",
    "What pad_seq_to_mult do I need for TP 4, CP 2 with sequence parallelism?",
    "Plan a pack length for my JSONL data at 65536 token slots per step.",
]
KEYWORDS = ["sequence-packing", "megatron", "fine-tuning", "context-parallel", "mcp", "skills"]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _json(data: object) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def icon_png(size: int = 512) -> bytes:
    """A square RGB PNG: five lanes of packed bars (sequences of different lengths) on the brand colour."""
    bars = [(0xF2, 0xC1, 0x4E), (0x8F, 0xD6, 0xB8), (0xE9, 0xF1, 0xEE)]
    margin, lanes = size // 8, 5
    lane_h, width = (size - 2 * margin) // lanes, size - 2 * margin
    background = b"\x00" + bytes(BRAND) * size  # filter byte 0, then the pixels
    lane_rows = []
    for lane in range(lanes):
        cuts = [margin + width * f // 12 for f in ((3 + lane) % 7 + 2, (5 + 2 * lane) % 4 + 8)]
        line = bytearray(b"\x00")
        for x in range(size):
            segment = 0 if x < cuts[0] else (1 if x < cuts[1] else 2)
            gap = not margin <= x < size - margin or any(abs(x - c) <= size // 128 for c in cuts)
            line += bytes(BRAND if gap else bars[(segment + lane) % 3])
        lane_rows.append(bytes(line))
    rows = []
    for y in range(size):
        lane, inside = divmod(y - margin, lane_h)
        bar = 0 <= y - margin and lane < lanes and lane_h // 6 <= inside < lane_h - lane_h // 6
        rows.append(lane_rows[lane] if bar else background)
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + _png_chunk(b"IEND", b""))


def expected_files() -> dict[Path, tuple[bytes, bool]]:
    """Every generated file: repository-relative path -> (bytes, executable)."""
    project = _project()
    urls = project["urls"]
    home, repo = urls["Homepage"], urls["Repository"]
    author = {"name": "seqpack maintainers", "email": "maintainers@seqpack.dev", "url": home}
    description = project["description"]
    skill = ROOT / SKILL_SOURCE
    if read_frontmatter(skill / "SKILL.md").get("name") != SKILL_NAME:
        raise SystemExit(f"{SKILL_SOURCE}/SKILL.md does not name the skill {SKILL_NAME}")
    out: dict[Path, tuple[bytes, bool]] = {}
    for rel in skill_files(skill):
        path = skill / rel
        out[PLUGIN_DIR / "skills" / SKILL_NAME / rel] = (path.read_bytes(), bool(path.stat().st_mode & 0o100))
    icon = "./assets/icon.png"
    out[PLUGIN_DIR / "assets" / "icon.png"] = (icon_png(), False)
    out[PLUGIN_DIR / ".mcp.json"] = (_json({"mcpServers": {PLUGIN: {"command": "seqpack", "args": SERVER_ARGS}}}),
                                     False)
    common = {"name": PLUGIN, "version": __version__, "description": description, "author": author,
              "homepage": home, "repository": repo, "license": project["license"]["text"], "keywords": KEYWORDS}
    out[PLUGIN_DIR / ".claude-plugin" / "plugin.json"] = (_json({
        "$schema": "https://anthropic.com/claude-code/plugin.schema.json", **common, "icon": icon,
        "skills": ["./skills/"], "mcpServers": "./.mcp.json", "network": {"hosts": []}}), False)
    out[PLUGIN_DIR / ".codex-plugin" / "plugin.json"] = (_json({
        **common, "skills": "./skills/", "mcpServers": "./.mcp.json",
        "interface": {
            "displayName": "seqpack: Megatron sequence packing", "shortDescription": SHORT, "longDescription": LONG,
            "developerName": "seqpack maintainers", "category": "Developer Tools",
            "capabilities": ["Interactive", "Write"], "websiteURL": home,
            "privacyPolicyURL": f"{home}#privacy", "termsOfServiceURL": f"{repo}/blob/main/LICENSE",
            "defaultPrompt": PROMPTS, "brandColor": "#{:02X}{:02X}{:02X}".format(*BRAND),
            "composerIcon": icon, "logo": icon}}), False)
    out[PLUGIN_DIR / "README.md"] = (_readme(description).encode("utf-8"), False)
    out[Path(".claude-plugin") / "marketplace.json"] = (_json({
        "name": PLUGIN, "owner": {"name": author["name"], "email": author["email"]},
        "metadata": {"description": "The seqpack plugin: the Megatron sequence-packing skill and its MCP server",
                     "version": __version__},
        "plugins": [{"name": PLUGIN, "source": f"./{PLUGIN_DIR.as_posix()}", "description": description,
                     "version": __version__, "category": "development", "homepage": home}]}), False)
    out[Path(".agents") / "plugins" / "marketplace.json"] = (_json({
        "name": PLUGIN, "interface": {"displayName": "seqpack"},
        "plugins": [{"name": PLUGIN, "source": {"source": "local", "path": f"./{PLUGIN_DIR.as_posix()}"},
                     "policy": {"installation": "AVAILABLE", "authentication": "ON_INSTALL"},
                     "category": "Developer Tools"}]}), False)
    out[Path("server.json")] = (_json({
        "$schema": SERVER_SCHEMA, "name": REGISTRY_NAME, "title": "seqpack",
        "description": "Sequence packing for Megatron fine-tuning: alignment, pack plans, config checks, packing",
        "version": __version__, "websiteUrl": home, "repository": {"url": repo, "source": "github"},
        "packages": [{
            "registryType": "pypi", "identifier": project["name"], "version": __version__, "runtimeHint": "uvx",
            "transport": {"type": "stdio"},
            "packageArguments": [
                {"type": "positional", "value": "mcp"},
                {"type": "named", "name": "--root", "value": "{root}", "description": "directory the tools may "
                 "read and write (repeatable)", "isRequired": True,
                 "variables": {"root": {"description": "your project directory", "format": "filepath",
                                        "default": ".", "isRequired": True}}},
            ]}]}), False)
    return out


def _readme(description: str) -> str:
    return f"""# seqpack plugin

{description}.

This folder is generated by `scripts/build_plugins.py` of the seqpack repository; do not edit it.

- `skills/{SKILL_NAME}/`: the agent skill (a copy of the repository's `skills/{SKILL_NAME}/`).
- `.mcp.json`: starts the seqpack MCP server over stdio (`seqpack {" ".join(SERVER_ARGS)}`) in the
  project directory of your session; it can read and write only inside that directory.
- `.claude-plugin/plugin.json` (Claude Code) and `.codex-plugin/plugin.json` (Codex).

The server needs the `seqpack` command on PATH: `pip install seqpack` (a light install without
torch; the smoke test needs `pip install 'seqpack[train]'`). It reaches no network host.

Install it in Claude Code from the repository's marketplace:

    /plugin install {PLUGIN} --marketplace {MARKETPLACE_REPO}

or in a shell: `claude plugin marketplace add {MARKETPLACE_REPO}` then
`claude plugin install {PLUGIN}@{PLUGIN}`. In Codex, add the repository's marketplace
(`.agents/plugins/marketplace.json`) and install `{PLUGIN}` from it.
"""


def _differences(files: dict[Path, tuple[bytes, bool]]) -> list[str]:
    problems = []
    for rel, (data, executable) in sorted(files.items()):
        path = ROOT / rel
        if path.is_symlink() or not path.is_file():
            problems.append(f"{rel}: missing (or not a regular file)")
        elif path.read_bytes() != data:
            problems.append(f"{rel}: differs from what the build writes")
        elif bool(path.stat().st_mode & 0o100) != executable:
            problems.append(f"{rel}: executable bit differs")
    plugin = ROOT / PLUGIN_DIR
    if plugin.is_dir():
        known = {ROOT / rel for rel in files}
        for path in sorted(plugin.rglob("*")):
            if (path.is_file() or path.is_symlink()) and path not in known:
                problems.append(f"{path.relative_to(ROOT)}: not written by the build (stale?)")
    return problems


def write(files: dict[Path, tuple[bytes, bool]]) -> int:
    """Write ``files`` (and remove what the plugin folder holds beyond them); returns the files changed."""
    changed = 0
    known = {ROOT / rel for rel in files}
    plugin = ROOT / PLUGIN_DIR
    if plugin.is_dir():
        for path in sorted(plugin.rglob("*"), reverse=True):
            if (path.is_file() or path.is_symlink()) and path not in known:
                path.unlink()
                changed += 1
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    for rel, (data, executable) in sorted(files.items()):
        path = ROOT / rel
        if path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
            changed += 1
        mode = path.stat().st_mode
        path.chmod(mode | 0o111 if executable else mode & ~0o111)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Write the files, or with ``--check`` report how the tree differs from them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when anything is stale")
    args = parser.parse_args(argv)
    files = expected_files()
    if args.check:
        problems = _differences(files)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"{len(problems)} generated file(s) stale: run python scripts/build_plugins.py", file=sys.stderr)
            return 1
        print(f"{len(files)} generated files up to date")
        return 0
    print(f"{write(files)} file(s) written or removed; {len(files)} generated files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

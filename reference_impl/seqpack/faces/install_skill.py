"""Install the agent skill where a client looks for it, and say how to register the MCP server.

Clients read skills from ``<base>/.claude/skills/<name>/`` (Claude Code) and
``<base>/.agents/skills/<name>/`` (Codex and the cross-client convention), where ``<base>`` is a
project directory or the user's home. The bundle is copied as real files (client plugin installs
drop symlinks) into a temporary sibling and renamed into place, so a failed install leaves nothing
half-copied; an existing installation is replaced only with ``force``, and only when this command
made it (its ``.seqpack-install.json`` marker lists every file; a file added since, a directory
without the marker, the home or current directory are never replaced).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from seqpack.io import ownership
from seqpack.core.errors import UsageError

SKILL_NAME = "megatron-sequence-packing"
CLIENT_DIRS = {"claude": ".claude/skills", "codex": ".agents/skills", "agents": ".agents/skills"}
#: The marker an installation carries: what ``--force`` may replace (this command's own copy only).
MARKER_NAME = ".seqpack-install.json"
MARKER_FORMAT = "seqpack-skill-install/1"


#: How the file-access layer recognises an installation this command made.
SKILL_OWNER = ownership.Owner("seqpack install-skill", MARKER_NAME, MARKER_FORMAT, "--force")


def skill_files(directory: str | os.PathLike[str]) -> list[str]:
    """The files of a skill bundle as sorted POSIX paths relative to it: every regular file, except
    dotfiles, symlinks, ``__pycache__`` and ``*.pyc`` (and what lies under a dot or symlinked directory).

    The one selection every copy and face of the bundle uses: the plugins' copies
    (``scripts/build_plugins.py``) and the ``skill://`` resources of the MCP server.
    """
    root = Path(directory)
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and d != "__pycache__" and not (base / d).is_symlink())
        for name in filenames:
            path = base / name
            if name.startswith(".") or name.endswith(".pyc") or path.is_symlink() or not path.is_file():
                continue
            out.append(path.relative_to(root).as_posix())
    return sorted(out)


def read_frontmatter(skill_md: str | os.PathLike[str]) -> dict[str, Any]:
    """The YAML frontmatter of a SKILL.md as a mapping (ValueError when it has none or it is not a mapping)."""
    import yaml

    text = Path(skill_md).read_text(encoding="utf-8")
    if not text.startswith("---\n") or "\n---\n" not in text[3:]:
        raise ValueError(f"{skill_md} does not start with a --- delimited frontmatter block")
    head = text[4:].split("\n---\n", 1)[0]
    try:
        data = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        raise ValueError(f"{skill_md}: the frontmatter is not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{skill_md}: the frontmatter is not a mapping")
    return data


def find_skill_dir() -> Path | None:
    """The skill bundle directory: the repository's ``skills/<name>/`` (a source checkout or an
    editable install), else a copy shipped inside the package (``seqpack/skill_assets/<name>/``).
    None when neither holds a SKILL.md."""
    package = Path(__file__).resolve().parents[1]  # seqpack/ (this module is seqpack/faces/install_skill.py)
    checkout = package.parents[1]  # a source checkout holds seqpack in reference_impl/
    for candidate in (checkout / "skills" / SKILL_NAME, package / "skill_assets" / SKILL_NAME):
        if (candidate / "SKILL.md").is_file():
            return candidate
    return None


@dataclass(frozen=True)
class SkillInstall:
    """Where the skill went, what was copied, and the MCP registration command for the client."""

    client: str
    source: str
    destination: str
    files: int
    replaced: bool
    mcp_command: str
    mcp_note: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


#: The MCP server every registration starts: stdio, server name ``seqpack``, ``mcp --root DIR`` (the same as
#: ``agents/openai.yaml`` of the bundle declares).
SERVER_NAME = "seqpack"
TRANSPORT = "stdio"


def server_command(root: Path) -> list[str]:
    """The stdio server command: the ``seqpack`` console script next to this interpreter (a wheel, pipx or
    uv tool install puts it there), else ``python -m seqpack``; then ``mcp --root ROOT``."""
    script = Path(sys.executable).parent / "seqpack"
    installed = script.is_file() and os.access(script, os.X_OK)
    start = [str(script)] if installed else [sys.executable, "-m", "seqpack"]
    return [*start, "mcp", "--root", str(root)]


def _registration(client: str, root: Path) -> tuple[str, str]:
    server = server_command(root)
    cmd = shlex.join(server)
    if client == "claude":
        return (f"claude mcp add --scope project seqpack -- {cmd}",
                "run it in the project; Claude Code writes .mcp.json")
    if client == "codex":
        return f"codex mcp add seqpack -- {cmd}", "Codex writes ~/.codex/config.toml (a stdio server)"
    return cmd, "register this stdio command with your MCP client"


def install_skill(
    client: str,
    *,
    project: str | os.PathLike[str] | None = None,
    user: bool = False,
    force: bool = False,
    source: str | os.PathLike[str] | None = None,
) -> SkillInstall:
    """Copy the skill bundle for ``client`` (claude, codex or agents) into a project or the user's home."""
    if client not in CLIENT_DIRS:
        raise UsageError(f"unknown client {client!r}; choose one of {', '.join(CLIENT_DIRS)}", field="client")
    if user and project is not None:
        raise UsageError("give --user or --project, not both")
    src = Path(source) if source is not None else find_skill_dir()
    if src is None or not (src / "SKILL.md").is_file():
        raise UsageError(
            "the skill bundle was not found next to the package (seqpack/skill_assets is missing)",
            fix="reinstall seqpack from a wheel built with its build hook (pip install .) or from a source checkout",
        )
    given = Path.home() if user else Path(project or ".")
    ownership.check_output_root(given, owner="seqpack install-skill", field="project", allow_home=True)
    base = Path(os.path.realpath(given))
    base.mkdir(parents=True, exist_ok=True)  # --project DIR may name a project that does not exist yet
    dest = base / CLIENT_DIRS[client] / SKILL_NAME
    if os.path.realpath(dest) == os.path.realpath(src):
        raise UsageError("the destination is the skill source itself", file=str(dest))
    replaced = (dest.exists() or dest.is_symlink()) and not (dest.is_dir() and not any(dest.iterdir()))
    if replaced and not force:
        raise UsageError("the skill is already installed there", file=str(dest), fix="pass --force to replace it")
    with ownership.output_directory(dest, SKILL_OWNER, inputs=[src], replace_own=force) as tmp:
        shutil.copytree(src, tmp, symlinks=False, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        marker = {"format": MARKER_FORMAT, "skill": SKILL_NAME, "source": str(src), "files": ownership.record_files(tmp)}
        (tmp / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    count = sum(1 for p in dest.rglob("*") if p.is_file())
    command, note = _registration(client, base if not user else Path.cwd())
    return SkillInstall(client, str(src), str(dest), count, replaced, command, note)

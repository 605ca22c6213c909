"""The skill bundle in the form of the MCP Skills extension (``io.modelcontextprotocol/skills``, SEP-2640).

Every file of the bundle (:func:`seqpack.faces.install_skill.skill_files`) is a resource
``skill://<name>/<path>``, read from disk at request time (text as text, other bytes as a blob);
``SKILL.md`` carries ``text/markdown`` and the frontmatter's name and description. The extension
adds two methods: ``skills/list`` (one entry: the ``SKILL.md`` URI, the frontmatter exactly as the
file has it, and every file with its ``sha256:`` digest and size) and ``skills/get`` (that entry
by its URI; any other URI is ``-32602``). Digests are computed from the bytes on disk when the
method is called, so they always describe what ``resources/read`` serves. The server declares
the extension only for a bundle whose frontmatter parses and names its directory.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PaginatedRequestParams, RequestParams

from seqpack.io.ownership import file_record
from seqpack.io.reading import read_bytes
from seqpack.faces.install_skill import read_frontmatter, skill_files

log = logging.getLogger("seqpack.mcp")

#: The extension identifier a server declares under ``capabilities.extensions``.
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
#: The first protocol revision whose results carry ``ttlMs`` and ``cacheScope``.
CACHEABLE_SINCE = "2026-07-28"
_MIME = {".md": "text/markdown", ".txt": "text/plain", ".log": "text/plain", ".json": "application/json",
         ".jsonl": "application/jsonl", ".yaml": "application/yaml", ".yml": "application/yaml",
         ".py": "text/x-python"}

__all__ = ["SKILLS_EXTENSION", "SkillBundle", "SkillsExtension", "register_skill_resources"]


@dataclass(frozen=True)
class SkillBundle:
    """A skill directory as served over MCP: its name, frontmatter and files (relative POSIX paths)."""

    directory: Path
    name: str
    frontmatter: dict[str, Any]
    files: tuple[str, ...]

    @classmethod
    def load(cls, directory: Path) -> SkillBundle | None:
        """The bundle in ``directory``, or None (logged) when its SKILL.md frontmatter is unusable."""
        directory = directory.resolve()
        try:
            frontmatter = read_frontmatter(directory / "SKILL.md")
        except (OSError, ValueError) as exc:
            log.warning("skill bundle %s not served as skill:// resources: %s", directory, exc)
            return None
        if frontmatter.get("name") != directory.name:
            log.warning("skill bundle %s not served as skill:// resources: its name %r is not the directory's",
                        directory, frontmatter.get("name"))
            return None
        return cls(directory, directory.name, frontmatter, tuple(skill_files(directory)))

    def uri(self, path: str = "SKILL.md") -> str:
        """The ``skill://`` URI of one file of the bundle."""
        return f"skill://{self.name}/{path}"

    def entry(self) -> dict[str, Any]:
        """The skills/list entry: the SKILL.md URI, the frontmatter, each file with digest and size."""
        resources = []
        for path in self.files:
            try:
                record = file_record(self.directory / path)
            except OSError:  # removed since the server started: nothing to describe
                continue
            resources.append({"uri": self.uri(path), "digest": f"sha256:{record['sha256']}", "size": record["size"]})
        return {"uri": self.uri(), "frontmatter": self.frontmatter, "resources": resources}


def mime_type(path: str) -> str:
    """The MIME type a skill file is served with (SKILL.md and other pages: text/markdown)."""
    suffix = Path(path).suffix.lower()
    return _MIME.get(suffix) or mimetypes.guess_type(path)[0] or "application/octet-stream"


def _reader(path: Path, uri: str) -> Callable[[], str | bytes]:
    def read() -> str | bytes:
        if not path.exists():
            raise ResourceNotFoundError(f"{uri} is no longer on disk ({path})")
        data = read_bytes(path, what=uri)  # a regular file only: a FIFO put there never blocks the server
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data  # served as a blob

    return read


def register_skill_resources(server: MCPServer, bundle: SkillBundle) -> list[str]:
    """Register every file of ``bundle`` as a ``skill://`` resource; returns the URIs."""
    uris = []
    for path in bundle.files:
        uri, read = bundle.uri(path), _reader(bundle.directory / path, bundle.uri(path))
        if path == "SKILL.md":
            server.resource(uri, name=bundle.name, title="Sequence packing skill", mime_type="text/markdown",
                            description=str(bundle.frontmatter.get("description", "")))(read)
        else:
            server.resource(uri, name=path, mime_type=mime_type(path),
                            description=f"File {path} of the {bundle.name} skill")(read)
        uris.append(uri)
    return uris


class GetSkillParams(RequestParams):
    """``skills/get`` parameters: the skill's ``skill://<name>/SKILL.md`` URI."""

    uri: str


class SkillsExtension(Extension):
    """``io.modelcontextprotocol/skills``: ``skills/list`` and ``skills/get`` over one bundle."""

    identifier = SKILLS_EXTENSION

    def __init__(self, bundle: SkillBundle) -> None:
        self.bundle = bundle

    def methods(self) -> Sequence[MethodBinding]:
        """The two request methods of the extension."""
        return (MethodBinding("skills/list", PaginatedRequestParams, self._list),
                MethodBinding("skills/get", GetSkillParams, self._get))

    @staticmethod
    def _cache(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        # a bundle on disk may change between calls: clients must not cache the digests
        return {"ttlMs": 0, "cacheScope": "private"} if ctx.protocol_version >= CACHEABLE_SINCE else {}

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
                    ) -> dict[str, Any]:
        return {"skills": [self.bundle.entry()], **self._cache(ctx)}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: GetSkillParams) -> dict[str, Any]:
        if params.uri != self.bundle.uri():
            raise MCPError(code=INVALID_PARAMS, message=f"no skill is served at {params.uri!r}; this server serves "
                           f"{self.bundle.uri()}")
        return {"skill": self.bundle.entry(), **self._cache(ctx)}

"""Confinement: the allowed-roots policy every path the file-access layer opens is checked against.

:func:`confined_to` installs an allowed-roots policy for the current context (the MCP server does it for
every tool call; worker threads and forked workers inherit it). While it is set, every path the layer
reads or writes must resolve, symlinks followed, inside a root; a path outside is an
:class:`OutsideRootsError`. seqpack's own package directory (bundled example configs, demo data) may be
read, never written. :func:`scratch_directory` makes a private temporary directory that counts as a
root while it exists.
"""

from __future__ import annotations

import contextvars
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from seqpack.core.errors import InputError

log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str]

__all__ = ["OutsideRootsError", "allowed_roots", "confine", "confined_to", "scratch_directory"]


# ------------------------------------------------------------------------------------------------
# Confinement
# ------------------------------------------------------------------------------------------------


class OutsideRootsError(InputError):
    """A path (given, or found inside a file) resolves, symlinks followed, outside the allowed roots."""


_ROOTS: contextvars.ContextVar[tuple[Path, ...] | None] = contextvars.ContextVar("seqpack_roots", default=None)
_SCRATCH: set[Path] = set()
_SCRATCH_LOCK = threading.Lock()


@contextmanager
def confined_to(roots: Iterable[PathLike]) -> Iterator[tuple[Path, ...]]:
    """Confine every path the layer reads or writes to ``roots`` (resolved) inside the block."""
    resolved = tuple(Path(os.path.realpath(r)) for r in roots)
    if not resolved:
        raise ValueError("at least one root is required")
    token = _ROOTS.set(resolved)
    try:
        yield resolved
    finally:
        _ROOTS.reset(token)


def allowed_roots() -> tuple[Path, ...] | None:
    """The roots of the current policy, or None when nothing is confined."""
    return _ROOTS.get()


#: Read-only under any policy: seqpack's own package (bundled examples, demo data, the skill copy).
_PACKAGE = Path(os.path.realpath(__file__)).parents[1]  # the seqpack package


def _inside(resolved: Path, roots: tuple[Path, ...], *, write: bool = False) -> bool:
    with _SCRATCH_LOCK:
        scratch = tuple(_SCRATCH)
    readable = () if write else (_PACKAGE,)
    return any(resolved == r or resolved.is_relative_to(r) for r in (*roots, *scratch, *readable))


def confine(path: PathLike, *, what: str = "path", field: str | None = None, write: bool = False) -> Path:
    """``path`` resolved (symlinks followed); :class:`OutsideRootsError` when a policy is set and it
    lies outside every root (for a read, seqpack's own package directory counts as one). Without a
    policy it only resolves."""
    resolved = Path(os.path.realpath(path))
    roots = _ROOTS.get()
    if roots is not None and not _inside(resolved, roots, write=write):
        where = "" if str(resolved) == os.fspath(path) else f" (it resolves to {resolved})"
        raise OutsideRootsError(
            f"{what} lies outside the allowed roots ({', '.join(map(str, roots))}){where}", file=os.fspath(path),
            field=field, fix="use a path inside a root, or restart the server with another --root",
        )
    return resolved


def confine_fd(fd: int, path: PathLike, what: str, field: str | None) -> None:
    """Confine what a descriptor really is (a file swapped for a symlink after the check is caught)."""
    if _ROOTS.get() is None:
        return
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if real.startswith("/") and not _inside(Path(real), _ROOTS.get() or ()):
        raise OutsideRootsError(f"{what} lies outside the allowed roots (it resolves to {real})",
                                file=os.fspath(path), field=field)


@contextmanager
def scratch_directory(prefix: str = "seqpack-", *, parent: PathLike | None = None) -> Iterator[Path]:
    """A private temporary directory (removed at the end) that counts as an allowed root while it exists."""
    path = Path(os.path.realpath(tempfile.mkdtemp(prefix=prefix, dir=parent)))
    with _SCRATCH_LOCK:
        _SCRATCH.add(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with _SCRATCH_LOCK:
            _SCRATCH.discard(path)

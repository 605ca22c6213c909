"""Write a file or a directory atomically: into a temporary one next to it, then rename over the target.

Readers never see a half-written file or directory, and concurrent writers of the same content
are harmless (the last rename wins). A file gets the usual permissions (``0o666`` minus the
umask) rather than the private ``0o600`` of a temporary file. Nothing is left behind on failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from reference_impl.errors import ArtifactError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(target: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a binary handle whose content replaces ``target`` when the block ends without error."""
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_path(path: str | os.PathLike[str]) -> None:
    """Delete a file, a symlink (not its target) or a directory tree; nothing when it is absent."""
    p = Path(path)
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.exists():
        shutil.rmtree(p)


@contextmanager
def atomic_directory(target: str | os.PathLike[str], *, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory next to ``target``; it becomes ``target`` when the block succeeds.

    ``replace=True`` lets an existing ``target`` be removed first (the caller decides it may go:
    only what the command itself wrote); otherwise a target that appeared meanwhile is an
    :class:`~reference_impl.errors.ArtifactError` and stays as it is. On any failure the temporary
    directory is deleted and ``target`` is untouched.
    """
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    remove_path(tmp)
    tmp.mkdir()
    try:
        yield tmp
        if path.exists() or path.is_symlink():
            if not replace:
                raise ArtifactError("the output appeared while it was being written (another run?)", file=str(path),
                                    fix="check what wrote it; pass overwrite to replace it")
            remove_path(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

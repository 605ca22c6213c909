"""Atomic output: write targets, and files and directories that appear whole or not at all.

:func:`check_write_target` refuses a symlink (seqpack never writes through one), a directory and any
special file as the target of a write. :func:`atomic_output` writes a file and :func:`atomic_directory`
a directory under a temporary name next to the target (:mod:`.temporaries`), then renames it over the
target, so readers see the old or the new content, never a mix. A write the file system refuses (full
disk, read-only, no permission) raises :class:`~seqpack.core.errors.ArtifactError` naming the
*target*, never the temporary name.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import BinaryIO

from seqpack.core.errors import ArtifactError, SeqpackError, UsageError
from seqpack.io.confine import confine
from seqpack.io.reading import file_kind
from seqpack.io.temporaries import (
    OLD_TAG,
    creating,
    exists_or_link,
    hold_lock,
    lock_path,
    recover_temporaries,
    release_lock,
    remove_path,
    temporary_name,
    token_of,
)

log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str]

__all__ = ["atomic_directory", "atomic_output", "check_write_target", "write_text"]


# ------------------------------------------------------------------------------------------------
# Write targets and atomic writes
# ------------------------------------------------------------------------------------------------


def check_write_target(path: PathLike, *, what: str = "output", field: str | None = None) -> Path:
    """Refuse to write ``path`` when it is a symlink, a directory or a special file, or lies outside the roots.

    An absent path or a regular file may be written (replaced atomically).
    """
    p = Path(path)
    confine(p.parent, what=what, field=field, write=True)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as exc:
        raise UsageError(f"cannot use {what}: {exc.strerror or exc}", file=str(p), field=field) from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{what} is a symbolic link; seqpack does not write through symlinks", file=str(p),
                         field=field, fix="give the link's target itself, or remove the link")
    kind = file_kind(st.st_mode)
    if kind == "a directory":
        raise UsageError(f"{what} is a directory; name a file", file=str(p), field=field)
    if kind is not None:
        raise UsageError(f"{what} is {kind}; seqpack writes and replaces regular files only", file=str(p),
                         field=field, fix="choose another path")
    return p


def _write_error(exc: OSError, target: Path, temporary: Path) -> ArtifactError:
    """The file-system error of a write, naming the target (not the temporary).

    An error about another file (an input read inside the block) names that file.
    """
    reason = exc.strerror or str(exc)
    if exc.filename and temporary.name not in str(exc.filename) and Path(exc.filename) != target:
        return ArtifactError(reason, file=str(exc.filename))
    fix = {
        errno.ENOSPC: "free space on that file system, or write the output elsewhere",
        errno.EDQUOT: "free space within your quota, or write the output elsewhere",
        errno.EROFS: "the file system is read-only: choose another output location",
        errno.EACCES: "choose an output location you can write to",
        errno.EPERM: "choose an output location you can write to",
        errno.ENOTDIR: "a part of the output path is a file, not a directory",
    }.get(exc.errno or 0)
    return ArtifactError(f"cannot write the output: {reason}", file=str(target), fix=fix)


@contextmanager
def _converting(target: Path, temporary: Path) -> Iterator[None]:
    try:
        yield
    except SeqpackError as err:
        if err.file is not None and err.file.startswith(str(temporary)):  # a file inside the temporary
            err.file = str(target) + err.file[len(str(temporary)):]
        raise
    except OSError as exc:
        raise _write_error(exc, target, temporary) from exc


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _prepare_parent(path: Path, temporary: Path) -> None:
    confine(path.parent, what="the output's folder", write=True)
    with _converting(path, temporary):
        path.parent.mkdir(parents=True, exist_ok=True)
    if not path.parent.is_dir():
        raise ArtifactError("the output's parent is not a directory", file=str(path.parent))
    recover_temporaries(path.parent)


@contextmanager
def atomic_output(target: PathLike, *, what: str = "output", field: str | None = None) -> Iterator[BinaryIO]:
    """Yield a binary handle whose content replaces ``target`` when the block ends without error.

    ``target`` must be absent or a regular file (:func:`check_write_target`), also right before the rename.
    """
    path = check_write_target(target, what=what, field=field)
    tmp = temporary_name(path)
    _prepare_parent(path, tmp)
    try:
        with _converting(path, tmp), creating(path.parent):
            fd = hold_lock(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), tmp)
        with _converting(path, tmp), os.fdopen(fd, "wb") as fh:
            yield fh  # type: ignore[misc]
            fh.flush()
            os.chmod(tmp, 0o666 & ~_umask())
            check_write_target(path, what=what, field=field)  # still not a link or a special file
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text(target: PathLike, text: str, *, what: str = "output", field: str | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``target`` atomically (:func:`atomic_output`)."""
    with atomic_output(target, what=what, field=field) as fh:
        fh.write(text.encode("utf-8"))
    return Path(target)


def _step(name: str) -> None:
    """A named point of a directory swap, reached after the action it names: ``start``, ``aside`` (the old
    directory renamed aside), ``in`` (the new one renamed in), ``done`` (the old one deleted). A no-op; the
    fault tests kill the process here to prove that every step is recoverable."""


@contextmanager
def atomic_directory(
    target: PathLike,
    *,
    replace: bool = False,
    check_replace: Callable[[Path], None] | None = None,
    keep_existing: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield an empty temporary directory next to ``target``; it becomes ``target`` when the block succeeds.

    ``replace=True`` lets an existing ``target`` be replaced (the caller decides it may go: only
    what the command itself wrote); ``check_replace(target)``, when given, runs right before the
    swap and raises to keep it. The swap locks the old target, renames it aside (``seqpack-old``),
    renames the new one in, then deletes the old one; a failure restores it and ``kill -9`` at any
    step is undone by the next writer (module docstring). Without ``replace``, a target that
    appeared meanwhile (another run) is an :class:`~seqpack.core.errors.ArtifactError` and stays
    as it is, unless ``keep_existing(target)`` says it is what this run would have written (a
    concurrent run of the same work finished first: the temporary is dropped); an empty directory
    there is simply taken. On any failure the temporary directory is deleted and ``target`` is
    untouched.
    """
    path = Path(target)
    tmp = temporary_name(path)
    _prepare_parent(path, tmp)
    with ExitStack() as locks:
        with _converting(path, tmp), creating(path.parent):
            tmp.mkdir()
            locks.callback(release_lock, lock_path(tmp))
        try:
            with _converting(path, tmp):
                yield tmp
                _commit(tmp, path, replace, check_replace, keep_existing, locks)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _appeared(path: Path) -> ArtifactError:
    return ArtifactError("the output appeared while it was being written (another run?)", file=str(path),
                         fix="check what wrote it; pass overwrite to replace it")


def _commit(
    tmp: Path, path: Path, replace: bool, check_replace: Callable[[Path], None] | None,
    keep_existing: Callable[[Path], bool] | None, locks: ExitStack,
) -> None:
    if not replace:
        try:
            os.rename(tmp, path)  # onto nothing, or onto an empty directory (nothing to lose)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
        if keep_existing is not None and keep_existing(path):
            log.info("%s was written meanwhile by another run with the same content; keeping it", path)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        raise _appeared(path)
    if not exists_or_link(path):
        os.rename(tmp, path)
        return
    if check_replace is not None:
        check_replace(path)
    old = temporary_name(path, kind=OLD_TAG, token=token_of(tmp))
    if not path.is_symlink() and path.is_dir():
        locks.callback(release_lock, lock_path(path))  # the old directory stays locked under its old name
    _step("start")
    os.rename(path, old)
    _step("aside")  # kill -9 from here on: the next writer puts the old directory back
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    _step("in")  # from here on: the next writer deletes the old directory
    try:
        remove_path(old)
    except OSError as exc:  # the new target is in place; the old copy is only clutter
        log.warning("could not delete the replaced output %s (%s)", old, exc)
    _step("done")

"""Write a file or a directory atomically: into a temporary one next to it, then rename over the target.

Readers never see a half-written file or directory, and concurrent writers of the same content
are harmless. A file gets the usual permissions (``0o666`` minus the umask) rather than the
private ``0o600`` of a temporary file. Nothing is left behind on failure.

Temporary names are recognisable: ``.<target name>.seqpack-tmp-<host>-<pid>-<random>``. A process
killed with ``kill -9`` cannot clean up; the next :func:`atomic_directory` or :func:`atomic_output`
in the same folder removes the temporaries of processes that are gone (same host, pid not
running) and logs the ones it cannot judge (another host's). :func:`stale_temporaries` lists them.

A write that fails for a reason of the file system (full disk, read-only, no permission) raises
:class:`~reference_impl.errors.ArtifactError` naming the *target*, never the temporary name.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from reference_impl.errors import ArtifactError, SeqpackError

log = logging.getLogger(__name__)

__all__ = ["StaleTemporary", "atomic_directory", "atomic_output", "clean_stale_temporaries", "remove_path",
           "stale_temporaries", "temporary_name"]

_TAG = "seqpack-tmp"
_OLD_TAG = "seqpack-old"
_PATTERN = re.compile(rf"^\.(?P<name>.+)\.(?P<kind>{_TAG}|{_OLD_TAG})-(?P<host>[A-Za-z0-9_-]+)-(?P<pid>\d+)-[0-9a-f]+$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def temporary_name(target: str | os.PathLike[str], *, kind: str = _TAG) -> Path:
    """A fresh, recognisable temporary path next to ``target`` (see the module docstring)."""
    path = Path(target)
    return path.parent / f".{path.name}.{kind}-{_host()}-{os.getpid()}-{secrets.token_hex(4)}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


@dataclass(frozen=True)
class StaleTemporary:
    """A temporary left by seqpack in a folder: its path, the writer's host and pid, and whether it is gone."""

    path: Path
    host: str
    pid: int
    writer_gone: bool


def stale_temporaries(folder: str | os.PathLike[str]) -> list[StaleTemporary]:
    """seqpack temporaries in ``folder`` whose writer is not running here (``writer_gone``) or is
    on another host (cannot be judged). Temporaries of live local processes are not listed."""
    out = []
    here = _host()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        m = _PATTERN.match(entry.name)
        if m is None:
            continue
        pid, host = int(m["pid"]), m["host"]
        if host == here and (pid == os.getpid() or _alive(pid)):
            continue
        out.append(StaleTemporary(Path(entry.path), host, pid, writer_gone=host == here))
    return out


def clean_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries of gone local writers in ``folder``; log the others. Returns what was removed."""
    removed = []
    for stale in stale_temporaries(folder):
        if not stale.writer_gone:
            log.warning("leaving %s: written on host %s (pid %d), which cannot be checked from here; remove it "
                        "if no run there is writing it", stale.path, stale.host, stale.pid)
            continue
        try:
            remove_path(stale.path)
        except OSError as exc:
            log.warning("cannot remove the stale temporary %s (%s)", stale.path, exc)
            continue
        log.warning("removed %s, left by a run that ended without cleaning up (pid %d)", stale.path, stale.pid)
        removed.append(stale.path)
    return removed


def _write_error(exc: OSError, target: Path, temporary: Path) -> ArtifactError:
    """The file-system error of a write, naming the target (not the temporary).

    An error about another file (an input read inside the block) names that file.
    """
    reason = exc.strerror or str(exc)
    if exc.filename and temporary.name not in str(exc.filename) and Path(exc.filename) != target:
        return ArtifactError(reason, file=str(exc.filename))
    name = str(target)
    fix = {
        errno.ENOSPC: "free space on that file system, or write the output elsewhere",
        errno.EDQUOT: "free space within your quota, or write the output elsewhere",
        errno.EROFS: "the file system is read-only: choose another output location",
        errno.EACCES: "choose an output location you can write to",
        errno.EPERM: "choose an output location you can write to",
        errno.ENOTDIR: "a part of the output path is a file, not a directory",
    }.get(exc.errno or 0)
    return ArtifactError(f"cannot write the output: {reason}", file=name, fix=fix)


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


def _prepare_parent(path: Path, temporary: Path) -> None:
    with _converting(path, temporary):
        path.parent.mkdir(parents=True, exist_ok=True)
    if not path.parent.is_dir():
        raise ArtifactError("the output's parent is not a directory", file=str(path.parent))
    clean_stale_temporaries(path.parent)


@contextmanager
def atomic_output(target: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a binary handle whose content replaces ``target`` when the block ends without error."""
    path = Path(target)
    tmp = temporary_name(path)
    _prepare_parent(path, tmp)
    try:
        with _converting(path, tmp):
            fh = open(tmp, "xb")  # noqa: SIM115 - closed below, before the rename
        with _converting(path, tmp), fh:
            yield fh
        with _converting(path, tmp):
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


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


@contextmanager
def atomic_directory(
    target: str | os.PathLike[str],
    *,
    replace: bool = False,
    check_replace: Callable[[Path], None] | None = None,
    keep_existing: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield an empty temporary directory next to ``target``; it becomes ``target`` when the block succeeds.

    ``replace=True`` lets an existing ``target`` be replaced (the caller decides it may go: only
    what the command itself wrote); ``check_replace(target)``, when given, runs right before the
    swap and raises to keep it. The old target is renamed aside first, the new one renamed in,
    then the old one deleted, so a failed swap restores it. Without ``replace``, a target that
    appeared meanwhile (another run) is an :class:`~reference_impl.errors.ArtifactError` and stays
    as it is, unless ``keep_existing(target)`` says it is what this run would have written (a
    concurrent run of the same work finished first: the temporary is dropped); an empty directory
    there is simply taken. On any failure the temporary directory is deleted and ``target`` is
    untouched.
    """
    path = Path(target)
    tmp = temporary_name(path)
    _prepare_parent(path, tmp)
    with _converting(path, tmp):
        tmp.mkdir()
    try:
        with _converting(path, tmp):
            yield tmp
            _commit(tmp, path, replace, check_replace, keep_existing)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _appeared(path: Path) -> ArtifactError:
    return ArtifactError("the output appeared while it was being written (another run?)", file=str(path),
                         fix="check what wrote it; pass overwrite to replace it")


def _commit(
    tmp: Path, path: Path, replace: bool, check_replace: Callable[[Path], None] | None,
    keep_existing: Callable[[Path], bool] | None,
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
    if not _exists(path):
        os.rename(tmp, path)
        return
    if check_replace is not None:
        check_replace(path)
    old = temporary_name(path, kind=_OLD_TAG)
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    try:
        remove_path(old)
    except OSError as exc:  # the new target is in place; the old copy is only clutter
        log.warning("could not delete the replaced output %s (%s)", old, exc)

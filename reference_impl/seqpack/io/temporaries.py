"""Temporaries, their locks, and recovery after ``kill -9``.

Their names are ``.<target>.seqpack-tmp-<host>-<token>`` (the new content) and
``.<target>.seqpack-old-<host>-<token>`` (a replaced directory during a swap). The writer holds an
exclusive ``flock`` on each for the whole write, so whether a writer is alive is asked of the kernel,
not judged from a PID (which another PID namespace cannot see). Before writing into a folder,
:func:`recover_temporaries` finishes what ``kill -9`` interrupted there: a swap stopped after the old
directory was moved aside is undone (the old directory goes back when the target is missing), other
unlocked temporaries are removed, and temporaries written on another host are reported and left alone.
A replacement is therefore recoverable at every step: the target holds the old or the new directory,
or the old one waits under its ``seqpack-old`` name for the next writer to put it back.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str]

__all__ = ["exists_or_link", "remove_path", "StaleTemporary", "recover_temporaries", "stale_temporaries", "temporary_name"]


# ------------------------------------------------------------------------------------------------
# Temporaries, their locks, and recovery after kill -9
# ------------------------------------------------------------------------------------------------

TMP_TAG = "seqpack-tmp"
OLD_TAG = "seqpack-old"
_PATTERN = re.compile(rf"^\.(?P<name>.+)\.(?P<kind>{TMP_TAG}|{OLD_TAG})-(?P<host>[A-Za-z0-9_]+)-(?P<token>[0-9a-f]{{16}})$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def temporary_name(target: PathLike, *, kind: str = TMP_TAG, token: str | None = None) -> Path:
    """A fresh, recognisable temporary path next to ``target`` (see the module docstring)."""
    path = Path(target)
    return path.parent / f".{path.name}.{kind}-{_host()}-{token or secrets.token_hex(8)}"


def token_of(path: Path) -> str:
    m = _PATTERN.match(path.name)
    return m["token"] if m else secrets.token_hex(8)


class _Unlockable(Exception):
    """The file system offers no flock here: liveness cannot be asked."""


def _lock(fd: int, *, shared: bool = False, wait: bool = False) -> None:
    """flock ``fd``; BlockingIOError when another holds it, :class:`_Unlockable` when flock is unsupported."""
    flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        raise
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise BlockingIOError(exc.errno, exc.strerror) from None
        raise _Unlockable(str(exc)) from None


def _open_entry(path: Path) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    return os.open(path, flags)


#: Directories this process holds the lock of (device, inode): never locked again through another
#: descriptor here (flock would wait for ourselves), e.g. when writing a file inside a temporary.
_HELD: set[tuple[int, int]] = set()
_HELD_LOCK = threading.Lock()


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def hold_lock(fd: int, path: Path) -> int:
    """``fd`` once it holds its exclusive lock (closed on failure; kept unlocked where flock is unsupported)."""
    try:
        _lock(fd)
    except _Unlockable:
        log.debug("no flock on %s; its liveness cannot be checked by other runs", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def lock_path(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock (best effort where flock is unsupported);
    give it back with :func:`release_lock`."""
    fd = hold_lock(_open_entry(path), path)
    with _HELD_LOCK:
        _HELD.add(_identity(fd))
    return fd


def release_lock(fd: int) -> None:
    with _HELD_LOCK:
        _HELD.discard(_identity(fd))
    os.close(fd)


@contextmanager
def _folder_lock(folder: PathLike, *, shared: bool) -> Iterator[None]:
    """Lock ``folder`` (shared: a temporary is being created and locked; exclusive: temporaries are being
    judged), so recovery never judges a temporary in the instant between its creation and its lock. Skipped
    for a folder this process holds locked itself (a temporary being filled) and where flock is unsupported."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        with _HELD_LOCK:
            mine = _identity(fd) in _HELD
        if not mine:
            try:
                _lock(fd, shared=shared, wait=True)
            except _Unlockable:
                pass
        yield
    finally:
        os.close(fd)


def creating(folder: Path) -> contextlib.AbstractContextManager[None]:
    """Shared lock on ``folder`` while a temporary is created and locked (:func:`_folder_lock`)."""
    return _folder_lock(folder, shared=True)


@dataclass(frozen=True)
class StaleTemporary:
    """A temporary left by seqpack in a folder: its path, kind (``seqpack-tmp`` or ``seqpack-old``), the
    writer's host and token, and whether its writer is gone (False: another host's, which cannot be judged)."""

    path: Path
    kind: str
    host: str
    token: str
    writer_gone: bool

    @property
    def target(self) -> Path:
        """The output this temporary belongs to."""
        m = _PATTERN.match(self.path.name)
        return self.path.parent / (m["name"] if m else self.path.name)


def _judge(folder: PathLike) -> list[tuple[StaleTemporary, int | None]]:
    """Stale temporaries in ``folder``, each with the descriptor that holds its lock (None: not ours to act on)."""
    out: list[tuple[StaleTemporary, int | None]] = []
    here = _host()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    candidates = [(e, m) for e in entries if (m := _PATTERN.match(e.name)) is not None]
    if not candidates:
        return out
    with _folder_lock(folder, shared=False):
        for entry, m in candidates:
            path = Path(entry.path)
            if m["host"] != here:
                out.append((StaleTemporary(path, m["kind"], m["host"], m["token"], False), None))
                continue
            try:
                fd = _open_entry(path)
            except OSError:
                continue  # gone meanwhile, or not something seqpack made
            try:
                _lock(fd)
            except BlockingIOError:
                os.close(fd)  # a live writer holds it
                continue
            except _Unlockable:
                os.close(fd)
                out.append((StaleTemporary(path, m["kind"], m["host"], m["token"], False), None))
                continue
            out.append((StaleTemporary(path, m["kind"], m["host"], m["token"], True), fd))
    return out


def stale_temporaries(folder: PathLike) -> list[StaleTemporary]:
    """seqpack temporaries in ``folder`` that no live writer holds (``writer_gone``) or that another host
    wrote (cannot be judged from here). Temporaries of live writers are not listed."""
    found = _judge(folder)
    for _, fd in found:
        if fd is not None:
            os.close(fd)
    return [s for s, _ in found]


def recover_temporaries(folder: PathLike) -> list[Path]:
    """Finish what ``kill -9`` interrupted in ``folder`` (module docstring); returns the paths removed or restored."""
    done = []
    found = _judge(folder)
    # a replaced directory first: it goes back when its target is missing
    for stale, fd in sorted(found, key=lambda item: item[0].kind != OLD_TAG):
        try:
            if fd is None:
                log.warning("leaving %s: written on host %s, which cannot be checked from here; remove it if no "
                            "run there is writing it", stale.path, stale.host)
                continue
            if stale.kind == OLD_TAG and not exists_or_link(stale.target):
                os.rename(stale.path, stale.target)
                log.warning("restored %s from %s: a replacement was interrupted before the new version was in place",
                            stale.target, stale.path.name)
            else:
                remove_path(stale.path)
                log.warning("removed %s, left by a run that ended without cleaning up", stale.path)
            done.append(stale.path)
        except OSError as exc:
            log.warning("cannot recover the stale temporary %s (%s)", stale.path, exc)
        finally:
            if fd is not None:
                os.close(fd)
    return done


def remove_path(path: PathLike) -> None:
    """Delete a file, a symlink (not its target) or a directory tree; nothing when it is absent."""
    p = Path(path)
    if p.is_symlink() or (p.exists() and not p.is_dir()):
        p.unlink()
    elif p.exists():
        shutil.rmtree(p)


def exists_or_link(path: Path) -> bool:
    return path.exists() or path.is_symlink()

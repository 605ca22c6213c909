"""The one file-access layer: how seqpack opens, writes and replaces every path it touches.

Every command (and every MCP tool) goes through these functions for every path, including paths
it finds inside files (blend sources, image paths in rows, tokenizer files, caches):

**Reading.** :func:`open_regular`, :func:`read_bytes`, :func:`read_text` and :func:`regular_file`
accept regular files only (and the null device, which reads as an empty file). A FIFO, any
other character or block device, a socket or a directory is refused at once, naming the path and what it is: the path is ``stat``-ed before it is opened (a
device is never opened, a FIFO never waited on) and the opened descriptor is checked again.

**Confinement.** :func:`confined_to` installs an allowed-roots policy for the current context (the
MCP server does it for every tool call; worker threads and forked workers inherit it). While it
is set, every path the layer reads or writes must resolve, symlinks followed, inside a root; a
path outside is an :class:`OutsideRootsError`. seqpack's own package directory (bundled example
configs, demo data) may be read, never written. :func:`scratch_directory` makes a private temporary
directory that counts as a root while it exists.

**Writing.** :func:`check_write_target` refuses a symlink (seqpack never writes through one), a
directory and any special file as the target of a write. :func:`atomic_output` writes a file and
:func:`atomic_directory` a directory under a temporary name next to the target, then renames it
over the target, so readers see the old or the new content, never a mix.

**Temporaries.** Their names are ``.<target>.seqpack-tmp-<host>-<token>`` (the new content) and
``.<target>.seqpack-old-<host>-<token>`` (a replaced directory during a swap). The writer holds an
exclusive ``flock`` on each for the whole write, so whether a writer is alive is asked of the
kernel, not judged from a PID (which another PID namespace cannot see). Before writing into a
folder, :func:`recover_temporaries` finishes what ``kill -9`` interrupted there: a swap stopped
after the old directory was moved aside is undone (the old directory goes back when the target is
missing), other unlocked temporaries are removed, and temporaries written on another host are
reported and left alone. A replacement is therefore recoverable at every step: the target holds
the old or the new directory, or the old one waits under its ``seqpack-old`` name for the next
writer to put it back.

**Output directories.** :func:`check_output_root` refuses to create outputs in the file-system
root, the home directory or a system directory; :func:`check_replace_target` refuses to replace
those, the current directory (and its ancestors) and any directory holding an input.
An :class:`Owner` says how a command recognises a directory it wrote (its manifest and the file
records in it); :func:`examine_directory` compares a directory with them and
:func:`output_directory` writes one, replacing an existing directory only when it is the
command's own. Nothing the command did not write is ever deleted: a file or a directory nobody
recorded (even an empty one) makes the directory foreign.

A write the file system refuses (full disk, read-only, no permission) raises
:class:`~seqpack.core.errors.ArtifactError` naming the *target*, never the temporary name.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from seqpack.core.errors import ArtifactError, InputError, SeqpackError, UsageError

log = logging.getLogger(__name__)

__all__ = [
    "DirectoryState", "OutsideRootsError", "Owner", "StaleTemporary", "allowed_roots", "atomic_directory",
    "atomic_output", "check_output_root", "check_replace_target", "check_write_target", "confine", "confined_to",
    "examine_directory", "file_record", "open_regular", "output_directory", "read_bytes", "read_json", "read_text",
    "record_files", "recover_temporaries", "regular_file", "remove_path", "require_own", "scratch_directory",
    "stale_temporaries", "stray_files", "temporary_name", "verify_records", "write_text",
]

PathLike = str | os.PathLike[str]


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


def _confine_fd(fd: int, path: PathLike, what: str, field: str | None) -> None:
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


# ------------------------------------------------------------------------------------------------
# Reading regular files
# ------------------------------------------------------------------------------------------------


def _null_device() -> int | None:
    try:
        st = os.stat(os.devnull)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISCHR(st.st_mode) else None


_NULL_RDEV = _null_device()


def _readable_kind(st: os.stat_result) -> str | None:
    """:func:`_kind` for a read: the null device reads as an empty file (``validate /dev/null --set ...``)."""
    if stat.S_ISCHR(st.st_mode) and _NULL_RDEV is not None and st.st_rdev == _NULL_RDEV:
        return None
    return _kind(st.st_mode)


def _kind(mode: int) -> str | None:
    """What a non-regular entry is ("a FIFO (named pipe)", ...), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(path: PathLike, kind: str, what: str, error: type[SeqpackError], field: str | None) -> SeqpackError:
    return error(f"{what} is {kind}, not a regular file", file=os.fspath(path), field=field,
                 fix="give a regular file (seqpack never reads pipes, devices or sockets)")


def regular_file(
    path: PathLike, *, what: str = "file", error: type[SeqpackError] = InputError, field: str | None = None
) -> Path:
    """``path`` as a Path once it is a confined, existing regular file (``stat`` only, nothing is opened).

    For libraries that open files by name (pyarrow, tarfile); seqpack's own reads use :func:`open_regular`.
    """
    confine(path, what=what, field=field)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} not found", file=os.fspath(path), field=field) from None
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", file=os.fspath(path), field=field) from None
    kind = _readable_kind(st)
    if kind is not None:
        raise _not_regular(path, kind, what, error, field)
    return Path(path)


def is_regular_file(path: PathLike) -> bool:
    """True for an existing regular file (symlinks followed); never opens anything."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def open_regular(
    path: PathLike, *, what: str = "file", error: type[SeqpackError] = InputError, field: str | None = None
) -> BinaryIO:
    """Open a confined regular file for binary reading (see the module docstring: never blocks)."""
    regular_file(path, what=what, error=error, field=field)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{what} not found", file=os.fspath(path), field=field) from None
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", file=os.fspath(path), field=field) from None
    try:
        kind = _readable_kind(os.fstat(fd))
        if kind is not None:  # swapped between the stat and the open
            raise _not_regular(path, kind, what, error, field)
        _confine_fd(fd, path, what, field)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(
    path: PathLike, *, what: str = "file", error: type[SeqpackError] = InputError, limit: int | None = None,
    field: str | None = None,
) -> bytes:
    """The bytes of a regular file; larger than ``limit`` bytes is an ``error`` (read to the limit only)."""
    with open_regular(path, what=what, error=error, field=field) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(f"{what} is larger than {limit} bytes", file=os.fspath(path), field=field)
    return data


def read_text(
    path: PathLike, *, what: str = "file", error: type[SeqpackError] = InputError, limit: int | None = None,
    field: str | None = None,
) -> str:
    """The UTF-8 text of a regular file (:func:`read_bytes`); bytes that are not UTF-8 are an ``error``."""
    raw = read_bytes(path, what=what, error=error, limit=limit, field=field)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 (byte {exc.start})", file=os.fspath(path), field=field) from None


def read_json(
    path: PathLike, *, what: str = "file", error: type[SeqpackError] = ArtifactError, limit: int | None = 64 << 20
) -> Any:
    """The JSON value of a regular file (:func:`read_text`); malformed or too deeply nested JSON is an ``error``."""
    text = read_text(path, what=what, error=error, limit=limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON ({exc.msg})", file=os.fspath(path), line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise error(f"{what} is not valid JSON ({str(exc).split(';')[0]})", file=os.fspath(path)) from None


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
    kind = _kind(st.st_mode)
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
        with _converting(path, tmp), _creating(path.parent):
            fd = _hold(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), tmp)
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


def remove_path(path: PathLike) -> None:
    """Delete a file, a symlink (not its target) or a directory tree; nothing when it is absent."""
    p = Path(path)
    if p.is_symlink() or (p.exists() and not p.is_dir()):
        p.unlink()
    elif p.exists():
        shutil.rmtree(p)


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


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
        with _converting(path, tmp), _creating(path.parent):
            tmp.mkdir()
            locks.callback(_release, _lock_path(tmp))
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
    if not _exists(path):
        os.rename(tmp, path)
        return
    if check_replace is not None:
        check_replace(path)
    old = temporary_name(path, kind=_OLD_TAG, token=_token_of(tmp))
    if not path.is_symlink() and path.is_dir():
        locks.callback(_release, _lock_path(path))  # the old directory stays locked under its old name
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


# ------------------------------------------------------------------------------------------------
# Temporaries, their locks, and recovery after kill -9
# ------------------------------------------------------------------------------------------------

_TAG = "seqpack-tmp"
_OLD_TAG = "seqpack-old"
_PATTERN = re.compile(rf"^\.(?P<name>.+)\.(?P<kind>{_TAG}|{_OLD_TAG})-(?P<host>[A-Za-z0-9_]+)-(?P<token>[0-9a-f]{{16}})$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def temporary_name(target: PathLike, *, kind: str = _TAG, token: str | None = None) -> Path:
    """A fresh, recognisable temporary path next to ``target`` (see the module docstring)."""
    path = Path(target)
    return path.parent / f".{path.name}.{kind}-{_host()}-{token or secrets.token_hex(8)}"


def _token_of(path: Path) -> str:
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


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _hold(fd: int, path: Path) -> int:
    """``fd`` once it holds its exclusive lock (closed on failure; kept unlocked where flock is unsupported)."""
    try:
        _lock(fd)
    except _Unlockable:
        log.debug("no flock on %s; its liveness cannot be checked by other runs", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock_path(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock (best effort where flock is unsupported);
    give it back with :func:`_release`."""
    fd = _hold(_open_entry(path), path)
    with _SCRATCH_LOCK:
        _HELD.add(_identity(fd))
    return fd


def _release(fd: int) -> None:
    with _SCRATCH_LOCK:
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
        with _SCRATCH_LOCK:
            mine = _identity(fd) in _HELD
        if not mine:
            try:
                _lock(fd, shared=shared, wait=True)
            except _Unlockable:
                pass
        yield
    finally:
        os.close(fd)


def _creating(folder: Path) -> contextlib.AbstractContextManager[None]:
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
    for stale, fd in sorted(found, key=lambda item: item[0].kind != _OLD_TAG):
        try:
            if fd is None:
                log.warning("leaving %s: written on host %s, which cannot be checked from here; remove it if no "
                            "run there is writing it", stale.path, stale.host)
                continue
            if stale.kind == _OLD_TAG and not _exists(stale.target):
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


# ------------------------------------------------------------------------------------------------
# Protected places
# ------------------------------------------------------------------------------------------------

#: System directories no command writes into or replaces (besides the file-system root).
SYSTEM_DIRECTORIES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin",
                      "/sys", "/usr", "/var")


def _real(path: PathLike) -> Path:
    """``path`` with symlinks resolved; never raises (a symlink loop stays as it is)."""
    return Path(os.path.realpath(path))


def _system_reason(resolved: Path) -> str | None:
    if resolved == Path(resolved.anchor):
        return "it is the root of the file system"
    if str(resolved) in SYSTEM_DIRECTORIES or any(resolved.is_relative_to(d) for d in ("/proc", "/sys", "/dev")):
        return "it is a system directory"
    return None


def check_output_root(target: PathLike, *, owner: str = "seqpack", field: str = "out",
                      allow_home: bool = False) -> Path:
    """``target`` as a Path for a directory a command creates its outputs in; refused when it names a file,
    the file-system root, a system directory or (unless ``allow_home``) the home directory."""
    path = Path(target)
    if path.exists() and not path.is_dir():
        raise UsageError("the output path names a file; give a directory", file=str(path), field=field)
    resolved = confine(path, what="the output directory", field=field, write=True)
    why = _system_reason(resolved)
    if why is None and not allow_home and resolved == _real(Path.home()):
        why = "it is the home directory"
    if why is not None:
        raise UsageError(f"{owner} will not write its output here: {why}", file=str(path), field=field,
                         fix="give an output directory of its own (for example a new folder inside a project)")
    return path


def _protected(target: Path, inputs: Iterable[PathLike]) -> str | None:
    """Why replacing ``target`` would be unsafe whatever it holds, or None."""
    resolved = _real(target)
    why = _system_reason(resolved)
    if why is not None:
        return why
    if resolved == _real(Path.home()):
        return "it is the home directory"
    cwd = _real(Path.cwd())
    if resolved == cwd:
        return "it is the current directory"
    if resolved in cwd.parents:
        return "it contains the current directory"
    for item in inputs:
        p = _real(item)
        if p == resolved or resolved in p.parents:
            return f"it holds an input of this run ({item})"
    return None


def check_replace_target(target: PathLike, *, inputs: Iterable[PathLike] = (), owner: str = "seqpack") -> None:
    """Refuse to replace ``target`` when it is a protected place (module docstring).

    Raises :class:`~seqpack.core.errors.ArtifactError`; ``owner`` names the command in the message.
    """
    why = _protected(Path(target), inputs)
    if why is not None:
        raise ArtifactError(
            f"{owner} will not replace this directory: {why}", file=str(target),
            fix="give an output directory of its own (a new or empty one)",
        )


# ------------------------------------------------------------------------------------------------
# File records and ownership
# ------------------------------------------------------------------------------------------------

_CHUNK = 1 << 20


def file_record(path: PathLike) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex}`` of one regular file (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    size = 0
    with open_regular(path, what="file", error=ArtifactError) as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def _entries(root: Path) -> list[str]:
    """Everything under ``root`` a command may have written or found: files (special ones too), symlinks and
    empty directories (with a trailing ``/``), as sorted POSIX paths relative to it."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        links = [d for d in dirnames if (base / d).is_symlink()]
        for name in filenames + links:
            out.append((base / name).relative_to(root).as_posix())
        if not dirnames and not filenames and base != root:
            out.append(base.relative_to(root).as_posix() + "/")
    return sorted(out)


def record_files(root: PathLike, *, exclude: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """Records (:func:`file_record`) of every file under ``root`` except ``exclude``, by relative path."""
    root = Path(root)
    skip = set(exclude)
    return {name: file_record(root / name) for name in _entries(root) if name not in skip and not name.endswith("/")}


def stray_files(root: PathLike, known: Iterable[str]) -> list[str]:
    """Entries under ``root`` (files, links, empty directories) that are not in ``known`` (relative POSIX paths)."""
    expected = set(known)
    return [name for name in _entries(Path(root)) if name not in expected]


def verify_records(root: PathLike, records: Mapping[str, Mapping[str, Any]], *, also_known: Iterable[str] = ()) -> list[str]:
    """Problems of ``root`` against ``records`` (one line each; empty when it matches exactly).

    Sizes are compared before hashes, so a truncated file costs no read. ``also_known`` lists
    files that are legitimately there without a record (the manifest itself).
    """
    root = Path(root)
    problems = []
    for name, want in records.items():
        path = root / name
        if not is_regular_file(path) or path.is_symlink():
            problems.append(f"{name}: missing" if not _exists(path) else f"{name}: not a regular file")
            continue
        size = path.stat().st_size
        if size != want.get("size"):
            problems.append(f"{name}: {size} bytes, the manifest recorded {want.get('size')}")
            continue
        if file_record(path)["sha256"] != want.get("sha256"):
            problems.append(f"{name}: content differs from the manifest's SHA-256")
    for name in stray_files(root, [*records, *also_known]):
        problems.append(f"{name}: not written by seqpack (a stray file)")
    return problems


@dataclass(frozen=True)
class Owner:
    """How a command recognises an output directory it wrote.

    ``manifest``: the file it writes there; ``format``: that file's ``format`` value; ``flag``: the
    option that lets it replace its own output (named in messages); ``legacy``: the names a manifest
    written before file records lists (None: such a manifest is not trusted to list anything);
    ``validate``: raises :class:`~seqpack.core.errors.ArtifactError` for a manifest of the right
    format that lacks what the command needs.
    """

    command: str
    manifest: str
    format: str
    flag: str
    legacy: Callable[[dict[str, Any]], list[str]] | None = None
    validate: Callable[[dict[str, Any]], None] | None = None

    def read(self, root: PathLike, *, name: str | None = None) -> dict[str, Any] | None:
        """The manifest in ``root`` (``name``: another file name): None when absent; :class:`ArtifactError`
        when it is not a regular file, not JSON, or not this command's."""
        path = Path(root) / (name or self.manifest)
        if not _exists(path):
            return None
        data = read_json(path, what="the manifest", error=ArtifactError)
        if not isinstance(data, dict) or data.get("format") != self.format:
            raise ArtifactError(f"not a {self.command} manifest (format is not {self.format})", file=str(path))
        if self.validate is not None:
            try:
                self.validate(data)
            except ArtifactError as err:
                err.file = err.file or str(path)
                raise
        return data

    def listed(self, manifest: dict[str, Any]) -> list[str] | None:
        """Names the manifest says the directory holds (the manifest itself excluded), or None."""
        files = manifest.get("files")
        if isinstance(files, dict):
            return [str(name) for name in files]
        return None if self.legacy is None else self.legacy(manifest)


@dataclass
class DirectoryState:
    """What :func:`examine_directory` found: the manifest (None: absent or foreign, ``foreign`` says why),
    whether the directory is the command's own (only listed files), and why it cannot be reused."""

    path: Path
    manifest: dict[str, Any] | None
    owned: bool
    problems: list[str] = field(default_factory=list)
    foreign: str | None = None

    @property
    def reusable(self) -> bool:
        """Owned, and every file as recorded (and every extra check passed)."""
        return self.manifest is not None and self.owned and not self.problems


def examine_directory(
    root: PathLike, owner: Owner, *, verify: Callable[[Path, dict[str, Any]], list[str]] | None = None
) -> DirectoryState:
    """Compare an existing directory with its manifest's records; ``verify(root, manifest)`` adds problems."""
    root = Path(root)
    try:
        manifest = owner.read(root)
    except ArtifactError as err:
        why = f"it has no valid {owner.manifest} ({err.message})"
        return DirectoryState(root, None, False, [err.message], foreign=why)
    if manifest is None:
        return DirectoryState(root, None, False, [f"no {owner.manifest}"], foreign=f"it has no valid {owner.manifest}")
    listed = owner.listed(manifest)
    if listed is None:
        return DirectoryState(root, None, False, ["the manifest lists no files"],
                              foreign=f"it has no valid {owner.manifest} (it lists no files)")
    stray = stray_files(root, [*listed, owner.manifest])
    if stray:
        return DirectoryState(root, manifest, False, [f"{n}: not written by seqpack (a stray file)" for n in stray])
    problems = []
    files = manifest.get("files")
    if not isinstance(files, dict):
        problems.append("the manifest records no file sizes and hashes (written by an older seqpack)")
    else:
        problems += verify_records(root, files, also_known=(owner.manifest,))
    if not problems and verify is not None:
        problems += verify(root, manifest)
    return DirectoryState(root, manifest, True, problems)


def require_own(root: PathLike, owner: Owner, *, inputs: Iterable[PathLike] = ()) -> None:
    """Raise unless ``root`` is absent, empty, or a directory ``owner`` wrote (its manifest, nothing else) in a
    place that is not protected."""
    root = Path(root)
    if not _exists(root):
        return
    if root.is_symlink() or not root.is_dir():
        raise ArtifactError("the output path exists and is not a directory seqpack wrote", file=str(root),
                            fix="move it away; seqpack never deletes what it did not write")
    if not any(root.iterdir()):
        return  # an empty directory holds nothing to lose
    check_replace_target(root, inputs=inputs, owner=owner.command)
    state = examine_directory(root, owner)
    if state.manifest is None:
        raise ArtifactError(f"{owner.command} cannot tell that it wrote this directory: {state.foreign}",
                            file=str(root), fix="move it away or choose another output; seqpack never deletes what "
                            "it did not write")
    if not state.owned:
        raise ArtifactError(f"the directory holds files seqpack did not write ({'; '.join(state.problems[:3])}"
                            f"{'; ...' if len(state.problems) > 3 else ''})", file=str(root),
                            fix="move them away or choose another output; seqpack never deletes what it did not write")


@contextmanager
def output_directory(
    target: PathLike, owner: Owner, *, inputs: Iterable[PathLike] = (), replace_own: bool = False,
    keep_existing: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Write the directory ``target`` atomically (:func:`atomic_directory`), yielding the temporary to fill.

    An interrupted earlier write there is recovered first. An existing non-empty ``target`` is replaced
    only with ``replace_own`` and only when :func:`require_own` accepts it (now and again at the swap);
    without ``replace_own`` it is a :class:`~seqpack.core.errors.UsageError` naming ``owner.flag``.
    """
    path = Path(target)
    if path.is_symlink():
        raise UsageError("the output path is a symbolic link; seqpack does not replace or write through links",
                         file=str(path), fix="give the directory itself, or remove the link")
    if _exists(path) and not path.is_dir():
        raise UsageError("the output path names a file; give a directory", file=str(path))
    confine(path, what="the output directory", write=True)
    if path.parent.is_dir():
        recover_temporaries(path.parent)  # a swap killed midway puts its old directory back first
    inputs = list(inputs)
    replace = _exists(path) and any(path.iterdir())
    if replace and not replace_own:
        raise UsageError("output directory already exists", file=str(path),
                         fix=f"choose a new output or pass {owner.flag} to replace a directory {owner.command} wrote")
    if replace:
        require_own(path, owner, inputs=inputs)
    with atomic_directory(path, replace=replace, check_replace=lambda p: require_own(p, owner, inputs=inputs),
                          keep_existing=keep_existing) as tmp:
        yield tmp

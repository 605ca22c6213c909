"""Reading: regular files only.

:func:`open_regular`, :func:`read_bytes`, :func:`read_text` and :func:`regular_file` accept regular
files only (and the null device, which reads as an empty file). A FIFO, any other character or block
device, a socket or a directory is refused at once, naming the path and what it is: the path is
``stat``-ed before it is opened (a device is never opened, a FIFO never waited on) and the opened
descriptor is checked again. Every path goes through the confinement policy (:mod:`.confine`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from seqpack.core.errors import ArtifactError, InputError, SeqpackError
from seqpack.io.confine import confine, confine_fd

log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str]

__all__ = ["is_regular_file", "open_regular", "read_bytes", "read_json", "read_text", "regular_file"]


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
    """:func:`file_kind` for a read: the null device reads as an empty file (``validate /dev/null --set ...``)."""
    if stat.S_ISCHR(st.st_mode) and _NULL_RDEV is not None and st.st_rdev == _NULL_RDEV:
        return None
    return file_kind(st.st_mode)


def file_kind(mode: int) -> str | None:
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
        confine_fd(fd, path, what, field)
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

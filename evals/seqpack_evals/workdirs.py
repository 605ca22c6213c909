"""An agent's working directory as the harness reads it: walked without following a link, iteratively, with bounds.

Everything here treats the working directory as hostile input. A walk (:func:`walk`) opens every directory by
descriptor relative to its parent with ``O_NOFOLLOW``, so a symlink (to ``/proc``, to the run directory, to the
answer key) is recorded as a link and never entered or read, however deep it sits, and path length does not
matter. It is a loop, not a recursion, bounded in depth (:data:`MAX_DEPTH`) and in entries (:data:`MAX_ENTRIES`);
what lies past a bound is counted, not read. A file that cannot be read (mode 000, a FIFO, a device) is recorded
with the reason, never fatal. The working directory itself replaced by a link is recorded and left alone.

* :func:`snapshot`: ``relative path -> [size, mtime_ns, sha256 or a note]`` of the regular files;
* :func:`keep`: copy the regular files into the run directory (what the scorer and the graders read after the
  agent has exited), within size bounds;
* :func:`remove_tree`: delete a working directory (iteratively, by descriptor), reporting what it could not.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

#: How deep a walk goes below the working directory, and how many entries it reads at most.
MAX_DEPTH = 64
MAX_ENTRIES = 50_000
#: Largest file hashed (bigger ones are recorded by size and time only) and copied into the run directory.
MAX_HASH_BYTES = 64 << 20
MAX_KEEP_FILE_BYTES = 64 << 20
MAX_KEEP_TOTAL_BYTES = 512 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def printable(name: str) -> str:
    """A path as JSON can hold it: undecodable bytes shown as U+FFFD (file names are bytes on Linux)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@dataclass
class Entry:
    """One entry of a walk: its path relative to the root (parts), its ``lstat`` and the descriptor of its parent."""

    parts: tuple[str, ...]
    st: os.stat_result
    parent_fd: int

    @property
    def rel(self) -> str:
        """The relative path, ``/``-joined (undecodable bytes kept as surrogates)."""
        return "/".join(self.parts)

    @property
    def kind(self) -> str:
        """``file``, ``dir``, ``link`` or ``special``."""
        mode = self.st.st_mode
        if stat.S_ISREG(mode):
            return "file"
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISLNK(mode):
            return "link"
        return "special"


@dataclass
class WalkReport:
    """What a walk could not do: entries past the bounds, directories it could not open, the root replaced."""

    root_problem: str | None = None
    beyond_depth: int = 0
    beyond_entries: bool = False
    unreadable_dirs: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line per problem (for the transcript)."""
        out = []
        if self.root_problem:
            out.append(self.root_problem)
        if self.beyond_depth:
            out.append(f"{self.beyond_depth} directorie(s) deeper than {MAX_DEPTH} levels were not read")
        if self.beyond_entries:
            out.append(f"the walk stopped after {MAX_ENTRIES} entries")
        out += [f"{printable(d)}: directory not readable" for d in self.unreadable_dirs[:20]]
        return out


def _open_root(root: Path, report: WalkReport) -> int | None:
    try:
        return os.open(root, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symbolic link" if os.path.islink(root) else "not a directory"
            report.root_problem = f"the working directory was replaced by {kind}; nothing under it was read"
        else:
            report.root_problem = f"the working directory cannot be read: {exc.strerror}"
        return None


def walk(root: str | os.PathLike[str], report: WalkReport, *, skip: Sequence[str] = ()) -> Iterator[Entry]:
    """Every entry under ``root``, parents before children, never following a link (see the module docstring).

    ``skip``: relative paths (``/``-joined) whose subtree is left out. The parent descriptor of an entry is valid
    only until the next entry is yielded.
    """
    root_fd = _open_root(Path(root), report)
    if root_fd is None:
        return
    stack: list[tuple[int, tuple[str, ...], Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append((root_fd, (), iter(os.scandir(root_fd))))
    except OSError:
        os.close(root_fd)
        report.unreadable_dirs.append(".")
        return
    seen = 0
    try:
        while stack:
            fd, parts, it = stack[-1]
            entry = next(it, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            seen += 1
            if seen > MAX_ENTRIES:
                report.beyond_entries = True
                return
            sub = (*parts, entry.name)
            rel = "/".join(sub)
            if any(rel == s or rel.startswith(s + "/") for s in skip):
                continue
            try:
                st = os.lstat(entry.name, dir_fd=fd)
            except OSError:
                continue  # gone since it was listed
            item = Entry(sub, st, fd)
            yield item
            if item.kind != "dir":
                continue
            if len(sub) >= MAX_DEPTH:
                report.beyond_depth += 1
                continue
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                report.unreadable_dirs.append(rel)
                continue
            try:
                stack.append((child, sub, iter(os.scandir(child))))
            except OSError:
                os.close(child)
                report.unreadable_dirs.append(rel)
    finally:
        for fd, _parts, _it in stack:
            os.close(fd)


def _open_file(e: Entry) -> int:
    """A read descriptor of a regular file entry (never through a link, never blocking on a FIFO)."""
    fd = os.open(e.parts[-1], _FILE_FLAGS, dir_fd=e.parent_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def _digest(e: Entry) -> str:
    if e.st.st_size > MAX_HASH_BYTES:
        return f"not hashed: larger than {MAX_HASH_BYTES} bytes"
    try:
        fd = _open_file(e)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    h = hashlib.sha256()
    try:
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return h.hexdigest()


def snapshot(root: str | os.PathLike[str], exclude: Sequence[str] = ()) -> tuple[dict[str, list], list[str]]:
    """``(files, notes)``: ``relative path -> [size, mtime_ns, sha256 or why not]`` of every regular file under
    ``root`` (``exclude`` left out), plus links and special files as ``[-1, 0, "a symbolic link"]`` entries, and
    the walk's notes (bounds reached, unreadable directories, a replaced root)."""
    report = WalkReport()
    files: dict[str, list] = {}
    for e in walk(root, report, skip=exclude):
        if e.kind == "file":
            files[printable(e.rel)] = [e.st.st_size, e.st.st_mtime_ns, _digest(e)]
        elif e.kind == "link":
            files[printable(e.rel)] = [-1, 0, "a symbolic link (not followed)"]
        elif e.kind == "special":
            files[printable(e.rel)] = [-1, 0, "a special file (not read)"]
    return files, report.notes()


@dataclass
class KeepReport:
    """What :func:`keep` copied and what it left out (with the reason)."""

    copied: int = 0
    bytes: int = 0
    left_out: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _copy_file(e: Entry, dest_fd: int, report: KeepReport) -> None:
    name = e.parts[-1]
    try:
        src = _open_file(e)
    except OSError as exc:
        report.left_out.append(f"{printable(e.rel)}: unreadable ({exc.strerror or exc})")
        return
    try:
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dest_fd)
    except OSError as exc:
        os.close(src)
        report.left_out.append(f"{printable(e.rel)}: could not be written ({exc.strerror or exc})")
        return
    try:
        while chunk := os.read(src, _CHUNK):
            os.write(out, chunk)
        report.copied += 1
        report.bytes += e.st.st_size
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        report.left_out.append(f"{printable(e.rel)}: copy failed ({exc.strerror or exc})")
    finally:
        os.close(src)
        os.close(out)


def _dest_dir(dirs: dict[tuple[str, ...], int], parts: tuple[str, ...]) -> int:
    """The descriptor of the kept copy of directory ``parts``, made (with its parents) on first use."""
    if parts in dirs:
        return dirs[parts]
    parent = _dest_dir(dirs, parts[:-1]) if len(parts) > 1 else dirs[()]
    try:
        os.mkdir(parts[-1], 0o755, dir_fd=parent)
    except FileExistsError:
        pass
    dirs[parts] = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
    return dirs[parts]


def keep(root: str | os.PathLike[str], dest: str | os.PathLike[str], exclude: Sequence[str] = ()) -> KeepReport:
    """Copy the regular files under ``root`` into the new directory ``dest`` (same relative paths; a folder is made
    when a file goes into it), never following a link, within :data:`MAX_KEEP_FILE_BYTES` per file and
    :data:`MAX_KEEP_TOTAL_BYTES` in all; links, special files and what exceeds a bound are listed in the report, not
    copied. A full disk raises ``OSError``."""
    report = KeepReport()
    walk_report = WalkReport()
    dest_path = Path(dest)
    dest_path.mkdir(parents=True)
    dirs: dict[tuple[str, ...], int] = {(): os.open(dest_path, _DIR_FLAGS)}
    try:
        for e in walk(root, walk_report, skip=exclude):
            if e.kind == "dir":
                continue
            if e.kind != "file":
                report.left_out.append(f"{printable(e.rel)}: {'a symbolic link' if e.kind == 'link' else 'a special file'}"
                                       " (not copied)")
                continue
            if e.st.st_size > MAX_KEEP_FILE_BYTES or report.bytes + e.st.st_size > MAX_KEEP_TOTAL_BYTES:
                report.left_out.append(f"{printable(e.rel)}: {e.st.st_size} bytes, over the copy limit")
                continue
            try:
                parent = _dest_dir(dirs, e.parts[:-1]) if len(e.parts) > 1 else dirs[()]
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    raise
                report.left_out.append(f"{printable(e.rel)}: its folder could not be created ({exc.strerror})")
                continue
            _copy_file(e, parent, report)
    finally:
        for fd in dirs.values():
            os.close(fd)
    report.notes = walk_report.notes()
    return report


def remove_tree(root: str | os.PathLike[str]) -> list[str]:
    """Delete ``root`` and everything under it, iteratively and by descriptor (deep trees and long paths are fine;
    links are removed, never followed). Returns what could not be removed (empty when all went)."""
    path = Path(root)
    problems: list[str] = []
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror}")
        return problems
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        return [f"{path}: {exc.strerror}"]
    stack: list[tuple[int, str | None, Iterator[os.DirEntry[str]]]] = [(top, None, iter(os.scandir(top)))]
    while stack:
        fd, name, it = stack[-1]
        entry = next(it, None)
        if entry is None:
            stack.pop()
            os.close(fd)
            if stack and name is not None:
                try:
                    os.rmdir(name, dir_fd=stack[-1][0])
                except OSError as exc:
                    problems.append(f"{printable(name)}: {exc.strerror}")
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                stack.append((child, entry.name, iter(os.scandir(child))))
            else:
                os.unlink(entry.name, dir_fd=fd)
        except OSError as exc:
            problems.append(f"{printable(entry.name)}: {exc.strerror}")
    try:
        os.rmdir(path)
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror}")
    return problems


__all__ = ["Entry", "KeepReport", "MAX_DEPTH", "MAX_ENTRIES", "WalkReport", "keep", "printable", "remove_tree",
           "snapshot", "walk"]

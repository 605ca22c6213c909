"""What makes an output directory safe to reuse or to replace: file records, ownership, protected places.

Three questions every command that writes a directory (``pack``, ``energon-prepare``,
``install-skill``) asks before it touches one that exists:

* **Is it intact?** :func:`record_files` notes the size and SHA-256 of every file the command
  wrote (into its manifest or marker); :func:`verify_records` compares a directory with those
  records: a file missing, of another size or another content, or a file nobody recorded (a stray
  file) is a problem, listed by name.
* **Did we write it?** A directory is the command's own when it holds the command's manifest or
  marker and no file the manifest does not list (:func:`stray_files`). Only such a directory is
  ever replaced; a stray file means somebody else put something there, and it is left alone.
* **Is the place protected?** :func:`check_replace_target` refuses to replace the current
  directory, the home directory, the file-system root, and any directory that is or contains an
  input of the run, whatever it holds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reference_impl.errors import ArtifactError, UsageError

__all__ = ["check_output_directory", "check_replace_target", "file_record", "record_files", "stray_files",
           "verify_records"]

_CHUNK = 1 << 20


def file_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex}`` of one file (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def _files(root: Path) -> list[str]:
    """Every file (and symlink) under ``root``, as sorted POSIX paths relative to it."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in filenames + [d for d in dirnames if (base / d).is_symlink()]:
            out.append((base / name).relative_to(root).as_posix())
    return sorted(out)


def record_files(root: str | os.PathLike[str], *, exclude: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """Records (:func:`file_record`) of every file under ``root`` except ``exclude``, by relative path."""
    root = Path(root)
    skip = set(exclude)
    return {name: file_record(root / name) for name in _files(root) if name not in skip}


def stray_files(root: str | os.PathLike[str], known: Iterable[str]) -> list[str]:
    """Files under ``root`` that are not in ``known`` (relative POSIX paths)."""
    expected = set(known)
    return [name for name in _files(Path(root)) if name not in expected]


def verify_records(
    root: str | os.PathLike[str], records: Mapping[str, Mapping[str, Any]], *, also_known: Iterable[str] = ()
) -> list[str]:
    """Problems of ``root`` against ``records`` (one line each; empty when it matches exactly).

    Sizes are compared before hashes, so a truncated file costs no read. ``also_known`` lists
    files that are legitimately there without a record (the manifest itself).
    """
    root = Path(root)
    problems = []
    for name, want in records.items():
        path = root / name
        if not path.is_file():
            problems.append(f"{name}: missing")
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


def _protected(target: Path, inputs: Iterable[str | os.PathLike[str]]) -> str | None:
    """Why replacing ``target`` would be unsafe whatever it holds, or None."""
    resolved = target.resolve()
    if resolved == Path(resolved.anchor):
        return "it is the root of the file system"
    if resolved == Path.home().resolve():
        return "it is the home directory"
    cwd = Path.cwd().resolve()
    if resolved == cwd:
        return "it is the current directory"
    if resolved in cwd.parents:
        return "it contains the current directory"
    for item in inputs:
        p = Path(item).resolve()
        if p == resolved or resolved in p.parents:
            return f"it holds an input of this run ({item})"
    return None


def check_output_directory(target: str | os.PathLike[str], *, field: str = "out") -> Path:
    """``target`` as a Path, refused when it names an existing file (an output directory is wanted)."""
    path = Path(target)
    if path.exists() and not path.is_dir():
        raise UsageError("the output path names a file; give a directory", file=str(path), field=field)
    return path


def check_replace_target(
    target: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (), owner: str = "seqpack"
) -> None:
    """Refuse to replace ``target`` when it is a protected place (module docstring).

    Raises :class:`~reference_impl.errors.ArtifactError`; ``owner`` names the command in the message.
    """
    why = _protected(Path(target), inputs)
    if why is not None:
        raise ArtifactError(
            f"{owner} will not replace this directory: {why}", file=str(target),
            fix="give an output directory of its own (a new or empty one)",
        )

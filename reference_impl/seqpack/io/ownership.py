"""Ownership: which output directories a command may create, reuse or replace.

:func:`check_output_root` refuses to create outputs in the file-system root, the home directory or a
system directory; :func:`check_replace_target` refuses to replace those, the current directory (and its
ancestors) and any directory holding an input. An :class:`Owner` says how a command recognises a
directory it wrote (its manifest and the file records in it); :func:`examine_directory` compares a
directory with them and :func:`output_directory` writes one, replacing an existing directory only when
it is the command's own. Nothing the command did not write is ever deleted: a file or a directory
nobody recorded (even an empty one) makes the directory foreign.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack.core.errors import ArtifactError, UsageError
from seqpack.io.atomic import atomic_directory
from seqpack.io.confine import confine
from seqpack.io.reading import is_regular_file, open_regular, read_json
from seqpack.io.temporaries import exists_or_link, recover_temporaries

log = logging.getLogger(__name__)
PathLike = str | os.PathLike[str]

__all__ = ["DirectoryState", "Owner", "SYSTEM_DIRECTORIES", "check_output_root", "check_replace_target", "examine_directory", "file_record", "output_directory", "record_files", "require_own", "stray_files", "verify_records"]


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
    """``target`` as a Path for a directory a command creates its outputs in; refused when it names a file or a
    dangling symlink (creating it would write through the link), the file-system root, a system directory or
    (unless ``allow_home``) the home directory."""
    path = Path(target)
    if path.is_symlink() and not path.exists():
        raise UsageError("the output path is a symbolic link to nothing; seqpack does not write through symlinks",
                         file=str(path), field=field, fix="remove the link, or give the directory it should name")
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
            problems.append(f"{name}: missing" if not exists_or_link(path) else f"{name}: not a regular file")
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
        if not exists_or_link(path):
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
    if not exists_or_link(root):
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
    if exists_or_link(path) and not path.is_dir():
        raise UsageError("the output path names a file; give a directory", file=str(path))
    confine(path, what="the output directory", write=True)
    if path.parent.is_dir():
        recover_temporaries(path.parent)  # a swap killed midway puts its old directory back first
    inputs = list(inputs)
    replace = exists_or_link(path) and any(path.iterdir())
    if replace and not replace_own:
        raise UsageError("output directory already exists", file=str(path),
                         fix=f"choose a new output or pass {owner.flag} to replace a directory {owner.command} wrote")
    if replace:
        require_own(path, owner, inputs=inputs)
    with atomic_directory(path, replace=replace, check_replace=lambda p: require_own(p, owner, inputs=inputs),
                          keep_existing=keep_existing) as tmp:
        yield tmp

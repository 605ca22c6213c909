"""Allowed roots: every file path a tool receives must resolve (symlinks followed) inside one.

Relative paths are taken relative to the first root. This module checks the arguments a tool
receives, naming the argument; every path the work then opens or writes, the arguments and the
paths found inside files alike (blend sources, image paths in rows, tokenizer files, caches), is
confined again by the file-access layer (:mod:`seqpack.io`), which the tool registry
installs with these roots for every call, and checks what an opened descriptor really is.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from seqpack.faces.mcp.errors import tool_errors


class AllowedRoots:
    """The directories tools may read from and write to."""

    def __init__(self, roots: list[Path]) -> None:
        if not roots:
            raise ValueError("at least one root is required")
        self.roots = roots

    @classmethod
    def from_args(cls, values: list[str] | None) -> AllowedRoots:
        """Roots from ``--root`` values; none given means the current working directory."""
        raw = list(values or []) or [os.getcwd()]
        roots: list[Path] = []
        for value in raw:
            path = Path(os.path.realpath(Path(value).expanduser()))
            if not path.is_dir():
                raise NotADirectoryError(f"root is not a directory: {value}")
            if path not in roots:
                roots.append(path)
        return cls(roots)

    def describe(self) -> str:
        """The roots, comma-separated, for error messages."""
        return ", ".join(str(r) for r in self.roots)

    def contains(self, path: Path) -> bool:
        """True when an already resolved path lies inside (or is) one of the roots."""
        return any(path == root or path.is_relative_to(root) for root in self.roots)

    def resolve(self, user_path: str, *, field: str, must_exist: bool = True, kind: str | None = None) -> Path:
        """Resolve ``user_path`` (symlinks followed) and check it lies inside a root.

        ``kind`` is ``"file"`` or ``"dir"`` to require that kind of existing entry.
        """
        if not user_path or "\x00" in user_path:
            raise ToolError(f"{field} must be a non-empty path without NUL bytes.")
        candidate = Path(user_path).expanduser()
        if not candidate.is_absolute():
            candidate = self.roots[0] / candidate
        resolved = Path(os.path.realpath(candidate))  # never raises: a symlink loop stays unresolved
        if not self.contains(resolved):
            raise ToolError(
                f"{field} {user_path!r} resolves to {resolved}, outside the allowed roots ({self.describe()}). "
                "Fix: use a path inside a root, or restart the server with another --root."
            )
        if must_exist and not resolved.exists():
            raise ToolError(f"{field} {user_path!r} does not exist ({resolved}).")
        if kind == "file" and must_exist and not resolved.is_file():
            raise ToolError(f"{field} {user_path!r} is not a file ({resolved}).")
        if kind == "dir" and resolved.exists() and not resolved.is_dir():
            raise ToolError(f"{field} {user_path!r} is not a directory ({resolved}).")
        return resolved

    def check_resolved(self, path: str | os.PathLike[str], *, field: str) -> Path:
        """Resolve a path the server found by itself (a blend source, a file in a directory) and confine it."""
        resolved = Path(os.path.realpath(path))
        if not self.contains(resolved):
            raise ToolError(
                f"{field} names {path}, which resolves to {resolved}, outside the allowed roots ({self.describe()})."
            )
        return resolved

    def resolve_rows(self, user_path: str, *, field: str) -> Path:
        """A row file (JSONL, Parquet), or a ``datasets`` folder (every file inside it confined too)."""
        path = self.resolve(user_path, field=field)
        if path.is_dir():
            from seqpack.data.rows import input_kind

            with tool_errors():
                input_kind(path)  # a folder that is not a datasets folder is refused
            for inner in path.rglob("*"):
                self.check_resolved(inner, field=field)
        elif not path.is_file():
            raise ToolError(f"{field} {user_path!r} is not a file or a datasets folder ({path}).")
        return path

    def resolve_inputs(self, user_path: str, *, field: str) -> Path:
        """A row file or datasets folder (:meth:`resolve_rows`), or a blend manifest whose every source must also
        lie inside a root."""
        from seqpack.packing.offline.sources import is_blend_manifest, read_blend_manifest

        path = self.resolve_rows(user_path, field=field)
        if is_blend_manifest(path):
            with tool_errors():
                blends = read_blend_manifest(path)
            for split, pairs in blends.items():
                for _, source in pairs:
                    self.check_resolved(source, field=f"{field} (blend split {split!r})")
        return path

    def confine(self, kind: str, user_path: str, *, field: str) -> Path:
        """Resolve and confine a path argument of a declared path kind (:data:`seqpack.verbs.declare.PATH_KINDS`).

        ``file``: an existing file; ``tokenizer``: a ``tokenizer.json`` or the folder holding it (the files the
        loader reads there confined too); ``inputs``: an existing JSONL file or blend
        manifest (:meth:`resolve_inputs`); ``out_dir``: a directory, created when absent; ``out_file``:
        a file, created when absent; ``artifact``: an existing entry, and, unless it is a prepared Energon
        dataset, every packed Parquet file it names and the manifest beside them (what inspection reads);
        ``rows_or_packs``: rows as ``rows``, or a folder that is no ``datasets`` folder as ``artifact`` (offline packs).
        """
        if kind == "file":
            return self.resolve(user_path, field=field, kind="file")
        if kind == "tokenizer":
            return self._tokenizer(user_path, field=field)
        if kind == "inputs":
            return self.resolve_inputs(user_path, field=field)
        if kind == "rows":
            return self.resolve_rows(user_path, field=field)
        if kind == "out_dir":
            return self.resolve(user_path, field=field, must_exist=False, kind="dir")
        if kind == "out_file":
            return self.resolve(user_path, field=field, must_exist=False)
        if kind == "artifact":
            return self._artifact(user_path, field=field)
        if kind == "rows_or_packs":
            return self._rows_or_packs(user_path, field=field)
        raise ValueError(f"unknown path kind {kind!r}")

    def _tokenizer(self, user_path: str, *, field: str) -> Path:
        """A tokenizer file, or a folder holding ``tokenizer.json``: every file the loader reads there
        (``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``) must lie inside a root."""
        target = self.resolve(user_path, field=field)
        folder = target if target.is_dir() else target.parent
        if target.is_dir() and not (target / "tokenizer.json").exists():
            raise ToolError(f"{field} {user_path!r} is a folder without tokenizer.json ({target}). Fix: pass the "
                            "model's tokenizer folder, or its tokenizer.json.")
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if (folder / name).exists():
                self.check_resolved(folder / name, field=field)
        return target

    def _rows_or_packs(self, user_path: str, *, field: str) -> Path:
        """Rows (:meth:`resolve_rows`), or a folder that is no ``datasets`` folder as offline packs (:meth:`_artifact`)."""
        from seqpack.core.errors import InputError
        from seqpack.data.rows import input_kind

        path = self.resolve(user_path, field=field)
        if path.is_dir():
            try:
                input_kind(path)
            except InputError:
                return self._artifact(user_path, field=field)
        return self.resolve_rows(user_path, field=field)

    def _artifact(self, user_path: str, *, field: str) -> Path:
        from seqpack.packing.energon.inspect import is_energon_dataset
        from seqpack.packing.parquet import resolve_parquet_paths

        target = self.resolve(user_path, field=field)
        if is_energon_dataset(target):
            return target
        files = resolve_parquet_paths(target)
        for f in files:
            self.check_resolved(f, field=field)
        manifest = Path(files[0]).parent / "seqpack_manifest.json"  # read by inspection when present
        if manifest.exists():
            self.check_resolved(manifest, field=field)
        return target

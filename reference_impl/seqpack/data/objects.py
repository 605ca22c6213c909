"""Object storage (``s3://...`` and the other URIs pyarrow's filesystems read): inputs staged in, outputs sent out.

Offline packing reads and writes local files (line indexes, memory maps, spill files, atomic renames);
an input given as a URI is copied once into a local *staging* directory, where it is read like any
local file, and an output root given as a URI receives the finished pack directory, file by file, the
manifest last (a reader that finds the manifest finds every file it lists). The same copy that stages an
input also hashes it for the fingerprint, so staging costs one read of the object, which the hash
needed anyway.

Filesystems come from ``pyarrow.fs.FileSystem.from_uri``: ``s3://`` through pyarrow's S3 client
(credentials and endpoint from the usual ``AWS_*`` variables, ``AWS_ENDPOINT_URL`` included, so an
S3-compatible server works), ``gs://``, ``hdfs://`` and ``abfs://`` where pyarrow has them. Under an
allowed-roots policy (the MCP server) a URI is refused: no root covers it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from seqpack.core.errors import InputError, UsageError

__all__ = ["is_uri", "open_filesystem", "read_remote_json", "staged_as", "staging", "stage_input", "upload_files"]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
COPY_CHUNK = 8 << 20


def is_uri(value: Any) -> bool:
    """True for ``scheme://...`` strings (``s3://bucket/key``); paths and path objects are not URIs."""
    return isinstance(value, str) and _URI.match(value) is not None and not value.startswith("file://")


def _refuse_when_confined(uri: str, field: str | None) -> None:
    from seqpack.io.confine import OutsideRootsError, allowed_roots

    if allowed_roots() is not None:
        raise OutsideRootsError("object storage lies outside the allowed roots", file=uri, field=field,
                                fix="copy the data inside a root, or run seqpack outside the MCP server")


def open_filesystem(uri: str, *, field: str | None = None) -> tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` for ``uri``; a URI no filesystem serves is a UsageError."""
    _refuse_when_confined(uri, field)
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for a bad URI
        raise UsageError(f"cannot open {uri!r} ({type(exc).__name__}: {exc})", file=uri, field=field) from None


def _kind(fs: Any, path: str, uri: str) -> str:
    import pyarrow.fs as pafs

    try:
        info = fs.get_file_info(path)
    except Exception as exc:  # noqa: BLE001 - a network or permission error
        raise InputError(f"cannot read the object ({type(exc).__name__}: {exc})", file=uri) from None
    if info.type == pafs.FileType.NotFound:
        raise InputError("input not found", file=uri)
    return "dir" if info.type == pafs.FileType.Directory else "file"


# ------------------------------------------------------------------------------------------------
# Staging inputs
# ------------------------------------------------------------------------------------------------

_STAGING: ContextVar[tuple[Path, dict[str, str]] | None] = ContextVar("seqpack_staging", default=None)


@contextmanager
def staging(directory: str | os.PathLike[str] | None = None) -> Iterator[dict[str, str]]:
    """A staging area for the block: URIs staged inside it are removed at the end. Yields the mapping
    local path -> URI of what was staged (for naming the URI, not the copy, in errors and manifests)."""
    base = Path(tempfile.mkdtemp(prefix=".seqpack-staging-", dir=None if directory is None else str(directory)))
    mapping: dict[str, str] = {}
    token = _STAGING.set((base, mapping))
    try:
        yield mapping
    finally:
        _STAGING.reset(token)
        shutil.rmtree(base, ignore_errors=True)


def staged_as(path: str) -> str:
    """The URI a staged local path was copied from (``path`` itself otherwise)."""
    current = _STAGING.get()
    return current[1].get(str(path), str(path)) if current is not None else str(path)


def stage_input(uri: str, *, field: str | None = "inputs") -> str:
    """Copy the object (or the folder of objects, such as a ``datasets`` folder) at ``uri`` into the
    current staging area; returns the local path (the same one for the same URI within the block)."""
    current = _STAGING.get()
    if current is None:
        raise UsageError("object storage inputs are read inside a staging area", file=uri, field=field)
    base, mapping = current
    for local, origin in mapping.items():
        if origin == uri:
            return local
    fs, path = open_filesystem(uri, field=field)
    name = Path(path.rstrip("/")).name or "input"
    target = base / hashlib.sha256(uri.encode()).hexdigest()[:16] / name
    target.parent.mkdir(parents=True)
    try:
        if _kind(fs, path, uri) == "dir":
            import pyarrow.fs as pafs

            pafs.copy_files(path, str(target), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
        else:
            with fs.open_input_stream(path) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, COPY_CHUNK)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - network, permission, or a vanished object
        raise InputError(f"cannot copy the input from object storage ({type(exc).__name__}: {exc})",
                         file=uri) from None
    mapping[str(target)] = uri
    return str(target)


# ------------------------------------------------------------------------------------------------
# Outputs
# ------------------------------------------------------------------------------------------------


def read_remote_json(uri: str) -> Any | None:
    """The JSON object at ``uri``, or None when there is none (or it is not JSON)."""
    import json

    fs, path = open_filesystem(uri, field="out")
    try:
        with fs.open_input_stream(path) as fh:
            return json.loads(fh.read(64 << 20))
    except (FileNotFoundError, ValueError):
        return None
    except OSError as exc:
        if "not found" in str(exc).lower() or "NoSuchKey" in str(exc):
            return None
        raise UsageError(f"cannot read {uri} ({exc})", file=uri, field="out") from None


def remote_sizes(uri: str) -> dict[str, int]:
    """Name -> size of the files directly inside the folder ``uri`` (empty when there is none)."""
    import pyarrow.fs as pafs

    fs, path = open_filesystem(uri, field="out")
    try:
        infos = fs.get_file_info(pafs.FileSelector(path.rstrip("/"), allow_not_found=True))
    except OSError as exc:
        raise UsageError(f"cannot list {uri} ({exc})", file=uri, field="out") from None
    return {Path(i.path).name: int(i.size) for i in infos if i.type == pafs.FileType.File}


def upload_files(local: Path, names: list[str], uri: str) -> None:
    """Copy ``local/<name>`` to ``<uri>/<name>`` for each name, in order (the caller puts the manifest
    last); on a failure the files copied by this call are deleted again."""
    fs, path = open_filesystem(uri, field="out")
    base = path.rstrip("/")
    done: list[str] = []
    try:
        fs.create_dir(base, recursive=True)
        for name in names:
            with open(local / name, "rb") as src, fs.open_output_stream(f"{base}/{name}") as dst:
                shutil.copyfileobj(src, dst, COPY_CHUNK)
            done.append(f"{base}/{name}")
    except Exception as exc:
        for key in done:
            try:
                fs.delete_file(key)
            except OSError:
                pass
        if isinstance(exc, (UsageError, InputError)):
            raise
        raise UsageError(f"cannot write the packs to {uri} ({type(exc).__name__}: {exc})", file=uri,
                         field="out") from None

"""The offline pack directory as an artifact: its manifest, file records, verification, reuse and replacement.

A pack directory ``<out_root>/<tokenizer>_pad_seq_to_mult<m>_<fingerprint12>/`` holds the split
Parquet files, the metadata JSON and ``seqpack_manifest.json``. The manifest records, besides the
options and the accounting, every other file's size and SHA-256 (``files``) and each split's row
count (``packs``). Before the pipeline reuses or replaces a directory it :func:`examine`\\ s it:

==========================================  ========================================================
what is there                               what ``prepare_packed_dataset`` does
==========================================  ========================================================
nothing                                     writes it
our manifest, this fingerprint, every       reuses it (``reused``), unless ``overwrite``
file as recorded, Parquet row counts
as recorded, no other file
our manifest, but a file missing,           rebuilds it (``rebuilt`` says why): the directory is
truncated, changed, or a row count off      ours, so replacing it loses nothing
a file nobody recorded (a stray file),      refuses, naming the file: the directory holds something
no manifest, a foreign or corrupt one       seqpack did not write, so it is never deleted
==========================================  ========================================================

A manifest from before file records (no ``files``) cannot be verified: its directory is rebuilt.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_impl.data.artifacts import record_files, stray_files, verify_records
from reference_impl.errors import ArtifactError

log = logging.getLogger(__name__)

__all__ = ["MANIFEST_NAME", "FORMAT", "PackState", "examine", "read_manifest", "record_pack_files",
           "require_replaceable"]

MANIFEST_NAME = "seqpack_manifest.json"
FORMAT = "seqpack-packed-parquet/1"


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The seqpack manifest at ``path``: None when there is no file; :class:`ArtifactError` when
    it is not JSON, not an object, or of another format."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"cannot read the manifest ({exc})", file=str(path)) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"the manifest is not valid JSON ({str(exc).split(';')[0]})", file=str(path),
                            fix="it is corrupt: remove the directory and pack again") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArtifactError(f"not a seqpack pack manifest (format is not {FORMAT})", file=str(path))
    if not isinstance(data.get("splits"), dict) or not isinstance(data.get("fingerprint"), str):
        raise ArtifactError("the manifest lacks its splits or fingerprint", file=str(path))
    return data


def _recorded_names(manifest: dict[str, Any]) -> list[str]:
    """Files the manifest says the directory holds (the manifest itself excluded)."""
    files = manifest.get("files")
    if isinstance(files, dict):
        return list(files)
    names = [str(v.get("file")) for v in manifest["splits"].values() if isinstance(v, dict)]
    if manifest.get("metadata_file"):
        names.append(str(manifest["metadata_file"]))
    return names


def record_pack_files(directory: Path, manifest: dict[str, Any]) -> None:
    """Put the size and SHA-256 of every file in ``directory`` (but the manifest) into ``manifest["files"]``."""
    manifest["files"] = record_files(directory, exclude=(MANIFEST_NAME,))


@dataclass
class PackState:
    """What :func:`examine` found in a pack directory.

    ``manifest``: ours and readable (else None, with ``foreign`` saying why); ``owned``: the
    directory holds only files the manifest lists; ``problems``: why it cannot be reused as is
    (empty: reusable).
    """

    manifest: dict[str, Any] | None
    owned: bool
    problems: list[str] = field(default_factory=list)
    foreign: str | None = None

    @property
    def reusable(self) -> bool:
        """Intact and of the expected fingerprint."""
        return self.manifest is not None and self.owned and not self.problems


def _row_counts(root: Path, manifest: dict[str, Any]) -> list[str]:
    import pyarrow.parquet as pq

    problems = []
    for split, info in manifest["splits"].items():
        name = str(info.get("file"))
        try:
            rows = pq.ParquetFile(root / name).metadata.num_rows
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            problems.append(f"{name}: not a readable Parquet file ({type(exc).__name__})")
            continue
        if rows != info.get("packs"):
            problems.append(f"{name}: {rows} rows, the manifest recorded {info.get('packs')} packs for {split}")
    return problems


def examine(root: Path, fingerprint: str) -> PackState:
    """Check an existing pack directory against its manifest and the expected ``fingerprint``."""
    try:
        manifest = read_manifest(root / MANIFEST_NAME)
    except ArtifactError as err:
        return PackState(None, False, [err.message], foreign=err.message)
    if manifest is None:
        return PackState(None, False, ["no seqpack manifest"], foreign="it holds no seqpack manifest")
    stray = stray_files(root, [*_recorded_names(manifest), MANIFEST_NAME])
    if stray:
        return PackState(manifest, False, [f"{n}: not written by seqpack (a stray file)" for n in stray])
    problems = []
    if manifest["fingerprint"] != fingerprint:
        problems.append(f"the manifest's fingerprint {manifest['fingerprint'][:12]} is not {fingerprint[:12]}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        problems.append("the manifest records no file sizes and hashes (written by an older seqpack)")
    else:
        problems += verify_records(root, files, also_known=(MANIFEST_NAME,))
        if not problems:
            problems += _row_counts(root, manifest)
    return PackState(manifest, True, problems)


def require_replaceable(root: Path, fingerprint: str) -> None:
    """Raise unless ``root`` is absent or a pack directory seqpack wrote (its manifest, no stray file)."""
    if not (root.exists() or root.is_symlink()):
        return
    if root.is_symlink() or not root.is_dir():
        raise ArtifactError("the pack path exists and is not a directory seqpack wrote", file=str(root),
                            fix="move it away; seqpack never deletes what it did not write")
    if not any(root.iterdir()):
        return  # an empty directory holds nothing to lose
    state = examine(root, fingerprint)
    if state.manifest is None:
        raise ArtifactError(f"seqpack cannot tell that it wrote this directory: {state.foreign}", file=str(root),
                            fix="move it away or choose another --out; seqpack never deletes what it did not write")
    if not state.owned:
        raise ArtifactError(f"the directory holds files seqpack did not write ({'; '.join(state.problems[:3])})",
                            file=str(root),
                            fix="move them away or choose another --out; seqpack never deletes what it did not write")

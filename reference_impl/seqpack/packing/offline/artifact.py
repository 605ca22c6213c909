"""What makes a pack directory ``seqpack pack``'s own and reusable: its manifest, read and verified.

A pack directory ``<out_root>/<tokenizer>_pad_seq_to_mult<m>_<fingerprint12>/`` holds the split
Parquet files, the metadata JSON and ``seqpack_manifest.json``. The manifest records, besides the
options and the accounting, every other file's size and SHA-256 (``files``) and each split's row
count (``packs``). The file-access layer (:mod:`seqpack.io`) decides what may be
reused, replaced or must be left alone; this module tells it what a pack's manifest is
(:data:`PACK_OWNER`) and what a reusable pack must also satisfy (:func:`examine`):

==========================================  ========================================================
what is there                               what ``prepare_packed_dataset`` does
==========================================  ========================================================
nothing                                     writes it
our manifest, this fingerprint, every       reuses it (``reused``), unless ``overwrite``
file as recorded, Parquet row counts and
the accounting as recorded, no other file
our manifest, but a file missing,           rebuilds it (``rebuilt`` says why): the directory is
truncated, changed, a row count or the      ours, so replacing it loses nothing
accounting off
a file or directory nobody recorded,        refuses, naming it: the directory holds something
no manifest, a foreign or corrupt one       seqpack did not write, so it is never deleted
==========================================  ========================================================

The accounting is re-checked, not trusted: the manifest is the one file its own records cannot
cover, so on reuse each split's ``rows_in`` must be the number of rows the inputs draw now,
``packed`` the number of sequences in its Parquet file, and ``rows_in == packed + skipped``.
A manifest from before file records (no ``files``) cannot be verified: its directory is rebuilt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack.io import ownership, reading
from seqpack.core.errors import ArtifactError

__all__ = ["FORMAT", "MANIFEST_NAME", "PACK_OWNER", "examine", "read_manifest", "record_pack_files"]

MANIFEST_NAME = "seqpack_manifest.json"
FORMAT = "seqpack-packed-parquet/1"


def _legacy_names(manifest: dict[str, Any]) -> list[str]:
    """Files a manifest from before file records lists: its split files and metadata file."""
    names = [str(v.get("file")) for v in manifest["splits"].values() if isinstance(v, dict)]
    if manifest.get("metadata_file"):
        names.append(str(manifest["metadata_file"]))
    return names


def _validate(manifest: dict[str, Any]) -> None:
    if not isinstance(manifest.get("splits"), dict) or not isinstance(manifest.get("fingerprint"), str):
        raise ArtifactError("the manifest lacks its splits or fingerprint")


#: How the file-access layer recognises a pack directory seqpack wrote.
PACK_OWNER = ownership.Owner("seqpack pack", MANIFEST_NAME, FORMAT, "--overwrite", legacy=_legacy_names,
                         validate=_validate)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The seqpack manifest at ``path``: None when there is no file; :class:`ArtifactError` when
    it is not JSON, not an object, or of another format."""
    path = Path(path)
    return PACK_OWNER.read(path.parent, name=path.name)


def record_pack_files(directory: Path, manifest: dict[str, Any]) -> None:
    """Put the size and SHA-256 of every file in ``directory`` (but the manifest) into ``manifest["files"]``."""
    manifest["files"] = ownership.record_files(directory, exclude=(MANIFEST_NAME,))


def _sequences(path: Path) -> int:
    """Sequences stored in a packed Parquet file (entries of its ``seq_start_id`` lists)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    column = pq.read_table(path, columns=["seq_start_id"]).column(0)
    return int(pc.sum(pc.list_value_length(column)).as_py() or 0)


def _split_problems(root: Path, manifest: dict[str, Any], rows: Mapping[str, int] | None) -> list[str]:
    """Row counts and accounting of every split against its file and the inputs (module docstring)."""
    import pyarrow.parquet as pq

    problems = []
    for split, info in manifest["splits"].items():
        if not isinstance(info, dict):
            problems.append(f"{split}: no split record")
            continue
        name = str(info.get("file"))
        try:
            packs = pq.ParquetFile(reading.regular_file(root / name, error=ArtifactError)).metadata.num_rows
            sequences = _sequences(root / name)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            problems.append(f"{name}: not a readable Parquet file ({type(exc).__name__})")
            continue
        if packs != info.get("packs"):
            problems.append(f"{name}: {packs} rows, the manifest recorded {info.get('packs')} packs for {split}")
        acc = info.get("accounting") if isinstance(info.get("accounting"), dict) else {}
        skipped = acc.get("skipped") if isinstance(acc.get("skipped"), dict) else {}
        counts = [v.get("count") for v in skipped.values() if isinstance(v, dict)]
        if acc.get("packed") != sequences:
            problems.append(f"{split}: the manifest accounts {acc.get('packed')} packed samples, {name} holds "
                            f"{sequences}")
        elif rows is not None and acc.get("rows_in") != rows.get(split):
            problems.append(f"{split}: the manifest accounts {acc.get('rows_in')} input rows, the inputs have "
                            f"{rows.get(split)}")
        elif (not all(isinstance(c, int) for c in counts) or acc.get("skipped_total") != sum(counts)
              or acc.get("rows_in") != sequences + acc.get("skipped_total")):
            problems.append(f"{split}: the manifest's accounting does not add up (rows_in {acc.get('rows_in')} != "
                            f"packed {acc.get('packed')} + skipped {acc.get('skipped_total')})")
    if rows is not None and set(rows) != set(manifest["splits"]):
        problems.append(f"the manifest has splits {sorted(manifest['splits'])}, the inputs {sorted(rows)}")
    return problems


def examine(root: Path, fingerprint: str, rows: Mapping[str, int] | None = None) -> ownership.DirectoryState:
    """Check an existing pack directory against its manifest, the expected ``fingerprint`` and, when
    given, the number of input rows of each split (``rows``)."""

    def verify(path: Path, manifest: dict[str, Any]) -> list[str]:
        if manifest["fingerprint"] != fingerprint:
            return [f"the manifest's fingerprint {manifest['fingerprint'][:12]} is not {fingerprint[:12]}"]
        return _split_problems(path, manifest, rows)

    return ownership.examine_directory(root, PACK_OWNER, verify=verify)

"""Pack directories on object storage: an output root given as a URI (``s3://bucket/packs``).

The pipeline writes the pack directory into a local working root as usual (atomic rename included);
:func:`publish` then copies its files to ``<uri>/<directory name>/``, the Parquet files and the
metadata first and the manifest last, so a reader that finds the manifest finds every file it
lists. A failure while copying deletes what this run copied, and the local working root is removed
either way. :func:`reusable` is the remote counterpart of the local reuse check: the manifest of this
fingerprint, every file it records there with its recorded size (their hashes are not re-read: that
would download the packs). A remote directory that holds files but no seqpack manifest is refused,
never overwritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqpack.core.errors import UsageError
from seqpack.core.reports import PreparedPacks
from seqpack.data import objects
from seqpack.packing.offline.artifact import FORMAT, MANIFEST_NAME

__all__ = ["publish", "result_at", "reusable"]


def _join(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


def result_at(uri: str, manifest: dict[str, Any], *, reused: bool, rebuilt: str | None = None) -> PreparedPacks:
    """The result for packs at ``uri`` (paths are URIs, as strings)."""
    files = {split: _join(uri, info["file"]) for split, info in manifest["splits"].items()}
    result = PreparedPacks(uri, files, _join(uri, manifest["metadata_file"]), _join(uri, MANIFEST_NAME),  # type: ignore[arg-type]
                           reused, manifest["fingerprint"], manifest["splits"], rebuilt)
    return result.attach(manifest=manifest)


def reusable(uri: str, fingerprint: str) -> dict[str, Any] | None:
    """The manifest at ``uri`` when it is seqpack's, of this fingerprint, with every recorded file there at
    its recorded size; None when nothing is there or it must be rewritten. Files without a seqpack
    manifest are refused."""
    sizes = objects.remote_sizes(uri)
    if not sizes:
        return None
    manifest = objects.read_remote_json(_join(uri, MANIFEST_NAME))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UsageError("the output location holds files seqpack did not write; it is never overwritten", file=uri,
                         field="out", fix="give another output root")
    if manifest.get("fingerprint") != fingerprint:
        return None
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for name, record in files.items():
        if not isinstance(record, dict) or sizes.get(name) != record.get("size"):
            return None
    return manifest if files else None


def publish(local: Path, uri: str, manifest: dict[str, Any]) -> None:
    """Copy the pack directory ``local`` to ``uri``: every recorded file, then the manifest."""
    names = sorted(n for n in manifest.get("files", {}) if n != MANIFEST_NAME)
    objects.upload_files(local, [*names, MANIFEST_NAME], uri)

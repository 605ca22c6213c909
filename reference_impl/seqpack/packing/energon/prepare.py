"""JSONL (text, or VLM rows with images and videos) -> WebDataset tar shards -> a prepared
Energon dataset, written atomically.

Layout of the output directory ``DIR``::

    DIR/shards/train-00000.tar ...     samples of the train split, ``shard_size`` per shard
    DIR/shards/val-00000.tar ...       samples of the val split (when ``val_fraction`` > 0)
    DIR/.nv-meta/{.info.json, split.yaml, index.sqlite, index.uuid}   written by energon
    DIR/.nv-meta/dataset.yaml          written here: a crude dataset, decoded by our cooker
    DIR/seqpack_energon.json           our manifest (source, counts, media, fingerprint)

One sample per input row. Its key is ``row<index>`` (the 0-based row index in the JSONL, zero
padded), its members are adjacent in the tar: ``<key>.json`` holds ``{"row": <the row>, "source":
{"file", "line", "row"}}``, and a VLM row's images are members ``<key>.media<k>``: the image
file's original bytes (paths relative to the JSONL file), or PNG for inline ``pixels``; the row
names them as ``{"member": "media<k>"}`` in ``images`` and in every video's ``frames``. Chat
content lists are flattened to marker text first (:func:`seqpack.data.vlm.sample.normalize_visual_row`).
Every image is decoded once here, so a missing or broken file fails now, naming file, line and
field. With a :class:`~seqpack.packing.energon.media.MediaSpec`, rows without images get a
seeded synthetic picture and the marker.

Split: ``round(rows * val_fraction)`` rows (at least one when the fraction is positive) go to
``val``, chosen with ``numpy.random.default_rng(split_seed)``; both splits keep input order.

Rows: every row goes through the checks ``pack`` makes before tokenizing
(:func:`seqpack.data.tokenize.check_row`): a missing or wrong-typed field or an unknown role
stops the run naming file, line and field; an empty completion, an empty conversation or one
without an assistant turn is skipped and counted by reason in the manifest's ``accounting``
(``rows_in == written + skipped_total``), so the loader never meets it mid-epoch.

Atomicity: everything is written under a temporary sibling directory that is renamed to ``DIR``
at the end; a failure removes it, so ``DIR`` is either absent, the previous dataset, or complete.

Overwrite: an existing non-empty ``DIR`` is replaced only with ``overwrite`` and only when this
command wrote it: its manifest is there and every file in it is one the manifest records
(``files``). The current directory, the home directory, the root and any directory holding the
input are never replaced.
Tar members carry fixed metadata (mtime 0, uid/gid 0), so the same input and options give
byte-identical shards.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from seqpack import __version__
from seqpack.core.arguments import positive_int
from seqpack.core.limits import MAX_SHARD_SIZE
from seqpack.io import atomic, ownership, reading
from seqpack.data.location import at_row
from seqpack.core.errors import InputError, UsageError
from seqpack.core.reports import PreparedEnergonDataset
from seqpack.data.vlm.images import load_image
from seqpack.data.vlm.inputs import check_visual_row
from seqpack.data.vlm.sample import normalize_visual_row, row_has_visuals
from seqpack.packing.energon.media import MediaSpec, insert_marker, member_name, png_bytes, synthetic_image

log = logging.getLogger(__name__)

MANIFEST_NAME = "seqpack_energon.json"
FORMAT = "seqpack-energon/1"
SPLITS: tuple[str, ...] = ("train", "val")
DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
SHARD_DIR = "shards"


def _tar_add(tf: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tf.addfile(info, io.BytesIO(payload))


def _val_rows(n: int, val_fraction: float, split_seed: int) -> np.ndarray:
    if val_fraction <= 0:
        return np.zeros(0, dtype=np.int64)
    n_val = max(1, int(round(n * val_fraction)))
    if n_val >= n:
        raise UsageError(
            f"val_fraction={val_fraction} leaves no training row out of {n}", field="val_fraction",
            fix="use a smaller --val-fraction",
        )
    rng = np.random.default_rng(split_seed)
    return np.sort(rng.choice(n, size=n_val, replace=False)).astype(np.int64)


def _check_args(shard_size: int, val_fraction: float) -> None:
    positive_int("shard_size", shard_size, maximum=MAX_SHARD_SIZE)
    if not isinstance(val_fraction, (int, float)) or not 0.0 <= float(val_fraction) < 1.0:
        raise UsageError(f"val_fraction must be in [0, 1), got {val_fraction!r}", field="val_fraction")


class _ShardWriter:
    """Writes ``<split>-NNNNN.tar`` files of ``shard_size`` samples and hashes them."""

    def __init__(self, root: Path, split: str, shard_size: int) -> None:
        self.root, self.split, self.shard_size = root, split, shard_size
        self.names: list[str] = []
        self.sha256: dict[str, str] = {}
        self._tf: tarfile.TarFile | None = None
        self._buf: io.BytesIO | None = None
        self._count = 0

    def add(self, key: str, members: list[tuple[str, bytes]]) -> None:
        if self._tf is None or self._count == self.shard_size:
            self._close()
            self._buf = io.BytesIO()
            self._tf = tarfile.open(fileobj=self._buf, mode="w", format=tarfile.USTAR_FORMAT)
            self.names.append(f"{SHARD_DIR}/{self.split}-{len(self.names):05d}.tar")
            self._count = 0
        for part, payload in members:
            _tar_add(self._tf, f"{key}.{part}", payload)
        self._count += 1

    def _close(self) -> None:
        if self._tf is None:
            return
        self._tf.close()
        data = self._buf.getvalue()  # type: ignore[union-attr]
        name = self.names[-1]
        (self.root / name).write_bytes(data)
        self.sha256[name] = hashlib.sha256(data).hexdigest()
        self._tf = self._buf = None

    def close(self) -> None:
        self._close()


def _media_members(
    row: dict[str, Any], index: int, base_dir: Path, media: MediaSpec | None, schema: Any
) -> tuple[dict[str, Any], list[tuple[str, bytes]], dict[str, int]]:
    """The row document's row, its image members and counts (module docstring): every image (a
    file's bytes, or inline pixels as PNG) becomes a member the row names as ``{"member": ...}``.
    The row's images and videos pass the VLM input check first
    (:func:`seqpack.data.vlm.inputs.check_visual_row`), from their headers."""
    stats = {"samples_with_media": 0, "images": 0, "videos": 0, "frames": 0, "synthetic": 0}
    members: list[tuple[str, bytes]] = []

    def stash(source: Any, field: str) -> dict[str, str]:  # a checked source: a path, an array or nested lists
        try:
            pixels = load_image(source)  # checks the file decodes (and its size) now, with file and line
        except InputError as err:
            raise InputError(err.message, field=field, fix=err.fix) from None
        payload = reading.read_bytes(source, what="image file", field=field) if isinstance(source, Path) else png_bytes(pixels)
        name = member_name(len(members))
        members.append((name, payload))
        return {"member": name}

    if not row_has_visuals(row):
        pixels = synthetic_image(media, index) if media is not None else None
        if pixels is None:
            return row, members, stats
        row = {**insert_marker(row, media.marker), "images": [stash(pixels, "images[0]")]}
        stats.update(samples_with_media=1, images=1, synthetic=1)
        return row, members, stats
    text_row, images, videos = normalize_visual_row(row)
    checked = check_visual_row(text_row, images, videos, schema=schema, base_dir=base_dir)
    out = dict(text_row)
    if images:
        out["images"] = [stash(c.sources[0], c.field) for c in checked if c.kind == "image"]
    if videos:
        docs = []
        for c, video in zip([c for c in checked if c.kind == "video"], videos):
            frames = [stash(f, f"{c.field}.frames[{j}]") for j, f in enumerate(c.sources)]
            docs.append({**{k2: v for k2, v in video.items() if k2 != "frames"}, "frames": frames})
            stats["frames"] += len(frames)
        out["videos"] = docs
    stats.update(samples_with_media=1, images=len(images), videos=len(videos))
    return out, members, stats


def _energon_prepare(tmp: Path, shards: dict[str, list[str]]) -> None:
    """Index the shards with energon and write split.yaml and dataset.yaml."""
    from megatron.energon import BaseWebdatasetFactory

    tars = [name for split in SPLITS for name in shards.get(split, [])]
    # energon brace-expands the patterns (and drops backslashes) before compiling them as regexes
    patterns = [(split, f"^{SHARD_DIR}/{split}-[0-9]+[.]tar$") for split in SPLITS if shards.get(split)]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):  # energon prints progress lines; keep stdout clean
        BaseWebdatasetFactory.prepare_dataset(
            tmp, tars, split_parts_patterns=patterns, shuffle_seed=None, workers=1
        )
    if captured.getvalue().strip():
        log.debug("energon prepare: %s", captured.getvalue().strip())
    (tmp / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML)


#: What energon itself writes into ``.nv-meta/`` (besides our ``dataset.yaml``).
ENERGON_META_FILES = (".nv-meta/.info.json", ".nv-meta/split.yaml", ".nv-meta/index.sqlite", ".nv-meta/index.uuid",
                      ".nv-meta/dataset.yaml")


def _legacy_names(manifest: dict[str, Any]) -> list[str]:
    """Files a manifest from before file records lists: its shards and energon's known index files."""
    shards = manifest.get("shard_sha256")
    return [*(shards if isinstance(shards, dict) else {}), *ENERGON_META_FILES]


#: How the file-access layer recognises a dataset this command wrote.
ENERGON_OWNER = ownership.Owner("seqpack energon-prepare", MANIFEST_NAME, FORMAT, "--overwrite", legacy=_legacy_names)


def dataset_fingerprint(manifest: dict[str, Any]) -> str:
    """sha256 over the manifest's content (everything but the fingerprint, the timing and the file records)."""
    body = {k: v for k, v in manifest.items() if k not in ("fingerprint", "created_by", "seconds", "files")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def prepare_energon_dataset(
    input_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    media: MediaSpec | None = None,
    shard_size: int = 1000,
    val_fraction: float = 0.0,
    split_seed: int = 1234,
    overwrite: bool = False,
    tokenizer: str | os.PathLike[str] | None = None,
) -> PreparedEnergonDataset:
    """Turn a JSONL file into a prepared Energon dataset in ``out_dir`` (module docstring).

    ``media``: attach seeded synthetic pictures to rows that carry no images. ``tokenizer`` (the model's
    ``tokenizer.json`` or its folder) is recorded in the manifest (name, file, fingerprint), so ``inspect``
    counts the dataset's tokens with it; the shards hold rows, not tokens, either way.
    Raises :class:`InputError` (file, line, field) for a bad row, :class:`UsageError` for bad
    arguments or an existing ``out_dir`` without ``overwrite``.
    """
    import megatron.energon  # noqa: F401 - imported before the clock starts (a one-off ~2 s)

    from seqpack.data.jsonl import JsonlFile, file_fingerprint
    from seqpack.data.rejections import SampleRejected
    from seqpack.data.schemas import default_schema, detect_schema
    from seqpack.data.tokenize import check_row

    started = time.perf_counter()
    _check_args(shard_size, val_fraction)
    src = Path(input_path)
    out = Path(out_dir)
    # ``out`` is replaced only with overwrite=True and only when seqpack wrote it (checked now and at the swap)
    with ownership.output_directory(out, ENERGON_OWNER, inputs=[src], replace_own=overwrite) as tmp:
        jf = JsonlFile(src, use_cache=False)
        n = len(jf)
        val_rows = set(_val_rows(n, float(val_fraction), split_seed).tolist())
        width = max(8, len(str(n - 1)))
        (tmp / SHARD_DIR).mkdir()
        writers = {split: _ShardWriter(tmp, split, shard_size) for split in SPLITS}
        counts = {split: 0 for split in SPLITS}
        skipped: dict[str, dict[str, Any]] = {}
        schema_kind: str | None = None
        totals = {"samples_with_media": 0, "images": 0, "videos": 0, "frames": 0, "synthetic": 0}
        schema: Any = None
        source_file = str(src.resolve())
        base_dir = src.resolve().parent
        try:
            for i in range(n):
                loc = jf.location(i)
                with at_row(loc):
                    row = jf.row(i)
                    text_row = normalize_visual_row(row)[0]
                    kind = detect_schema(text_row)
                    if schema_kind is None:
                        schema_kind, schema = kind, default_schema(kind)
                    elif kind != schema_kind:
                        raise InputError(f"row is {kind} but the file started with {schema_kind} rows")
                    try:  # the checks pack makes before tokenizing: a bad field stops, a rejection skips
                        check_row(text_row, schema)
                    except SampleRejected as rejected:
                        entry = skipped.setdefault(rejected.reason, {"count": 0, "examples": []})
                        entry["count"] += 1
                        if len(entry["examples"]) < 5:
                            entry["examples"].append({"file": str(src), "line": loc.line, "row": i})
                        continue
                    row, members, stats = _media_members(row, i, base_dir, media, schema)
                    for name, count in stats.items():
                        totals[name] += count
                doc = {"row": row, "source": {"file": source_file, "line": loc.line, "row": i}}
                members.insert(0, ("json", json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")))
                split = "val" if i in val_rows else "train"
                writers[split].add(f"row{i:0{width}d}", members)
                counts[split] += 1
        finally:
            jf.close()
            for w in writers.values():
                w.close()
        _refuse_empty(counts, skipped, n, src)  # before energon indexes the shards: it fails on none at all
        shards = {split: writers[split].names for split in SPLITS}
        _energon_prepare(tmp, shards)
        media_info = None
        if totals["samples_with_media"]:
            media_info = {**totals, "synthetic_spec": media.to_dict() if media is not None else None}
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "created_by": f"seqpack {__version__}",
            "source": {"file": source_file, "rows": n, "fingerprint": file_fingerprint(src).to_dict()},
            "schema": schema_kind,
            "key_format": f"row{{index:0{width}d}}",
            "options": {"shard_size": shard_size, "val_fraction": float(val_fraction), "split_seed": split_seed},
            "splits": {split: {"samples": counts[split], "shards": shards[split]} for split in SPLITS if counts[split]},
            "accounting": {"rows_in": n, "written": sum(counts.values()),
                           "skipped_total": sum(v["count"] for v in skipped.values()), "skipped": skipped},
            "shard_sha256": {k: v for w in writers.values() for k, v in w.sha256.items()},
            "media": media_info,
        }
        if tokenizer is not None:  # only when given: datasets prepared without one keep their fingerprint
            from seqpack.data.tokenizers import load_tokenizer

            tok = load_tokenizer(tokenizer)
            manifest["tokenizer"] = {"name": tok.name, "file": str(Path(tokenizer).resolve()),
                                     "fingerprint": tok.fingerprint()}
        manifest["fingerprint"] = dataset_fingerprint(manifest)
        manifest["files"] = ownership.record_files(tmp, exclude=(MANIFEST_NAME,))  # what --overwrite may replace
        atomic.write_text(tmp / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")
    result = _result(out, manifest, time.perf_counter() - started)
    log.info("prepared %s: %s in %.3fs", out, result.samples, result.seconds)
    return result


def _refuse_empty(counts: dict[str, int], skipped: dict[str, dict[str, Any]], n: int, src: Path) -> None:
    """Every row skipped (or none left for training): one line with the reasons and their first lines."""
    if counts.get("train"):
        return
    total = sum(v["count"] for v in skipped.values())
    reasons = "; ".join(f"{reason}: {v['count']} (first at line {v['examples'][0]['line']})" if v["examples"]
                        else f"{reason}: {v['count']}" for reason, v in skipped.items())
    if not sum(counts.values()):
        raise InputError(f"no usable row: {total} of {n} rows skipped ({reasons})", file=str(src),
                         fix="fix or replace the skipped rows (an empty completion, no assistant turn, ...)")
    raise InputError(f"no row left for the training split: {total} of {n} rows skipped ({reasons or 'none'}) and "
                     f"{counts.get('val', 0)} held out for validation", file=str(src), field="val_fraction",
                     fix="lower --val-fraction or fix the skipped rows")


def _result(root: Path, manifest: dict[str, Any], seconds: float = 0.0) -> PreparedEnergonDataset:
    splits = manifest["splits"]
    result = PreparedEnergonDataset(
        root=root,
        samples={s: int(v["samples"]) for s, v in splits.items()},
        shards={s: list(v["shards"]) for s, v in splits.items()},
        schema=manifest["schema"],
        media=manifest.get("media"),
        fingerprint=manifest["fingerprint"],
        seconds=round(seconds, 4),
        skipped={k: int(v["count"]) for k, v in manifest.get("accounting", {}).get("skipped", {}).items()},
        tokenizer=(manifest.get("tokenizer") or {}).get("file"),
    )
    return result.attach(manifest=manifest)


def read_manifest(root: str | os.PathLike[str], *, check_files: bool = True) -> PreparedEnergonDataset:
    """Read and check the manifest of a dataset made by :func:`prepare_energon_dataset`.

    Raises :class:`~seqpack.core.errors.ArtifactError` when it is missing, of another format,
    does not match its own fingerprint, or (``check_files``) the first problem :func:`file_problems`
    finds (a truncated shard is refused before training starts, not met mid-epoch; sizes only, so
    opening a large dataset costs no read of its shards).
    """
    from seqpack.core.errors import ArtifactError

    root = Path(root)
    path = root / MANIFEST_NAME
    if not os.path.lexists(path):
        raise ArtifactError(
            "not a seqpack Energon dataset (no manifest)", file=str(path),
            fix="prepare it with `seqpack energon-prepare INPUT.jsonl --out DIR`",
        )
    manifest = ENERGON_OWNER.read(root)
    assert manifest is not None
    if manifest.get("fingerprint") != dataset_fingerprint(manifest):
        raise ArtifactError("manifest content does not match its fingerprint (edited or corrupt)", file=str(path))
    if not isinstance(manifest.get("splits"), dict):
        raise ArtifactError("the manifest lists no splits", file=str(path))
    if check_files:
        for check, name, message in file_problems(root, manifest, strays=False):
            raise ArtifactError(message, file=str(root / name),
                                fix="prepare it again with `seqpack energon-prepare ... --overwrite`")
    return _result(root, manifest)


def file_problems(root: Path, manifest: dict[str, Any], *, strays: bool = True) -> list[tuple[str, str, str]]:
    """``(check, name, message)`` for energon's index missing (``energon_index``), a recorded file missing or of
    another size (``missing_file``, ``file_size``) and, with ``strays``, a file nobody recorded (``stray_file``)."""
    out = []
    if not reading.is_regular_file(root / ".nv-meta" / "split.yaml"):
        out.append(("energon_index", ".nv-meta/split.yaml", "energon metadata (.nv-meta/split.yaml) is missing"))
    records = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for name, record in records.items():
        target = root / name
        if not reading.is_regular_file(target):
            check = "energon_index" if name.startswith(".nv-meta/") else "missing_file"
            out.append((check, name, f"{name} is missing (the manifest records it); the dataset is damaged"))
        elif target.stat().st_size != record.get("size"):
            out.append(("file_size", name, f"{name} is not the size the manifest recorded ({record.get('size')} "
                        f"bytes, found {target.stat().st_size}); the dataset is damaged"))
    if strays and records:
        for name in ownership.stray_files(root, [*records, MANIFEST_NAME]):
            kind = "a shard" if name.startswith(f"{SHARD_DIR}/") and name.endswith(".tar") else "a file"
            out.append(("stray_file", name, f"{name}: {kind} the manifest does not record (not read by the loader)"))
    return out


# ------------------------------------------------------------------------------------------------
# A small synthetic VLM dataset
# ------------------------------------------------------------------------------------------------

_WORDS: tuple[str, ...] = (
    "red", "cat", "sits", "on", "a", "blue", "mat", "near", "the", "old", "tree", "river", "bright",
    "window", "small", "boat", "under", "cloud", "green", "field", "two", "birds", "fly", "over", "hill",
)


def synthetic_vlm_rows(
    n: int,
    *,
    seed: int,
    media: MediaSpec | None = None,
    min_words: int = 2,
    max_words: int = 10,
) -> list[dict[str, Any]]:
    """``n`` short prompt/completion rows; a row gets an inline picture (``images: [{"pixels": ...}]``
    and the marker) when ``media`` draws one.

    Texts are random word sequences (``min_words``..``max_words`` words) drawn with
    ``numpy.random.default_rng(seed)``; pictures come from
    :func:`~seqpack.packing.energon.media.synthetic_image` with ``media`` (default:
    ``MediaSpec(seed=seed, min_side=8, max_side=24, probability=0.5)``).
    """
    if media is None:
        media = MediaSpec(seed=seed, min_side=8, max_side=24, probability=0.5)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        prompt = " ".join(rng.choice(_WORDS, int(rng.integers(min_words, max_words + 1))).tolist())
        completion = " ".join(rng.choice(_WORDS, int(rng.integers(min_words, max_words + 1))).tolist())
        row: dict[str, Any] = {"id": f"vlm-{i:05d}", "prompt": prompt, "completion": completion}
        pixels = synthetic_image(media, i)
        if pixels is not None:
            row = insert_marker(row, media.marker)
            row["images"] = [{"pixels": pixels.tolist()}]
        rows.append(row)
    return rows


def write_synthetic_vlm_jsonl(
    path: str | os.PathLike[str], n: int = 64, *, seed: int, media: MediaSpec | None = None
) -> Path:
    """Write :func:`synthetic_vlm_rows` as JSONL (atomically) and return the path."""
    rows = synthetic_vlm_rows(n, seed=seed, media=media)
    with atomic.atomic_output(path) as fh:
        for row in rows:
            fh.write((json.dumps(row, separators=(",", ":")) + "\n").encode())
    return Path(path)

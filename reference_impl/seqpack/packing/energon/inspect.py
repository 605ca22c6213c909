"""Inspect a prepared Energon dataset: integrity, samples, images and image tokens, and fitness.

:func:`inspect_energon_dataset` reads the dataset the way the loader would, without energon: it
checks the manifest against its fingerprint and every shard against its recorded sha256, reads
every sample document and its image members, and measures every sample under the VLM sample
contract (image sizes from the image headers, :func:`seqpack.data.vlm.sample.vlm_sample_length`):
training tokens, image tokens, images and videos. With a topology the aligned lengths use its
``pad_seq_to_mult``; with ``seq_length`` every sample whose aligned length exceeds it is an issue
(the task encoder would refuse it, never truncate it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.core.alignment import Topology, alignment_requirement, round_up
from seqpack.data.rejections import SampleRejected
from seqpack.io import reading
from seqpack.core.errors import ArtifactError, InputError
from seqpack.core.reports import InspectReport

__all__ = ["MAX_ISSUES", "inspect_energon_dataset", "is_energon_dataset"]

MAX_ISSUES = 20


def is_energon_dataset(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a directory holding a seqpack Energon manifest."""
    from seqpack.packing.energon.prepare import MANIFEST_NAME

    p = Path(path)
    return p.is_dir() and os.path.lexists(p / MANIFEST_NAME)


def _samples(data: bytes) -> Any:
    """(key, row document, media members) of every sample of one shard (its bytes), in order."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        current, doc, media = None, None, {}
        for member in tf:
            if not member.isfile():
                continue
            key, _, part = member.name.rpartition("/")[2].partition(".")
            payload = tf.extractfile(member).read()  # type: ignore[union-attr]
            if key != current:
                if current is not None:
                    yield current, doc, media
                current, doc, media = key, None, {}
            if part == "json":
                doc = json.loads(payload)
            else:
                media[part] = payload
        if current is not None:
            yield current, doc, media


def inspect_energon_dataset(
    path: str | os.PathLike[str],
    topology: Topology | None = None,
    *,
    seq_length: int | None = None,
    vision: Any = "auto",
    tokenizer: Any = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> InspectReport:
    """Check and describe a dataset made by ``seqpack energon-prepare`` (module docstring).

    ``vision``: the preset (name or spec) the loader will use; ``auto`` is ``qwen2_vl`` when the
    dataset holds images; ``min_pixels`` / ``max_pixels`` replace its pixel budget. ``tokenizer``: the
    model's (a ``tokenizer.json`` or its folder; default the byte tokenizer, named ``byte (default)``).
    Raises ArtifactError when the manifest is missing, foreign or edited.
    """
    from seqpack.data.schemas import default_schema
    from seqpack.data.tokenize import tokenize_row
    from seqpack.data.tokenizers import load_tokenizer, tokenizer_label
    from seqpack.data.vlm.vision import vision_spec
    from seqpack.data.vlm.sample import VisionTokens, vlm_sample_length
    from seqpack.packing.energon.media import resolve_members
    from seqpack.packing.energon.prepare import file_problems, read_manifest

    prepared = read_manifest(path, check_files=False)
    manifest = prepared.manifest
    root = prepared.root
    recorded = (manifest.get("tokenizer") or {}).get("file")
    if tokenizer is None and recorded is not None and os.path.exists(recorded):
        tokenizer = recorded  # what energon-prepare recorded
    tok = load_tokenizer(tokenizer)
    schema = default_schema(prepared.schema)
    has_media = bool(prepared.media)
    spec = None if vision in (None, "none") or (vision == "auto" and not has_media) else vision_spec(
        "qwen2_vl" if vision == "auto" else vision, min_pixels=min_pixels, max_pixels=max_pixels)
    vt = VisionTokens.for_tokenizer(tok)
    m = topology.alignment().pad_seq_to_mult if topology is not None else 1
    issues: list[dict[str, Any]] = []
    count = 0

    def issue(check: str, key: str, message: str) -> None:
        nonlocal count
        count += 1
        if len(issues) < MAX_ISSUES:
            issues.append({"check": check, "sample": key, "message": message})

    lengths, vision_tokens = [], []
    images = videos = with_media = 0
    rejected: Counter = Counter()
    shards = []
    reported = set()
    for check, name, message in file_problems(root, manifest):  # energon's index, recorded files, strays
        issue(check, name, message)
        reported.add(name)
    for split, info in manifest["splits"].items():
        for name in info["shards"]:
            shards.append(name)
            shard = root / name
            if name in reported:
                continue
            data = reading.read_bytes(shard, what="shard", error=ArtifactError) if reading.is_regular_file(shard) else None
            want = manifest.get("shard_sha256", {}).get(name)
            if data is None or hashlib.sha256(data).hexdigest() != want:
                issue("shard_checksum", name, "shard is missing or differs from the sha256 in the manifest")
                continue
            for key, doc, media in _samples(data):
                if not isinstance(doc, dict) or not isinstance(doc.get("row"), dict):
                    issue("sample_document", key, "no row document")
                    continue
                row = resolve_members(doc["row"], media) if media else doc["row"]
                try:
                    if spec is not None:
                        got = vlm_sample_length(row, schema, tok, vision=spec, vision_tokens=vt)
                        n, nv, ni, nd = got.tokens, got.vision_tokens, got.images, got.videos
                    elif media:
                        issue("images_without_vision", key, "the sample has images but vision is none")
                        continue
                    else:
                        n, nv, ni, nd = tokenize_row(row, schema, tok, max_length=1 << 40).num_tokens - 1, 0, 0, 0
                except SampleRejected as err:
                    rejected[err.reason] += 1
                    issue("rejected", key, err.message)
                    continue
                except InputError as err:
                    issue("sample", key, str(err))
                    continue
                lengths.append(n)
                vision_tokens.append(nv)
                images, videos, with_media = images + ni, videos + nd, with_media + bool(ni or nd)
                if seq_length is not None and round_up(n, m) > seq_length:
                    issue("exceeds_seq_length", key, f"aligned length {round_up(n, m)} ({n} tokens, {nv} image "
                          f"tokens) exceeds seq_length={seq_length}; Energon never truncates")
    stats = _statistics(manifest, lengths, vision_tokens, (images, videos, with_media), rejected, m)
    settings = {"fingerprint": prepared.fingerprint, "schema": prepared.schema,
                "tokenizer": tokenizer_label(tokenizer if tokenizer is None or isinstance(tokenizer, (str, os.PathLike))
                                             else tok),
                "vision": None if spec is None else spec.name, "seq_length": seq_length, "pad_seq_to_mult": m}
    topo = _topology_fit(topology, issues, seq_length, m)
    return InspectReport(path=str(root), files=shards, ok=count == 0, issues=issues, issue_count=count,
                         stats=stats, settings=settings, topology=topo)


def _statistics(manifest: dict[str, Any], lengths: list[int], vision_tokens: list[int], media: tuple[int, int, int],
                rejected: Counter, m: int) -> dict[str, Any]:
    """The report's statistics of the measured samples (``media``: images, videos, rows with either)."""
    images, videos, with_media = media
    arr = np.asarray(lengths, dtype=np.int64)
    vis = np.asarray(vision_tokens, dtype=np.int64)
    total = int(arr.sum())
    return {
        "kind": "energon",
        "samples": {s: int(v["samples"]) for s, v in manifest["splits"].items()},
        "measured_samples": int(arr.size),
        "rows_with_visuals": with_media,
        "images": images,
        "videos": videos,
        "vision_tokens": int(vis.sum()),
        "text_tokens": total - int(vis.sum()),
        "vision_token_share": float(vis.sum() / total) if total else 0.0,
        "length": {"min": int(arr.min()) if arr.size else 0, "p50": int(np.median(arr)) if arr.size else 0,
                   "max": int(arr.max()) if arr.size else 0},
        "aligned_tokens": int(sum(round_up(int(n), m) for n in arr)),
        "rejected": dict(sorted(rejected.items())),
    }


def _topology_fit(topology: Topology | None, issues: list[dict[str, Any]], seq_length: int | None,
                  m: int) -> dict[str, Any] | None:
    """Whether the samples fit ``topology`` (None without one): seq_length a multiple of the alignment and
    no aligned sample longer than it."""
    if topology is None:
        return None
    reasons = [i["message"] for i in issues if i["check"] == "exceeds_seq_length"][:3]
    if seq_length is not None and seq_length % m:
        reasons.insert(0, f"seq_length={seq_length} is not a multiple of pad_seq_to_mult={m}")
    # Energon datasets train through in-batch packing (or Energon native packing on Bridge main): Bridge
    # derives and pads to the lcm itself, so required = recommended (core.alignment.alignment_requirement)
    req = alignment_requirement("in_batch", topology.tp, topology.cp, topology.sp, topology.eval_cp)
    topo = {"alignment": topology.alignment().to_dict(), "requirement": req.to_dict(), "required": req.required,
            "required_width": req.required_width, "recommended": req.recommended, "usable": not reasons,
            "recommended_met": not reasons, "reasons": reasons}
    return topo

"""The VLM sample contract: a JSONL row with image placeholders -> a shifted training example
whose image tokens line up with its patches.

**Row schema** (prompt/completion or chat rows as for text, plus):

* ``images``: a list; each entry a path (relative to the JSONL file's directory, or absolute),
  ``{"path": ...}``, or ``{"pixels": [[[r, g, b], ...], ...]}`` (a small inline uint8 image);
* ``videos``: a list of ``{"frames": [<image>, ...], "fps": 2.0}`` (frames as above; ``fps``
  optional, default 2);
* the text holds one ``<image>`` marker per image and one ``<video>`` marker per video, in list
  order (:data:`IMAGE_MARKER`, :data:`VIDEO_MARKER`). Chat turns may instead use content lists
  (``[{"type": "image", "image": "a.png"}, {"type": "text", "text": "..."}]``, the Qwen-VL
  conversation form); their image and video parts become markers and list entries in order.

**Encoding** (:func:`tokenize_vlm_row`): the text is tokenized as a text row (same schema, loss
mode and chat rendering); every marker's tokens are replaced by ``<vision_start>``, ``N`` pad
tokens (``<image_pad>`` or ``<video_pad>``, ``N = t*h*w / merge**2`` from the item's grid, see
:mod:`seqpack.data.vlm.vision`) and ``<vision_end>``, all with loss mask 0, so no label on a
vision token is ever trained; then the next-token shift. A VLM sample is never truncated (a cut
could separate image tokens from their patches): longer than ``max_length`` after expansion is
a rejection (``too_long``). Rows without images or videos in a VLM dataset become VLM samples
with no visual items.

**Token ids** (:class:`VisionTokens`): a tokenizer that knows Qwen's ``<|image_pad|>``,
``<|video_pad|>``, ``<|vision_start|>`` and ``<|vision_end|>`` keeps their ids; otherwise (the
byte tokenizer) the four ids follow its vocabulary, and the model's vocabulary grows by four.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.core.errors import InputError, UsageError
from seqpack.core.limits import MAX_VISUALS_PER_ROW
from seqpack.data import rejections as rj
from seqpack.data.location import RowLocation, at_row
from seqpack.data.rejections import SampleRejected
from seqpack.data.schemas import CHAT_KEYS, Schema
from seqpack.data.tokenize import VISUAL_FIELDS, TokenizedSample, to_training_example, tokenize_row
from seqpack.data.tokenizers import Tokenizer
from seqpack.data.vlm.inputs import IMAGE_MARKER, VIDEO_MARKER, CheckedVisual, check_visual_row, image_source
from seqpack.data.vlm.mrope import MRopeSpec, rope_index
from seqpack.data.vlm.vision import VisionSpec, VisualItem, encode_frames, encode_image

__all__ = [
    "IMAGE_MARKER",
    "VIDEO_MARKER",
    "VISUAL_FIELDS",
    "VLMExample",
    "VLMSettings",
    "VisionTokens",
    "checked_visuals",
    "encode_visuals",
    "image_source",
    "file_has_visuals",
    "find_subsequence",
    "measure_vlm_file",
    "mrope_spec",
    "normalize_visual_row",
    "resolve_vision",
    "row_has_visuals",
    "tokenize_vlm_row",
    "vlm_sample_length",
    "with_absolute_paths",
]

#: Qwen's special-token texts, in the order image pad, video pad, vision start, vision end.
QWEN_VISION_TOKENS: tuple[str, ...] = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


@dataclass(frozen=True)
class VisionTokens:
    """Ids of the image pad, video pad, vision start and vision end tokens, and the vocabulary
    size a model needs to embed every id (text and vision)."""

    image: int
    video: int
    start: int
    end: int
    vocab_size: int

    def __post_init__(self) -> None:
        ids = (self.image, self.video, self.start, self.end)
        if len(set(ids)) != 4 or min(ids) < 0 or max(ids) >= self.vocab_size:
            raise UsageError(f"vision token ids {ids} must be distinct and below vocab_size {self.vocab_size}")

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer) -> VisionTokens:
        """Qwen's ids when ``tokenizer`` has all four special tokens, else four ids past its vocabulary."""
        lookup = getattr(tokenizer, "_id", None)
        if callable(lookup):
            found = [lookup(text) for text in QWEN_VISION_TOKENS]
            if all(isinstance(i, int) for i in found):
                return cls(*found, vocab_size=max(int(tokenizer.vocab_size), max(found) + 1))
        v = int(tokenizer.vocab_size)
        return cls(v, v + 1, v + 2, v + 3, vocab_size=v + 4)

    def is_vision(self, ids: np.ndarray) -> np.ndarray:
        """Bool mask of the four vision ids in ``ids``."""
        return np.isin(ids, np.asarray([self.image, self.video, self.start, self.end]))

    def to_dict(self) -> dict[str, int]:
        """JSON-able form."""
        return {"image": self.image, "video": self.video, "start": self.start, "end": self.end,
                "vocab_size": self.vocab_size}


@dataclass(frozen=True)
class VLMSettings:
    """Everything a VLM loader needs besides the text settings: the vision spec, the vision token
    ids and where text after a vision block starts (:data:`~seqpack.data.vlm.mrope.TEXT_AFTER_VISION`)."""

    vision: VisionSpec
    tokens: VisionTokens
    text_after_vision: str = "max"

    @classmethod
    def create(cls, vision: str | VisionSpec | None, tokenizer: Tokenizer, text_after_vision: str = "max") -> VLMSettings:
        """Settings for a preset name (or spec) and a tokenizer."""
        from seqpack.data.vlm.vision import vision_spec

        return cls(vision_spec(vision), VisionTokens.for_tokenizer(tokenizer), text_after_vision)

    @property
    def mrope(self) -> MRopeSpec:
        """The M-RoPE spec of these settings."""
        return mrope_spec(self.vision, self.tokens, self.text_after_vision)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what a resumed loader must match)."""
        return {"vision": self.vision.to_dict(), "tokens": self.tokens.to_dict(),
                "text_after_vision": self.text_after_vision}


def mrope_spec(vision: VisionSpec, tokens: VisionTokens, text_after_vision: str = "max") -> MRopeSpec:
    """The :class:`~seqpack.data.vlm.mrope.MRopeSpec` of a vision spec and its token ids."""
    return MRopeSpec(
        image_token_id=tokens.image,
        video_token_id=tokens.video,
        spatial_merge_size=vision.merge_size,
        tokens_per_second=vision.tokens_per_second if vision.rope == "qwen2_5_vl" else None,
        text_after_vision=text_after_vision,
    )


# ------------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------------


def _content_list(turn: Mapping[str, Any], key: str) -> bool:
    return isinstance(turn, Mapping) and isinstance(turn.get(key), list)


def row_has_visuals(row: Mapping[str, Any]) -> bool:
    """True when the row carries images or videos (fields or chat content parts)."""
    if any(row.get(f) for f in VISUAL_FIELDS):
        return True
    for key in CHAT_KEYS:
        turns = row.get(key)
        if isinstance(turns, list):
            for turn in turns:
                text_key = "value" if key == "conversations" else "content"
                if _content_list(turn, text_key) and any(
                    isinstance(p, Mapping) and p.get("type") in ("image", "video") for p in turn[text_key]
                ):
                    return True
    return False


def normalize_visual_row(row: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """``(text row, images, videos)``: chat content lists flattened to text with markers, the
    visual fields taken out of the row. Raises InputError for malformed parts."""
    out = {k: v for k, v in row.items() if k not in VISUAL_FIELDS}
    images = _listed(row, "images")
    videos = _listed(row, "videos")
    from_parts = False
    for key in CHAT_KEYS:
        turns = row.get(key)
        if not isinstance(turns, list):
            continue
        text_key = "value" if key == "conversations" else "content"
        new_turns = []
        for i, turn in enumerate(turns):
            if not _content_list(turn, text_key):
                new_turns.append(turn)
                continue
            text, imgs, vids = _flatten_parts(turn[text_key], f"{key}[{i}].{text_key}")
            images += imgs
            videos += vids
            from_parts = from_parts or bool(imgs or vids)
            new_turns.append({**turn, text_key: text})
        out[key] = new_turns
    if from_parts and (row.get("images") or row.get("videos")):
        raise InputError("give images either as content parts or in the images/videos fields, not both",
                         field="images")
    if len(images) + len(videos) > MAX_VISUALS_PER_ROW:
        raise InputError(f"{len(images) + len(videos)} images and videos in one row; the limit is "
                         f"{MAX_VISUALS_PER_ROW}", field="images")
    return out, images, videos


def _listed(row: Mapping[str, Any], name: str) -> list[Any]:
    value = row.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"must be a list, got {type(value).__name__}", field=name)
    return list(value)


def _flatten_parts(parts: list[Any], where: str) -> tuple[str, list[Any], list[Any]]:
    texts: list[str] = []
    images: list[Any] = []
    videos: list[Any] = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image":
            ref = part.get("image", part.get("path", part.get("pixels")))
            if ref is None:
                raise InputError("an image part needs 'image' (a path) or 'pixels'", field=f"{where}[{j}]")
            images.append({"pixels": ref} if "pixels" in part else ref)
            texts.append(IMAGE_MARKER)
        elif kind == "video":
            frames = part.get("video", part.get("frames"))
            videos.append({"frames": frames, **({"fps": part["fps"]} if "fps" in part else {})})
            texts.append(VIDEO_MARKER)
        else:
            raise InputError("a content part must be {type: text|image|video, ...}", field=f"{where}[{j}]")
    return "".join(texts), images, videos


def checked_visuals(
    row: Mapping[str, Any], schema: Schema, *, base_dir: Path | None, vision: VisionSpec | None = None
) -> tuple[dict[str, Any], list[CheckedVisual]]:
    """``(text row, checked items)``: the row's content lists flattened and its images and videos checked
    from their headers (:func:`seqpack.data.vlm.inputs.check_visual_row`), nothing decoded."""
    text_row, images, videos = normalize_visual_row(row)
    return text_row, check_visual_row(text_row, images, videos, schema=schema, base_dir=base_dir, vision=vision)


def encode_visuals(checked: Sequence[CheckedVisual], vision: VisionSpec) -> tuple[list[VisualItem], list[VisualItem]]:
    """Decode and patchify a row's checked images and videos (errors name the list entry)."""
    image_items, video_items = [], []
    for item in checked:
        try:
            if item.kind == "image":
                image_items.append(encode_image(item.sources[0], vision))
            else:
                video_items.append(encode_frames(list(item.sources), vision, fps=item.fps))
        except InputError as err:
            raise InputError(err.message, field=item.field, fix=err.fix) from None
    return image_items, video_items


# ------------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class VLMExample:
    """A shifted VLM training sample.

    ``tokens``/``labels`` int64 ``[L]``, ``loss_mask`` float32 ``[L]`` (0 on every vision token
    and on every label that is one); ``visuals``: the items in token order, each occupying one run
    of pad tokens of its length; ``vision_tokens``: the ids used.
    """

    tokens: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray
    visuals: tuple[VisualItem, ...]
    vision_tokens: VisionTokens
    original_length: int = 0

    def of_kind(self, kind: str) -> list[VisualItem]:
        """The items of one kind (``image`` or ``video``), in token order."""
        return [v for v in self.visuals if v.kind == kind]

    def grids(self, kind: str) -> np.ndarray:
        """int64 ``[n, 3]`` grids of the items of ``kind``."""
        items = self.of_kind(kind)
        return np.asarray([v.grid for v in items], dtype=np.int64).reshape(len(items), 3)

    def pixels(self, kind: str, patch_dim: int) -> np.ndarray:
        """float32 ``[patches, patch_dim]`` of the items of ``kind``, concatenated in token order."""
        items = self.of_kind(kind)
        if not items:
            return np.zeros((0, patch_dim), dtype=np.float32)
        return np.concatenate([v.patches for v in items]).astype(np.float32, copy=False)

    def second_per_grid(self) -> np.ndarray:
        """float32 ``[n_videos]``."""
        return np.asarray([v.second_per_grid for v in self.of_kind("video")], dtype=np.float32)

    @property
    def num_vision_tokens(self) -> int:
        """Image and video pad tokens in ``tokens``."""
        ids = self.tokens
        return int(np.count_nonzero((ids == self.vision_tokens.image) | (ids == self.vision_tokens.video)))

    def mrope_position_ids(self, spec: MRopeSpec) -> np.ndarray:
        """``[3, L]`` M-RoPE ids of this sample alone (starting at 0 on all three axes)."""
        return rope_index(self.tokens, spec, image_grid_thw=self.grids("image"),
                          video_grid_thw=self.grids("video"), second_per_grid=self.second_per_grid())

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"tokens", "labels", "loss_mask"}``."""
        return {"tokens": self.tokens, "labels": self.labels, "loss_mask": self.loss_mask}


def marker_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer VLM rows are read with: the markers (``<image>``, ``<video>``) found in the text before
    tokenizing, each read as one token of its own (:meth:`~seqpack.data.tokenizers.HFTokenizer.with_atomic_texts`),
    so a BPE tokenizer that merges ``>`` with the next newline or ``" <"`` with the previous space cannot hide
    a marker; the embedded byte tokenizer spells markers byte by byte and is returned as is."""
    twin = getattr(tokenizer, "with_atomic_texts", None)
    return twin((IMAGE_MARKER, VIDEO_MARKER)) if callable(twin) else tokenizer


def find_subsequence(ids: np.ndarray, pattern: np.ndarray) -> list[int]:
    """Start indices of the non-overlapping occurrences of ``pattern`` in ``ids`` (left to right)."""
    n, k = int(ids.shape[0]), int(pattern.shape[0])
    if k == 0 or n < k:
        return []
    windows = np.lib.stride_tricks.sliding_window_view(ids, k)
    hits = np.flatnonzero(np.all(windows == pattern, axis=1)).tolist()
    starts: list[int] = []
    for h in hits:
        if not starts or h >= starts[-1] + k:
            starts.append(int(h))
    return starts


def _expand(
    sample: TokenizedSample, image_tokens: Sequence[int], video_tokens: Sequence[int], tokenizer: Tokenizer,
    vt: VisionTokens,
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, int]]]:
    """Replace every marker by ``<vision_start>``, its item's pad tokens and ``<vision_end>`` (loss 0).

    ``image_tokens[k]`` / ``video_tokens[k]``: the pad tokens of the k-th image / video. Returns the
    ids, the mask and the items in token order as ``(kind, index)``.
    """
    ids, mask = sample.input_ids, sample.loss_mask
    hits: list[tuple[int, int, str]] = []
    for kind, marker, wanted in (("image", IMAGE_MARKER, len(image_tokens)), ("video", VIDEO_MARKER, len(video_tokens))):
        marker_ids = np.asarray(tokenizer.encode(marker), dtype=np.int64)
        found = find_subsequence(ids, marker_ids)
        if len(found) != wanted:
            raise InputError(
                f"the row has {wanted} {kind}(s) but its text holds {len(found)} {marker} marker(s) after "
                "tokenization; put exactly one marker per item, in order", field=f"{kind}s",
            )
        hits += [(s, len(marker_ids), kind) for s in found]
    hits.sort()
    counts = {"image": list(image_tokens), "video": list(video_tokens)}
    taken = {"image": 0, "video": 0}
    pad = {"image": vt.image, "video": vt.video}
    pieces_ids: list[np.ndarray] = []
    pieces_mask: list[np.ndarray] = []
    order: list[tuple[str, int]] = []
    at = 0
    for start, width, kind in hits:
        if start < at:
            raise InputError("image and video markers overlap", field=f"{kind}s")
        k = taken[kind]
        taken[kind] += 1
        block = np.concatenate(([vt.start], np.full(counts[kind][k], pad[kind]), [vt.end])).astype(np.int64)
        pieces_ids += [ids[at:start], block]
        pieces_mask += [mask[at:start], np.zeros(block.size, dtype=mask.dtype)]
        order.append((kind, k))
        at = start + width
    pieces_ids.append(ids[at:])
    pieces_mask.append(mask[at:])
    new_ids = np.concatenate(pieces_ids)
    new_mask = np.concatenate(pieces_mask)
    new_mask[vt.is_vision(new_ids)] = 0  # a literal vision id in the text is never trained either
    return new_ids, new_mask, order


def _check_length(n: int, text: int, items: int, max_length: int) -> None:
    if n > max_length:
        raise SampleRejected(
            rj.TOO_LONG,
            f"{n} tokens ({n - text} more from {items} image/video item(s)) > max_length {max_length}; "
            "VLM samples are never truncated",
        )


def tokenize_vlm_row(
    row: Mapping[str, Any],
    schema: Schema,
    tokenizer: Tokenizer,
    *,
    vision: VisionSpec,
    vision_tokens: VisionTokens | None = None,
    max_length: int,
    base_dir: str | os.PathLike[str] | None = None,
    location: RowLocation | None = None,
) -> VLMExample:
    """Encode one row under the VLM sample contract (module docstring).

    Raises InputError (file, line, row and field) for malformed rows, missing or undecodable
    images and marker mismatches; SampleRejected when the expanded sample is longer than
    ``max_length`` or would train nothing.
    """
    vt = vision_tokens or VisionTokens.for_tokenizer(tokenizer)
    tokenizer = marker_tokenizer(tokenizer)
    base = None if base_dir is None else Path(base_dir)
    with at_row(location):
        text_row, checked = checked_visuals(row, schema, base_dir=base, vision=vision)
        sample = tokenize_row(text_row, schema, tokenizer, max_length=sys.maxsize, truncation="reject")
        _check_length(_expanded_length(sample.input_ids.size, checked, tokenizer), sample.input_ids.size,
                      len(checked), max_length)  # from the headers, before decoding anything
        image_items, video_items = encode_visuals(checked, vision)
        merge = vision.merge_size
        ids, mask, placed = _expand(sample, [v.n_tokens(merge) for v in image_items],
                                    [v.n_tokens(merge) for v in video_items], tokenizer, vt)
        items = {"image": image_items, "video": video_items}
        order = tuple(items[kind][k] for kind, k in placed)
        _check_length(ids.size, sample.input_ids.size, len(order), max_length)
        if vt.is_vision(ids[-1:]).any():
            raise InputError("an image or video may not end the sample (its last token would be cut by the shift)",
                             field="images")
        ex = to_training_example(replace(sample, input_ids=ids, loss_mask=mask.astype(np.int8)))
        if not float(ex.loss_mask.sum()):
            raise SampleRejected(rj.NO_SUPERVISED_TOKENS)
        return VLMExample(ex.tokens, ex.labels, ex.loss_mask, order, vt, original_length=int(ids.size))


@dataclass(frozen=True)
class VLMLength:
    """Training length of a VLM sample (after the shift) and how many of its tokens are vision pads."""

    tokens: int
    vision_tokens: int
    images: int
    videos: int


def vlm_sample_length(
    row: Mapping[str, Any],
    schema: Schema,
    tokenizer: Tokenizer,
    *,
    vision: VisionSpec,
    vision_tokens: VisionTokens | None = None,
    max_length: int = sys.maxsize,
    base_dir: str | os.PathLike[str] | None = None,
    location: RowLocation | None = None,
) -> VLMLength:
    """The length :func:`tokenize_vlm_row` would give, from image headers alone (no pixel decoding):
    what planning and inspection need. Same errors and rejections."""
    vt = vision_tokens or VisionTokens.for_tokenizer(tokenizer)
    tokenizer = marker_tokenizer(tokenizer)
    base = None if base_dir is None else Path(base_dir)
    with at_row(location):
        text_row, checked = checked_visuals(row, schema, base_dir=base, vision=vision)
        sample = tokenize_row(text_row, schema, tokenizer, max_length=sys.maxsize, truncation="reject")
        image_counts = [int(c.tokens or 0) for c in checked if c.kind == "image"]
        video_counts = [int(c.tokens or 0) for c in checked if c.kind == "video"]
        ids, mask, placed = _expand(sample, image_counts, video_counts, tokenizer, vt)
        _check_length(ids.size, sample.input_ids.size, len(placed), max_length)
        if not mask[1:].any():
            raise SampleRejected(rj.NO_SUPERVISED_TOKENS)
        return VLMLength(int(ids.size) - 1, sum(image_counts) + sum(video_counts), len(image_counts),
                         len(video_counts))


def _expanded_length(text_tokens: int, checked: Sequence[CheckedVisual], tokenizer: Tokenizer) -> int:
    """Tokens of the row once every marker is replaced by its item's start, pad and end tokens."""
    width = {"image": len(tokenizer.encode(IMAGE_MARKER)), "video": len(tokenizer.encode(VIDEO_MARKER))}
    return text_tokens + sum(int(c.tokens or 0) + 2 - width[c.kind] for c in checked)


_VISUAL_HINTS: tuple[bytes, ...] = (b'"images"', b'"videos"', b'"image"', b'"video"')


def file_has_visuals(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when some row of the input carries images or videos (JSONL rows are parsed only when
    their raw bytes mention them, so a text file is scanned at byte speed; Parquet and datasets
    folders only when they have such a column)."""
    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.rows import input_kind, open_rows

    if input_kind(path) != "jsonl":  # Parquet or a datasets folder: only rows with a visual column can hold any
        src = open_rows(path)
        try:
            if not {"images", "videos", "image", "video"} & set(src.columns):
                return False
            step = 1024
            return any(row_has_visuals(row) for start in range(0, len(src), step)
                       for row in src.rows(range(start, min(len(src), start + step))))
        finally:
            src.close()
    jf = JsonlFile(path, cache_dir=cache_dir)
    try:
        for i in range(len(jf)):
            raw = jf.raw(i)
            if any(hint in raw for hint in _VISUAL_HINTS) and row_has_visuals(jf.row(i)):
                return True
        return False
    finally:
        jf.close()


def resolve_vision(option: str | VisionSpec | None, path: str | os.PathLike[str] | None = None, *,
                   min_pixels: int | None = None, max_pixels: int | None = None) -> VisionSpec | None:
    """The vision spec an option asks for: a preset name or spec as given; ``"none"``/None: text
    only; ``"auto"``: ``qwen2_vl`` when the file at ``path`` carries images or videos, else text only.
    ``min_pixels`` / ``max_pixels``: the user's pixel budget in place of the preset's."""
    from seqpack.core.choices import VISION_OPTIONS
    from seqpack.data.vlm.vision import vision_spec

    if option is None or option == "none":
        return None
    if option == "auto":
        if path is None or not file_has_visuals(path):
            return None
        return vision_spec("qwen2_vl", min_pixels=min_pixels, max_pixels=max_pixels)
    if isinstance(option, str) and option not in VISION_OPTIONS:
        raise UsageError(f"unknown vision option {option!r}; choose one of {', '.join(VISION_OPTIONS)}",
                         field="vision")
    return vision_spec(option, min_pixels=min_pixels, max_pixels=max_pixels)


@dataclass(frozen=True, eq=False)
class VLMFileLengths:
    """Training lengths of every usable row of a VLM JSONL file (header-only, :func:`vlm_sample_length`).

    ``lengths`` and ``vision_tokens`` (int64, one per usable row), counts of images and videos, and
    the rejected rows by reason.
    """

    lengths: np.ndarray
    vision_tokens: np.ndarray
    rows: int
    images: int
    videos: int
    rows_with_visuals: int
    rejected: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        """Counts (not the arrays)."""
        total = int(self.lengths.sum())
        vision = int(self.vision_tokens.sum())
        return {"rows": self.rows, "samples": int(self.lengths.size), "rows_with_visuals": self.rows_with_visuals,
                "images": self.images, "videos": self.videos, "vision_tokens": vision, "text_tokens": total - vision,
                "vision_token_share": vision / total if total else 0.0, "rejected": dict(self.rejected)}


def measure_vlm_file(
    path: str | os.PathLike[str],
    *,
    vision: VisionSpec,
    schema: Schema | None = None,
    tokenizer: Tokenizer | None = None,
    max_length: int = sys.maxsize,
) -> VLMFileLengths:
    """:func:`vlm_sample_length` of every row of a JSONL file; rejected rows are counted, malformed
    rows raise (file, line, row, field)."""
    from collections import Counter

    from seqpack.data.jsonl import JsonlFile
    from seqpack.data.schemas import default_schema, detect_schema
    from seqpack.data.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    vt = VisionTokens.for_tokenizer(tok)
    jf = JsonlFile(path)
    try:
        sch = schema or default_schema(detect_schema(normalize_visual_row(jf.row(0))[0]))
        lengths, vision_tokens = [], []
        images = videos = with_visuals = 0
        rejected: Counter = Counter()
        for i in range(len(jf)):
            try:
                got = vlm_sample_length(jf.row(i), sch, tok, vision=vision, vision_tokens=vt, max_length=max_length,
                                        base_dir=jf.path.parent, location=jf.location(i))
            except SampleRejected as err:
                rejected[err.reason] += 1
                continue
            lengths.append(got.tokens)
            vision_tokens.append(got.vision_tokens)
            images += got.images
            videos += got.videos
            with_visuals += bool(got.images or got.videos)
        return VLMFileLengths(np.asarray(lengths, dtype=np.int64), np.asarray(vision_tokens, dtype=np.int64),
                              len(jf), images, videos, with_visuals, dict(sorted(rejected.items())))
    finally:
        jf.close()


def with_absolute_paths(row: Mapping[str, Any], base_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A copy of ``row`` whose relative image and frame paths (fields and chat content parts) are made
    absolute against ``base_dir``, so the row can be copied to another file."""
    base = Path(base_dir)

    def fix(ref: Any) -> Any:
        if isinstance(ref, str) and ref and not Path(ref).is_absolute():
            return str(base / ref)
        if isinstance(ref, Mapping) and isinstance(ref.get("path"), str) and not Path(ref["path"]).is_absolute():
            return {**ref, "path": str(base / ref["path"])}
        return ref

    out = dict(row)
    if isinstance(row.get("images"), list):
        out["images"] = [fix(r) for r in row["images"]]
    if isinstance(row.get("videos"), list):
        out["videos"] = [{**v, "frames": [fix(f) for f in v["frames"]]}
                         if isinstance(v, Mapping) and isinstance(v.get("frames"), list) else v for v in row["videos"]]

    def fix_part(part: Any) -> Any:
        if not isinstance(part, Mapping):
            return part
        if part.get("type") == "image":
            return {k: fix(v) if k in ("image", "path") else v for k, v in part.items()}
        if part.get("type") == "video" and isinstance(part.get("video", part.get("frames")), list):
            return {k: [fix(f) for f in v] if k in ("video", "frames") else v for k, v in part.items()}
        return part

    for key in CHAT_KEYS:
        if isinstance(row.get(key), list):
            text_key = "value" if key == "conversations" else "content"
            out[key] = [{**t, text_key: [fix_part(p) for p in t[text_key]]} if _content_list(t, text_key) else t
                        for t in row[key]]
    return out

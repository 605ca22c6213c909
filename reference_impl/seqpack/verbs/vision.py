"""Vision verbs: ``image_tokens`` (the patch grid and language-model tokens of an image or a video under a
vision preset) and ``mrope_positions`` (the multimodal RoPE ids of a described layout, packed or not)."""

from __future__ import annotations

from dataclasses import dataclass

from seqpack.core.arguments import positive_float, positive_int
from seqpack.core.choices import VISION_PRESETS
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_SECONDS_PER_GRID, MAX_TOKENS_PER_SECOND, MAX_VIDEO_FRAMES
from seqpack.core.reports import ImageTokens, MRopeLayout
from seqpack.verbs.common import check_choice

__all__ = ["ImageTokensOptions", "MRopeOptions", "image_tokens", "mrope_positions"]


@dataclass(frozen=True, kw_only=True)
class ImageTokensOptions:
    """The image size in pixels, how many frames (1: an image; more: a video) and the vision preset."""

    height: int
    width: int
    frames: int = 1
    vision: str = "qwen2_vl"


def image_tokens(options: ImageTokensOptions) -> ImageTokens:
    """The resized size, the (t, h, w) patch grid, the patch rows and the tokens the item occupies in a
    sample (:mod:`seqpack.data.vlm.vision`); ``sequence_tokens`` adds the vision start and end tokens.

    >>> image_tokens(ImageTokensOptions(height=480, width=640)).tokens
    391
    """
    from seqpack.data.vlm.vision import smart_resize, vision_spec
    from seqpack.data.vlm.images import check_image_size

    check_choice("vision", options.vision, VISION_PRESETS)
    h = positive_int("height", options.height)
    w = positive_int("width", options.width)
    frames = positive_int("frames", options.frames, maximum=MAX_VIDEO_FRAMES)
    check_image_size(h, w, what="image", field="height", error=UsageError)  # the rows' check (visual_inputs)
    spec = vision_spec(options.vision)
    rh, rw = smart_resize(h, w, spec.factor, spec.min_pixels, spec.max_pixels)
    t, gh, gw = spec.grid_for_size(h, w, frames)
    tokens = spec.tokens_for_grid((t, gh, gw))
    m = spec.merge_size
    explanation = (
        f"{h}x{w} resized to {rh}x{rw} (multiples of patch {spec.patch_size} x merge {m} = {spec.factor}, area in "
        f"[{spec.min_pixels}, {spec.max_pixels}]) -> grid t={t} (ceil({frames} / temporal patch "
        f"{spec.temporal_patch_size})), h={gh}, w={gw} -> {t * gh * gw} patch rows of {spec.patch_dim} values -> "
        f"{tokens} tokens after the {m}x{m} merge (+2 for vision start and end)"
    )
    return ImageTokens(
        vision=spec.name, height=h, width=w, frames=frames, resized_height=rh, resized_width=rw, grid_t=t,
        grid_h=gh, grid_w=gw, patch_rows=t * gh * gw, patch_dim=spec.patch_dim, merge_size=m, tokens=tokens,
        sequence_tokens=tokens + 2, explanation=explanation,
    )


@dataclass(frozen=True, kw_only=True)
class MRopeOptions:
    """A layout to number: sequences separated by ``|``, each a comma-separated list of items
    ``text:N``, ``image:TxHxW`` and ``video:TxHxW`` (optionally ``@S``, seconds per temporal patch);
    every image and video is wrapped in a vision start and end token, as Qwen's template does.

    ``model``: ``qwen2_vl`` (temporal interval 1) or ``qwen2_5_vl`` (interval
    ``tokens_per_second * S``); ``text_after_vision``: ``max`` (the Qwen code, transformers < 5.3)
    or ``spatial`` (transformers >= 5.3); ``pad_seq_to_mult``: the alignment of packed sequences.
    """

    layout: str
    merge_size: int = 2
    model: str = "qwen2_vl"
    tokens_per_second: float = 2.0
    text_after_vision: str = "max"
    pad_seq_to_mult: int = 1


def _parse_layout(layout: str, merge: int) -> list[list[tuple[str, tuple[int, ...], float]]]:
    from seqpack.core.limits import MAX_MROPE_TOKENS

    if not isinstance(layout, str) or not layout.strip():
        raise UsageError("layout must be a non-empty string like 'text:3,image:1x4x6,text:2'", field="layout")
    sequences, total = [], 0
    for part in layout.split("|"):
        items = []
        for raw in part.split(","):
            kind, sep, spec = raw.strip().partition(":")
            try:
                if not sep or kind not in ("text", "image", "video"):
                    raise ValueError
                if kind == "text":
                    n = int(spec)
                    if n < 1:
                        raise ValueError
                    items.append((kind, (n,), 1.0))
                    total += n
                    continue
                dims, _, seconds = spec.partition("@")
                t, h, w = (int(x) for x in dims.lower().split("x"))
                sec = float(seconds) if seconds else 1.0
                if min(t, h, w) < 1 or h % merge or w % merge or (kind == "image" and t != 1):
                    raise ValueError
                positive_float("seconds per temporal patch", sec, maximum=MAX_SECONDS_PER_GRID, field="layout")
            except ValueError:
                raise UsageError(
                    f"bad layout item {raw.strip()!r}: use text:N, image:1xHxW or video:TxHxW[@seconds] with H and W "
                    f"multiples of merge_size={merge}", field="layout",
                ) from None
            items.append((kind, (t, h, w), sec))
            total += t * h * w // merge ** 2 + 2
        sequences.append(items)
        if total > MAX_MROPE_TOKENS:
            raise UsageError(f"the layout holds more than {MAX_MROPE_TOKENS} tokens", field="layout")
    return sequences


def mrope_positions(options: MRopeOptions) -> MRopeLayout:
    """Multimodal RoPE ids of a described layout (:mod:`seqpack.data.vlm.mrope`), packed into one THD
    row when it holds several sequences (each restarts at 0, padded to ``pad_seq_to_mult``).

    >>> r = mrope_positions(MRopeOptions(layout="text:3,image:1x4x6,text:2"))
    >>> r.blocks[1]["last"], r.sequences[0]["next_position"]
    ([4, 5, 6], 10)
    """
    import numpy as np

    from seqpack.core.alignment import round_up
    from seqpack.core.choices import MROPE_MODELS, TEXT_AFTER_VISION
    from seqpack.data.vlm.mrope import MRopeSpec, packed_rope_index
    from seqpack.core.limits import MAX_MROPE_TOKENS_SHOWN

    merge = positive_int("merge_size", options.merge_size, maximum=64)
    check_choice("model", options.model, MROPE_MODELS)
    check_choice("text_after_vision", options.text_after_vision, TEXT_AFTER_VISION)
    m = positive_int("pad_seq_to_mult", options.pad_seq_to_mult, maximum=65536)
    tps = positive_float("tokens_per_second", options.tokens_per_second, maximum=MAX_TOKENS_PER_SECOND)
    image_id, video_id, start_id, end_id, text_id = 3, 4, 1, 2, 0
    spec = MRopeSpec(image_id, video_id, merge, tokens_per_second=tps if options.model == "qwen2_5_vl" else None,
                     text_after_vision=options.text_after_vision)
    rows, grids, blocks, cu, cu_p = [], {"image": [], "video": []}, [], [0], [0]
    seconds: list[float] = []
    for s, items in enumerate(_parse_layout(options.layout, merge)):
        seq: list[int] = []
        for kind, dims, sec in items:
            begin = cu_p[-1] + len(seq)
            if kind == "text":
                seq += [text_id] * dims[0]
            else:
                n = dims[0] * dims[1] * dims[2] // merge ** 2
                seq += [start_id] + [image_id if kind == "image" else video_id] * n + [end_id]
                grids[kind].append(dims)
                if kind == "video":
                    seconds.append(sec)
                begin += 1  # the block itself, after its vision start token
                blocks.append({"sequence": s, "kind": kind, "grid": list(dims), "start": begin, "end": begin + n})
                continue
            blocks.append({"sequence": s, "kind": kind, "start": begin, "end": begin + dims[0]})
        rows.append(seq)
        cu.append(cu[-1] + len(seq))
        cu_p.append(cu_p[-1] + round_up(len(seq), m))
    tokens = np.concatenate([np.asarray(r + [text_id] * (round_up(len(r), m) - len(r)), dtype=np.int64) for r in rows])
    pos = packed_rope_index(tokens, cu, spec, cu_seqlens_padded=cu_p,
                            image_grid_thw=grids["image"] or None, video_grid_thw=grids["video"] or None,
                            second_per_grid=seconds or None)
    for b in blocks:
        b["first"] = pos[:, b["start"]].tolist()
        b["last"] = pos[:, b["end"] - 1].tolist()
    sequences = [{"sequence": i, "start": cu_p[i], "length": cu[i + 1] - cu[i],
                  "next_position": int(pos[:, cu_p[i]: cu_p[i] + cu[i + 1] - cu[i]].max()) + 1}
                 for i in range(len(rows))]
    return MRopeLayout(
        layout=options.layout, merge_size=merge, model=options.model, text_after_vision=options.text_after_vision,
        pad_seq_to_mult=m, total_tokens=int(tokens.size), blocks=blocks, sequences=sequences,
        position_ids=pos.tolist() if tokens.size <= MAX_MROPE_TOKENS_SHOWN else None,
    )

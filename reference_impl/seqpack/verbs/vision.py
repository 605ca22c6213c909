"""Vision verbs: ``image_tokens`` (the patch grid and language-model tokens of an image or a video under a
vision preset) and ``mrope_positions`` (the multimodal RoPE ids of a described layout, packed or not)."""

from __future__ import annotations

from seqpack.core.arguments import positive_float
from seqpack.core.choices import MROPE_MODELS, TEXT_AFTER_VISION, VISION_PRESETS
from seqpack.core.errors import UsageError
from seqpack.core.limits import (
    MAX_CONFIG_CHARS,
    MAX_IMAGE_PIXELS,
    MAX_SECONDS_PER_GRID,
    MAX_TOKENS_PER_SECOND,
    MAX_VIDEO_FRAMES,
)
from seqpack.core.reports import ImageTokens, MRopeLayout
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import pixels_option
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["IMAGE_TOKENS", "MROPE", "ImageTokensOptions", "MRopeOptions", "image_tokens", "mrope_positions",
           "render_image_tokens", "render_mrope"]


@verb_options
class ImageTokensOptions:
    """The image size in pixels, how many frames (1: an image; more: a video) and the vision preset."""

    height: int = option(help="image height in pixels", minimum=1, maximum=MAX_IMAGE_PIXELS)
    width: int = option(help="image width in pixels", minimum=1, maximum=MAX_IMAGE_PIXELS)
    frames: int = option(1, help="frames of a video (1: an image)", minimum=1, maximum=MAX_VIDEO_FRAMES)
    vision: str = option("qwen2_vl", help="vision preset (qwen2_vl, qwen2_5_vl: patch 14, merge 2, temporal patch 2)",
                         choices=VISION_PRESETS)
    min_pixels: int | None = pixels_option("min")
    max_pixels: int | None = pixels_option("max")


def image_tokens(options: ImageTokensOptions) -> ImageTokens:
    """The resized size, the (t, h, w) patch grid, the patch rows and the tokens the item occupies in a
    sample (:mod:`seqpack.data.vlm.vision`); ``sequence_tokens`` adds the vision start and end tokens.

    >>> image_tokens(ImageTokensOptions(height=480, width=640)).tokens
    391
    """
    from seqpack.data.vlm.vision import smart_resize, vision_spec
    from seqpack.data.vlm.images import check_image_size

    check_options(options)
    h, w, frames = options.height, options.width, options.frames
    check_image_size(h, w, what="image", field="height", error=UsageError)  # the rows' check (visual_inputs)
    spec = vision_spec(options.vision, min_pixels=options.min_pixels, max_pixels=options.max_pixels)
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


@verb_options
class MRopeOptions:
    """A layout to number: sequences separated by ``|``, each a comma-separated list of items
    ``text:N``, ``image:TxHxW`` and ``video:TxHxW`` (optionally ``@S``, seconds per temporal patch);
    every image and video is wrapped in a vision start and end token, as Qwen's template does.

    ``model``: ``qwen2_vl`` (temporal interval 1) or ``qwen2_5_vl`` (interval
    ``tokens_per_second * S``); ``text_after_vision``: ``max`` (the Qwen code, transformers < 5.3)
    or ``spatial`` (transformers >= 5.3); ``pad_seq_to_mult``: the alignment of packed sequences.
    """

    layout: str = option(help="sequences separated by |, each a comma-separated list of text:N, image:1xHxW, "
                         "video:TxHxW[@seconds], e.g. 'text:3,image:1x4x6,text:2|text:5'; every image/video gets "
                         "vision start and end tokens", positional=True, min_length=1, max_length=MAX_CONFIG_CHARS)
    merge_size: int = option(2, help="spatial merge size", minimum=1, maximum=64)
    model: str = option("qwen2_vl", help="qwen2_vl (temporal interval 1) or qwen2_5_vl (tokens_per_second x seconds "
                        "per patch)", choices=MROPE_MODELS)
    tokens_per_second: float = option(2.0, help="qwen2_5_vl's tokens_per_second", minimum=0.0, exclusive_minimum=True,
                                      maximum=MAX_TOKENS_PER_SECOND)
    text_after_vision: str = option("max", help="max: one past the block's largest id (the Qwen code, transformers "
                                    "< 5.3); spatial: start + max(h, w)/merge (transformers >= 5.3)",
                                    choices=TEXT_AFTER_VISION)
    pad_seq_to_mult: int = option(1, help="alignment of each packed sequence", minimum=1, maximum=65536)


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
    from seqpack.data.vlm.mrope import MRopeSpec, packed_rope_index
    from seqpack.core.limits import MAX_MROPE_TOKENS_SHOWN

    check_options(options)
    merge, m, tps = options.merge_size, options.pad_seq_to_mult, float(options.tokens_per_second)
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


def render_image_tokens(r: ImageTokens, options: ImageTokensOptions) -> str:
    """The CLI's text: the grid, the token count and how they come about."""
    return "\n".join([f"{r.vision}: {r.height}x{r.width}" + (f", {r.frames} frames" if r.frames > 1 else "")
                      + f" -> grid (t={r.grid_t}, h={r.grid_h}, w={r.grid_w}), {r.patch_rows} patch rows, {r.tokens} "
                      f"tokens ({r.sequence_tokens} with vision start/end)", r.explanation])


def render_mrope(r: MRopeLayout, options: MRopeOptions) -> str:
    """The CLI's text: every block's first and last (t, h, w) ids and every sequence's restart."""
    out = [f"{r.model}, merge {r.merge_size}, text after vision: {r.text_after_vision}; {len(r.sequences)} "
           f"sequence(s), {r.total_tokens} tokens",
           text_table(["seq", "block", "grid", "positions", "first (t,h,w)", "last (t,h,w)"],
                      [[b["sequence"], b["kind"], "x".join(map(str, b.get("grid", []))) or "-",
                        f"{b['start']}-{b['end'] - 1}", tuple(b["first"]), tuple(b["last"])] for b in r.blocks])]
    out += [f"sequence {s['sequence']}: starts at {s['start']} with (0, 0, 0), {s['length']} tokens, next id "
            f"{s['next_position']}" for s in r.sequences]
    return "\n".join(out)


IMAGE_TOKENS = Verb(
    name="image_tokens", options=ImageTokensOptions, function=image_tokens, render=render_image_tokens,
    help="patch grid and language-model tokens of an image (or a video of N frames) under a Qwen-VL vision preset",
    tools=(Tool(
        "count_image_tokens", title="Count the tokens of an image or video in a Qwen-VL sample",
        description="""How an image (or frames of one size) becomes patches and language-model tokens, as the Qwen2-VL
processor does: resized size, (t, h, w) grid, patch rows and tokens (t*h*w / merge**2; +2 for the
vision start and end tokens in a sample). Packed VLM samples align these tokens with the text.""",
    ),),
)

MROPE = Verb(
    name="mrope_positions", options=MRopeOptions, function=mrope_positions, render=render_mrope,
    help="M-RoPE position ids of a layout of text, images and videos (sequences separated by |, packed into one row)",
    tools=(Tool(
        "mrope_position_ids", title="Multimodal RoPE position ids of a Qwen-VL layout",
        description="""(temporal, height, width) position ids of text, images and videos as Qwen2-VL/Qwen2.5-VL's get_rope_index
computes them; several sequences are packed into one THD row and each restarts at (0, 0, 0). Every image
and video is wrapped in vision start/end tokens. Blocks give each item's offsets and first/last ids.""",
    ),),
)

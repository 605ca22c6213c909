"""VLM tasks: image tokens, multimodal RoPE ids, packed VLM rows, the VLM rules, VLM data files.

Every value comes from the code: image and video tokens from
:func:`seqpack.verbs.vision.image_tokens`, M-RoPE ids from
:func:`seqpack.data.vlm.mrope.rope_index` (checked against ``transformers`` by
``tests/test_mrope_differential.py``), packed offsets from the THD builder, rules from
``validate_config``, the contextual numbers from ``seqpack batches`` and ``seqpack plan`` on the
shipped VLM demo rows and images.
"""

from __future__ import annotations

import json
from pathlib import Path

from seqpack_evals import claims, tables
from seqpack_evals.builder import GenContext, make_task, override_args, paths_of
from seqpack_evals.facts import facts_for, facts_for_rule, merge
from seqpack_evals.fields import choice_field, int_field, yes_no_field
from seqpack_evals.vocab import quantity_aliases, rule_ids_field

#: The max_pixels the screenshot task states (seqpack's qwen2_5_vl preset: 1280 x 28 x 28).
MAX_PIXELS_STATED = 1280 * 28 * 28
TOKENS_ALIASES = quantity_aliases("image_tokens")


# ------------------------------------------------------------------------------------------------
# Image and video tokens
# ------------------------------------------------------------------------------------------------


def _token_tasks(ctx: GenContext) -> None:
    from seqpack.verbs.vision import ImageTokensOptions, image_tokens

    r = image_tokens(ImageTokensOptions(height=480, width=640))
    ctx.add(make_task(
        "explicit-vlm-image-tokens-640x480", "explicit",
        "Use the sequence packing skill (seqpack) to tell me how many language-model tokens one 640x480 (width x "
        "height) image takes in a Qwen2-VL SFT sample with the default processor (patch 14, merge 2), and the "
        "patch grid height and width.",
        f"{r.tokens} tokens. The processor resizes the image to {r.resized_height}x{r.resized_width} pixels (height "
        f"x width, both multiples of 28), so the patch grid has height {r.grid_h} and width {r.grid_w} ({r.patch_rows} "
        f"patches); the 2x2 merge leaves {r.tokens} language-model tokens, plus the vision start and end tokens.",
        [int_field("image_tokens", r.tokens, *TOKENS_ALIASES, says="tokens of the image (without vision start/end)"),
         int_field("grid_h", r.grid_h, r"grid[_ ]h(?:eight)?", r"\bh\s*=", says="patch grid height"),
         int_field("grid_w", r.grid_w, r"grid[_ ]w(?:idth)?", r"\bw\s*=", says="patch grid width")],
        [claims.skip_verification()],
        assertions=["Resizes to multiples of 28 before counting (smart resize), then divides the patch grid by 4"],
        script="seqpack image-tokens", command=["image-tokens", "--height", "480", "--width", "640"],
        paths=["in_batch", "energon"], topics=["vlm"], truth=r.to_dict(),
    ))

    shot = image_tokens(ImageTokensOptions(height=1080, width=1920, vision="qwen2_5_vl"))
    seq, text, n = 4096, 300, 3
    need = n * shot.sequence_tokens + text
    ctx.add(make_task(
        "implicit-vlm-screenshot-budget", "implicit",
        f"Our Qwen2.5-VL fine-tuning set is full-HD screenshots (1920x1080), {n} per conversation, plus about "
        f"{text} text tokens. Our image processor caps max_pixels at {MAX_PIXELS_STATED:,} (1280 x 28 x 28) and keeps "
        f"patch size 14 and the 2x2 merge. How many tokens does one screenshot become, and does a {seq}-token "
        "sequence length hold a whole conversation without cutting it?",
        f"One screenshot is {shot.tokens} tokens ({shot.sequence_tokens} with the vision start and end tokens): the "
        f"processor scales it down to {shot.resized_height}x{shot.resized_width} pixels to stay under max_pixels. "
        f"{n} screenshots and {text} text tokens make {need} tokens, so "
        + ("it fits." if need <= seq else f"it does not fit in {seq}; raise seq_length or lower max_pixels "
                                           "(VLM samples must never be cut)."),
        [int_field("image_tokens", shot.tokens, *TOKENS_ALIASES, says="tokens of one screenshot"),
         yes_no_field("fits", need <= seq,
                      [rf"\b(?:fits?|holds?)\b[^.\n]{{0,30}}{seq}", r"\bwill fit\b", r"\bdoes fit\b"],
                      [r"(?:does ?n[o']t|won'?t|will not|cannot|can't) (?:fit|hold)", r"\btoo (?:long|many)\b",
                       r"\bexceeds?\b"],
                      anywhere=True, says=f"a conversation fits {seq} tokens")],
        [claims.claim("truncate_images"), claims.skip_verification()],
        assertions=["Counts the screenshots after the processor's max_pixels downscale, not at full resolution"],
        script="seqpack image-tokens",
        command=["image-tokens", "--height", "1080", "--width", "1920", "--vision", "qwen2_5_vl"],
        paths=["in_batch", "energon"], topics=["vlm"],
        truth={**shot.to_dict(), "conversation_tokens": need,
               "assumes": f"max_pixels={MAX_PIXELS_STATED} as the prompt states (seqpack's qwen2_5_vl preset); a "
                          "processor config with a larger max_pixels (e.g. 12845056) keeps 1920x1080 unscaled: 2691 "
                          "tokens per screenshot, which would not fit"},
    ))

    video = image_tokens(ImageTokensOptions(height=448, width=448, frames=8))
    ctx.add(make_task(
        "explicit-vlm-video-tokens", "explicit",
        "With seqpack, how many language-model tokens does an 8-frame 448x448 video take in a Qwen2-VL sample "
        "(temporal patch 2, patch 14, merge 2), and what is its temporal grid size t?",
        f"{video.tokens} tokens: the 8 frames pair up into a temporal grid of t={video.grid_t}, each pair is a "
        f"{video.grid_h}x{video.grid_w} patch grid, and the 2x2 merge leaves {video.tokens} tokens.",
        [int_field("video_tokens", video.tokens, r"(?:video|visual) tokens?", says="tokens of the video"),
         int_field("grid_t", video.grid_t, r"grid[_ ]t\b", r"\bt\s*=", r"temporal grid", says="temporal grid t")],
        [claims.skip_verification()],
        assertions=["Pairs the frames (temporal patch 2) before counting"],
        script="seqpack image-tokens",
        command=["image-tokens", "--height", "448", "--width", "448", "--frames", "8"],
        paths=["in_batch", "energon"], topics=["vlm"], truth=video.to_dict(),
    ))


# ------------------------------------------------------------------------------------------------
# Multimodal RoPE
# ------------------------------------------------------------------------------------------------

def _mrope_tasks(ctx: GenContext) -> None:
    from seqpack.verbs.vision import MRopeOptions, mrope_positions

    layout = "text:3,image:1x4x6,text:2"
    r = mrope_positions(MRopeOptions(layout=layout))
    image, after = r.blocks[1], r.blocks[2]
    last, resume = image["last"], after["first"][0]
    ctx.add(make_task(
        "explicit-vlm-mrope-image", "explicit",
        "Use seqpack for Qwen2-VL multimodal RoPE: a sample is 3 text tokens, <|vision_start|>, one image whose patch grid is "
        "(t=1, h=4, w=6) with spatial merge 2, <|vision_end|>, then 2 text tokens. Give "
        "the (temporal, height, width) position ids of the image's last token and the position id of the first "
        "text token after <|vision_end|>.",
        f"The image's 6 tokens form a 2x3 grid starting at position {image['first'][0]}: its last token is "
        f"(t, h, w) = ({last[0]}, {last[1]}, {last[2]}). <|vision_end|> takes one past the block's largest id and "
        f"the text after it continues from there, so the first text token after the image gets {resume} on all "
        "three axes.",
        [int_field("last_t", last[0], r"\bt(?:emporal)?\s*=", says="temporal id of the last image token"),
         int_field("last_h", last[1], r"\bh(?:eight)?\s*=", says="height id of the last image token"),
         int_field("last_w", last[2], r"\bw(?:idth)?\s*=", says="width id of the last image token"),
         int_field("text_after_image", resume, r"first text token after", says="id of the first text token after")],
        [claims.skip_verification()],
        assertions=["Divides the grid's h and w by the merge size before numbering the image tokens"],
        script="seqpack mrope", command=["mrope", layout], paths=["in_batch", "energon"], topics=["vlm", "mrope"],
        truth=r.to_dict(),
    ))

    layout = "text:1,video:8x2x2@1.0,text:1"
    kw = dict(layout=layout, model="qwen2_5_vl", tokens_per_second=2.0)
    original = mrope_positions(MRopeOptions(**kw, text_after_vision="max"))
    newer = mrope_positions(MRopeOptions(**kw, text_after_vision="spatial"))
    a, b = original.blocks[2]["first"][0], newer.blocks[2]["first"][0]
    ctx.add(make_task(
        "explicit-vlm-mrope-video-versions", "explicit",
        "Use seqpack for Qwen2.5-VL (tokens_per_second 2): a sample is one text token, <|vision_start|>, a video with grid "
        "(t=8, h=2, w=2), spatial merge 2 and 1.0 s per temporal patch, <|vision_end|>, then one text token. What "
        "position id does that last text token get with the original Qwen2.5-VL get_rope_index (transformers "
        "before 5.3), and what with transformers 5.3 and later?",
        f"Original code: {a}, because <|vision_end|> takes one past the block's largest id and the temporal ids "
        f"climb by 2 per patch up to {original.blocks[1]['last'][0]}. transformers >= 5.3: {b}, because it starts "
        "the text at start + max(h, w) / merge and ignores the temporal extent. seqpack computes both "
        "(text_after_vision max or spatial).",
        [int_field("original_position", a, r"original", r"before 5\.3", says="last text token, original code"),
         int_field("transformers53_position", b, r"5\.3(?: and later)?", r"\bnewer\b",
                   says="last text token, transformers >= 5.3")],
        [claims.skip_verification()],
        assertions=["Notes that the two differ only when the temporal extent exceeds the spatial one"],
        script="seqpack mrope",
        command=["mrope", layout, "--model", "qwen2_5_vl", "--text-after-vision", "max"],
        paths=["in_batch", "energon"], topics=["vlm", "mrope"],
        truth={"original": original.to_dict(), "spatial": newer.to_dict()},
    ))


def _packed_task(ctx: GenContext) -> None:
    from seqpack.core.alignment import derive_alignment
    from seqpack.verbs.vision import MRopeOptions, mrope_positions

    al = derive_alignment(1, 2, False)
    layout = "text:10,image:1x4x6,text:20|text:30,image:1x2x2,text:17"
    r = mrope_positions(MRopeOptions(layout=layout, pad_seq_to_mult=al.pad_seq_to_mult))
    first, second = r.sequences
    start, width = second["start"], r.total_tokens
    ctx.add(make_task(
        "explicit-vlm-packed-row", "explicit",
        f"With the sequence packing skill's in-batch packing and context parallel 2, two Qwen2-VL samples go into one "
        f"THD row: "
        f"sample A is 10 text tokens, an image with grid (1, 4, 6) and 20 text tokens; sample B is 30 text tokens, "
        f"an image with grid (1, 2, 2) and 17 text tokens (merge 2; every image is wrapped in vision start and end "
        f"tokens). At which offset does sample B start, how wide is the row, and do B's multimodal RoPE ids "
        f"restart at (0, 0, 0)?",
        f"{al.explanation}, and image tokens count like text: A is {first['length']} tokens and B "
        f"{second['length']}, so B starts at offset {start} and the row is {width} wide. B's M-RoPE ids restart "
        "at (0, 0, 0) on all three axes because every sample gets the ids it would have alone.",
        [int_field("second_start", start, r"(?:starts?|offset)(?: at)?", says="offset of sample B"),
         int_field("row_width", width, r"\bwidth\b", r"\bwide\b", says="packed row width"),
         yes_no_field("restart", True, [r"\brestart", r"\b(?:start|begin)s? (?:again )?at \(?0"],
                      [r"(?:do(?:es)?n[o']t|never) restart", r"continue from"], anywhere=True,
                      says="sample B's M-RoPE ids restart")],
        [claims.claim("continues_across_samples")] + claims.path_claims(["in_batch", "context_parallel"]),
        assertions=["Pads each sample (image tokens included) to 2*CP before placing the next"],
        script="seqpack mrope", command=["mrope", layout, "--pad-seq-to-mult", str(al.pad_seq_to_mult)],
        paths=["in_batch", "context_parallel"], topics=["vlm", "alignment"], truth=r.to_dict(),
    ))


# ------------------------------------------------------------------------------------------------
# Rules
# ------------------------------------------------------------------------------------------------

def _rule_tasks(ctx: GenContext) -> None:
    for r in tables.rows("vlm", "rule_runs", ("id", "bucket", "prompt", "overrides", "rule")):
        task_id, bucket, prompt, rule_id = r["id"], r["bucket"], r["prompt"], r["rule"]
        overrides = tables.strings(r["overrides"], f"vlm.yaml: rule_runs: {task_id}: overrides")
        report = ctx.validate(None, list(overrides))
        fields, forbidden, sentences = merge(facts_for_rule(report, rule_id) + facts_for(report))
        paths = paths_of(report)
        ctx.add(make_task(
            task_id, bucket, prompt,
            "seqpack validate reports:\n" + "\n".join(f.one_line() for f in report.violations + report.warnings)
            + "\n" + " ".join(sentences),
            [rule_ids_field(report.rule_ids)] + fields,
            forbidden + claims.path_claims(paths),
            script="seqpack validate", command=["validate", "/dev/null", *override_args(list(overrides))],
            paths=paths, topics=["vlm", "rules"], rule_ids=report.rule_ids,
            truth={"overrides": list(overrides), "violations": [f.rule_id for f in report.violations],
                   "warnings": [f.rule_id for f in report.warnings]},
        ))


# ------------------------------------------------------------------------------------------------
# VLM data in the working directory
# ------------------------------------------------------------------------------------------------

DATA_ROWS = 8


def _vlm_data(ctx: GenContext, task_id: str) -> tuple[Path, list[str]]:
    """The first demo VLM rows and the images they use, copied into the task's files; returns a
    scratch copy to run seqpack on (reading a JSONL caches its line index next to it) and the files."""
    import shutil

    from seqpack.data.vlm.demo import vlm_demo_path

    src = vlm_demo_path()
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)[:DATA_ROWS]
    rel = ctx.put_text(task_id, "vlm.jsonl", "".join(lines))
    used = sorted({p for line in lines for p in _images_of(json.loads(line))})
    files = [rel] + [ctx.put_file(task_id, p, src.parent / p) for p in used]
    work = ctx.work(task_id)
    (work / "vlm.jsonl").write_text("".join(lines), encoding="utf-8")
    for p in used:
        (work / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src.parent / p, work / p)
    return work / "vlm.jsonl", files


def _images_of(row: dict) -> list[str]:
    return list(row.get("images", [])) + [f for v in row.get("videos", []) for f in v["frames"]]


def _context_tasks(ctx: GenContext) -> None:
    from seqpack.verbs import BatchesOptions, PlanOptions, batches, plan

    task_id = "ctx-vlm-batches"
    path, files = _vlm_data(ctx, task_id)
    report = batches(BatchesOptions(input=path, seq_length=1024, cp=2, num_batches=1, vision="qwen2_vl"))
    first = report.batches[0]
    ctx.add(make_task(
        task_id, "contextual",
        "vlm.jsonl holds Qwen-VL style chat rows with images (paths next to it). With in-batch packing of 4 rows "
        "per micro-batch, context parallel 2 and the Qwen2-VL image processor, how many image tokens does the "
        "first packed micro-batch hold, how many images and videos, and how wide is its THD row?",
        f"seqpack batches --vision qwen2_vl shows micro-batch 0 packing rows {list(first.rows)}. It carries "
        f"{first.images + first.videos} images and videos, which take {first.vision_tokens} image tokens. Every row "
        f"(image tokens included) is padded to a multiple of {first.pad_seq_to_mult}, so the row width is "
        f"{first.width}.",
        [int_field("image_tokens", first.vision_tokens, r"image tokens?", r"visual tokens?", says="image tokens"),
         int_field("visual_items", first.images + first.videos, r"images and videos", says="images + videos"),
         int_field("row_width", first.width, r"\bwidth\b", r"\bwide\b", says="THD row width")],
        [claims.claim("truncate_images")] + claims.path_claims(["in_batch", "context_parallel"]),
        script="seqpack batches",
        command=["batches", "vlm.jsonl", "--seq-length", "1024", "--cp", "2", "--num-batches", "1", "--vision",
                 "qwen2_vl"],
        files=files, paths=["in_batch", "context_parallel"], topics=["vlm"],
        truth={"batch": first.to_dict(), "vision": report.vision},
    ))

    task_id = "ctx-vlm-plan"
    path, files = _vlm_data(ctx, task_id)
    p = plan(PlanOptions(jsonl=str(path), candidates=(256, 512), token_slots=2048, cp=2, vision="qwen2_vl"))
    vlm = p.lengths.details["vlm"]
    ctx.add(make_task(
        task_id, "contextual",
        "Before choosing a pack length for vlm.jsonl (chat rows with images next to it, Qwen2-VL processor, "
        "context parallel 2, 2048 token slots per step), how many image tokens does the file hold in total, what "
        "share of all tokens is that, and which of 256 or 512 should the pack length be?",
        f"seqpack plan reads the images' sizes and counts {vlm['vision_tokens']} image tokens, "
        f"{vlm['vision_token_share']:.1%} of all tokens. It recommends a pack length of {p.recommended_pack_size}: "
        f"{p.recommendation}",
        [int_field("image_tokens", vlm["vision_tokens"], r"image tokens?", says="image tokens in the file"),
         choice_field("pack_length", str(p.recommended_pack_size),
                      {"256": (r"(?<!\d)256(?!\d)",), "512": (r"(?<!\d)512(?!\d)",)},
                      r"pack[_ ]len(?:gth)?", r"recommend(?:ed|s)?", says="recommended pack length")],
        [claims.claim("truncate_images")] + claims.path_claims(["context_parallel"]),
        script="seqpack plan",
        command=["plan", "--jsonl", "vlm.jsonl", "--candidates", "256,512", "--token-slots", "2048", "--cp", "2",
                 "--vision", "qwen2_vl"],
        files=files, paths=["context_parallel"], topics=["vlm", "planning"],
        truth={"lengths": {k: v for k, v in p.lengths.to_dict().items() if k != "details"}, "vlm": vlm,
               "recommended": p.recommended_pack_size},
    ))


def build(ctx: GenContext) -> None:
    """Add every VLM task."""
    _token_tasks(ctx)
    _mrope_tasks(ctx)
    _packed_task(ctx)
    _rule_tasks(ctx)
    _context_tasks(ctx)

"""``seqpack image-tokens``: how many language-model tokens an image or a video takes under a vision preset."""

from __future__ import annotations

import argparse

from seqpack.core.choices import VISION_PRESETS
from seqpack.faces.cli._output import add_json_flag, print_json

NAME = "image-tokens"
HELP = "patch grid and language-model tokens of an image (or a video of N frames) under a Qwen-VL vision preset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the command's flags."""
    p.add_argument("--height", type=int, required=True, help="image height in pixels")
    p.add_argument("--width", type=int, required=True, help="image width in pixels")
    p.add_argument("--frames", type=int, default=1, help="frames of a video (default 1: an image)")
    p.add_argument("--vision", choices=VISION_PRESETS, default="qwen2_vl",
                   help="vision preset (default qwen2_vl: patch 14, merge 2, temporal patch 2)")
    add_json_flag(p)


def run(args: argparse.Namespace) -> int:
    """Print the grid and the token count."""
    from seqpack.verbs.vision import ImageTokensOptions, image_tokens

    r = image_tokens(ImageTokensOptions(height=args.height, width=args.width, frames=args.frames, vision=args.vision))
    if args.json:
        print_json(r.to_dict())
        return 0
    print(f"{r.vision}: {r.height}x{r.width}" + (f", {r.frames} frames" if r.frames > 1 else "") +
          f" -> grid (t={r.grid_t}, h={r.grid_h}, w={r.grid_w}), {r.patch_rows} patch rows, {r.tokens} tokens "
          f"({r.sequence_tokens} with vision start/end)")
    print(r.explanation)
    return 0

"""Names of the visual keys of a VLM THD micro-batch (no imports: the CLI and the MCP server read
them without loading torch). What each holds: :mod:`seqpack.packing.vlm`."""

from __future__ import annotations

__all__ = ["ROW_VISUAL_KEYS", "TOKEN_VISUAL_KEYS", "VISUAL_KEYS"]

#: Keys that describe the whole row (never split by context parallelism).
ROW_VISUAL_KEYS: tuple[str, ...] = (
    "pixel_values", "image_grid_thw", "pixel_sequence_index",
    "pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "video_sequence_index", "num_patches",
)
#: Per-token visual keys (``[1, T]`` and the axes-first ``[3, 1, T]``).
TOKEN_VISUAL_KEYS: tuple[str, ...] = ("vision_index", "mrope_position_ids")
VISUAL_KEYS: tuple[str, ...] = ROW_VISUAL_KEYS + TOKEN_VISUAL_KEYS

"""Faults in VLM rows: one input check, from image headers, before anything is decoded, in every command.

Classes (issue 26, family 5): a video whose frames would make gigabytes of patches (256 frames of
256x8192), a decompression-bomb PNG header (10G pixels: Pillow refuses it unread) and an image
over the pixel limit, ``fps`` as a string, NaN, a boolean or negative, more frames than the
limit, an empty frame list, more or fewer ``<image>`` markers than images, an extreme aspect
ratio, a malformed inline image: the same one line (file, line, row and the list entry) in
``plan``, ``batches`` and ``energon-prepare`` (which used to accept most of them), and through MCP.
``image-tokens`` applies the same size checks to its arguments. Runs that could exhaust memory
run in a forked child with a memory cap and a deadline.
"""

from __future__ import annotations

import json
import struct
import zlib

import anyio
import pytest
from mcp import Client

from faults_helpers import cli_forked, temporaries

from seqpack.faces.mcp.server import build_server

pytest.importorskip("PIL")


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` pixels (the data would never decode)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b"")


@pytest.fixture
def media(tmp_path):
    from PIL import Image

    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    Image.new("RGB", (32, 32), (200, 10, 10)).save(d / "small.png")
    Image.new("RGB", (256, 8192), (10, 10, 200)).save(d / "tall.png")
    Image.new("RGB", (4000, 10), (1, 2, 3)).save(d / "extreme.png")
    (d / "bomb.png").write_bytes(_png_header(100_000, 100_000))
    (d / "big.png").write_bytes(_png_header(12_000, 12_000))
    return d


def _row(text: str, **visuals):
    return {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "a small answer"}],
            **visuals}


ROWS = {
    # name: (the bad row, the refusal after "<file>:2, row 1, ")
    "video_pixels": (_row("<video> what", videos=[{"frames": ["tall.png"] * 256, "fps": 2}]),
                     "field 'videos': the row's images and frames hold 536,870,912 pixels, over the limit of "
                     "268,435,456. Fix: downscale or drop frames (limits live in reference_impl/seqpack/core/limits.py)"),
    # what the frames make once encoded depends on the vision spec: plan and batches know it, energon-prepare not
    "video_patches": (_row("<video> what", videos=[{"frames": ["tall.png"] * 128, "fps": 2}]),
                      "field 'videos': the row's images and videos make 1,459,519,488 bytes of patches, over the limit "
                      "of 1,073,741,824. Fix: use fewer or smaller images or frames (limits live in "
                      "reference_impl/seqpack/core/limits.py)"),
    "decompression_bomb": (_row("<image> x", images=["bomb.png"]),
                           "field 'images[0]': {dir}/bomb.png is refused unread: Image size (10000000000 pixels) "
                           "exceeds limit of 178956970 pixels, could be decompression bomb DOS attack."),
    "too_many_pixels": (_row("<image> x", images=["big.png"]),
                        "field 'images[0]': {dir}/big.png has 12000x12000 pixels, over the limit of 67108864. "
                        "Fix: downscale the image (limits live in reference_impl/seqpack/core/limits.py)"),
    "fps_string": (_row("<video> x", videos=[{"frames": ["small.png"] * 2, "fps": "fast"}]),
                   "field 'videos[0].fps': fps must be a positive number, got 'fast'"),
    "fps_nan": (_row("<video> x", videos=[{"frames": ["small.png"] * 2, "fps": float("nan")}]),
                "field 'videos[0].fps': fps must be a positive number, got nan"),
    "fps_boolean": (_row("<video> x", videos=[{"frames": ["small.png"] * 2, "fps": True}]),
                    "field 'videos[0].fps': fps must be a positive number, got True"),
    "too_many_frames": (_row("<video> x", videos=[{"frames": ["small.png"] * 300}]),
                        "field 'videos[0].frames': a video of 300 frames is over the limit of 256"),
    "no_frames": (_row("<video> x", videos=[{"frames": []}]),
                  "field 'videos[0].frames': a video needs a non-empty list of frames"),
    "more_markers": (_row("<image> <image> two", images=["small.png"]),
                     "field 'images': the row has 1 image(s) but its text holds 2 <image> marker(s); put exactly one "
                     "marker per item, in order"),
    "fewer_markers": (_row("no marker", images=["small.png", "small.png"]),
                      "field 'images': the row has 2 image(s) but its text holds 0 <image> marker(s); put exactly one "
                      "marker per item, in order"),
    "extreme_aspect": (_row("<image> x", images=["extreme.png"]),
                       "field 'images[0]': aspect ratio 400.0 of a 10x4000 {dir}/extreme.png is over 200"),
    "bad_inline_pixels": (_row("<image> x", images=[{"pixels": [[[300, 2, 3]]]}]),
                          "field 'images[0]': an integer inline image must hold values in [0, 255]"),
}


def _commands(path, out):
    return {
        "plan": ["plan", "--jsonl", path, "--candidates", "4096,8192"],
        "batches": ["batches", path, "--seq-length", 8192, "--schema", "chat"],
        "energon-prepare": ["energon-prepare", path, "--out", out / "ds"],
    }


# energon-prepare has no vision spec, so no patch bound: its encoder refuses such a row when it loads it
CASES = [pytest.param(c, f, marks=() if c == "plan" else pytest.mark.slow)  # batches and energon load torch
         for c in ("plan", "batches", "energon-prepare") for f in sorted(ROWS)
         if not (c == "energon-prepare" and f == "video_patches")]


@pytest.mark.parametrize("command, fault", CASES)
def test_a_bad_visual_row_is_refused_alike_by_every_command(media, tmp_path, command, fault):
    row, refusal = ROWS[fault]
    path = media / "rows.jsonl"
    path.write_text(json.dumps(_row("<image> fine", images=["small.png"])) + "\n" + json.dumps(row) + "\n")
    run = cli_forked(*_commands(path, tmp_path / "out")[command], cwd=media, timeout=120)
    run.refused_with(f"seqpack {command}: error: {path}:2, row 1, " + refusal.format(dir=media.resolve()))
    assert not (tmp_path / "out" / "ds").exists() and not temporaries(tmp_path)


def test_the_visual_check_names_paths_as_the_row_gave_them(media):
    """Negative control of the check: a good VLM row plans, and its image paths stay relative in messages."""
    path = media / "ok.jsonl"
    path.write_text(json.dumps(_row("<image> fine", images=["small.png"])) + "\n")
    run = cli_forked("plan", "--jsonl", path, "--candidates", "4096", "--json", cwd=media)
    assert run.code == 0, run.err
    assert json.loads(run.out)["lengths"]["num_samples"] == 1


@pytest.mark.parametrize(
    "args, line",
    [
        (["--height", 10, "--width", 4000],
         "seqpack image-tokens: error: field 'height': aspect ratio 400.0 of a 10x4000 image is over 200"),
        (["--height", 100000, "--width", 100000],
         "seqpack image-tokens: error: field 'height': image has 100000x100000 pixels, over the limit of 67108864. "
         "Fix: downscale the image (limits live in reference_impl/seqpack/core/limits.py)"),
    ],
)
def test_image_tokens_applies_the_same_size_checks(cli, args, line):
    cli("image-tokens", *args).refused_with(line)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize("fault", ["decompression_bomb", "fps_string", "more_markers"])
async def test_mcp_tools_refuse_the_same_rows(media, fault):
    row, refusal = ROWS[fault]
    path = media / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with anyio.fail_after(60):
        async with Client(build_server([media])) as client:
            plan = await client.call_tool("plan_pack_length", {"jsonl_path": "rows.jsonl", "candidates": [4096]})
            ds = await client.call_tool("prepare_energon_dataset", {"input_path": "rows.jsonl", "output_dir": "ds"})
    want = f"{path.resolve()}:1, row 0, " + refusal.format(dir=media.resolve())
    assert plan.is_error and want in plan.content[0].text, plan.content[0].text
    assert ds.is_error and want in ds.content[0].text, ds.content[0].text
    assert not (media / "ds").exists()

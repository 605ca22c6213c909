"""Faults: MCP roots that must hold for every path the server touches (issue 26, family 7, roots).

Classes: image paths inside a JSONL row (absolute, or ``../``) that point outside the root
(``prepare_energon_dataset`` must not copy them into a dataset, ``inspect_in_batch`` must not read
them); a tokenizer directory inside the root whose ``chat_template.jinja`` is a symlink to a file
outside (``pack_dataset`` must not read it); a ``.seqpack-cache`` symlink in the root pointing
outside, and a user cache directory outside the root (``pack_dataset`` writes neither). Each is a
tool error naming the path and the roots, or a result that wrote nothing outside; the same calls
with the files inside the root work (negative controls).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from faults_helpers import digest, temporaries

from seqpack.faces.mcp.server import build_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def place(tmp_path) -> tuple[Path, Path]:
    """(the allowed root, a directory outside it holding a picture and a template)."""
    from PIL import Image

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    Image.new("RGB", (28, 28), (200, 10, 10)).save(outside / "secret.png")
    Image.new("RGB", (28, 28), (10, 200, 10)).save(root / "mine.png")
    (outside / "template.jinja").write_text("{% for m in messages %}SECRET {{ m['content'] }}\n{% endfor %}")
    return root, outside


def _vlm_rows(image: str) -> str:
    return "".join(json.dumps({"prompt": f"<image> what colour {i}", "completion": "red", "images": [image]}) + "\n"
                   for i in range(4))


async def _call(root: Path, tool: str, args: dict) -> tuple[bool, str]:
    async with Client(build_server([root])) as client:
        result = await client.call_tool(tool, args)
    return result.is_error, result.content[0].text


@pytest.mark.slow
@pytest.mark.parametrize("image", ["absolute", "dotdot"])
async def test_image_paths_inside_rows_stay_inside_the_root(place, image):
    root, outside = place
    ref = str(outside / "secret.png") if image == "absolute" else "../outside/secret.png"
    (root / "vlm.jsonl").write_text(_vlm_rows(ref))
    before = digest([outside])
    error, text = await _call(root, "prepare_energon_dataset", {"input_path": "vlm.jsonl", "output_dir": "ds"})
    assert error and "outside the allowed roots" in text and "secret.png" in text and "vlm.jsonl:1" in text, text
    assert not (root / "ds").exists() and not temporaries(root)
    error, text = await _call(root, "inspect_in_batch", {"input_path": "vlm.jsonl", "mbs": 2, "seq_length": 4096})
    assert error and "outside the allowed roots" in text, text
    assert digest([outside]) == before
    (root / "vlm.jsonl").write_text(_vlm_rows("mine.png"))  # negative control: a picture inside the root
    error, text = await _call(root, "prepare_energon_dataset", {"input_path": "vlm.jsonl", "output_dir": "ds"})
    assert not error, text


def _tokenizer(directory: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    words = "hi yo SECRET user assistant 0 1 2 3 4 5 6 7"
    tok.train_from_iterator([words], tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>"]))
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return directory / "tokenizer.json"


async def test_a_symlinked_chat_template_outside_the_root_is_not_read(place):
    pytest.importorskip("jinja2")
    root, outside = place
    tokenizer = _tokenizer(root / "tok")
    (root / "tok" / "chat_template.jinja").symlink_to(outside / "template.jinja")
    chat = [{"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"yo {i}"}]}
            for i in range(8)]
    (root / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat))
    args = {"input_path": "chat.jsonl", "output_dir": "packs", "pack_size": 64,
            "tokenizer_path": str(tokenizer.relative_to(root))}
    error, text = await _call(root, "pack_dataset", args)
    assert error and "chat_template.jinja" in text and "outside the allowed roots" in text, text
    assert not (root / "packs").exists() or not any((root / "packs").iterdir())
    (root / "tok" / "chat_template.jinja").unlink()  # negative control: the same template, inside the root
    (root / "tok" / "chat_template.jinja").write_text((outside / "template.jinja").read_text())
    error, text = await _call(root, "pack_dataset", args)
    assert not error, text


async def test_caches_outside_the_root_are_neither_read_nor_written(place, monkeypatch, tmp_path):
    root, outside = place
    user_cache = tmp_path / "user-cache"
    monkeypatch.setenv("SEQPACK_CACHE_DIR", str(user_cache))  # outside the root as well
    (outside / "cache").mkdir()
    data = root / "sub" / "d.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(20)))
    (data.parent / ".seqpack-cache").symlink_to(outside / "cache")
    error, text = await _call(root, "pack_dataset", {"input_path": "sub/d.jsonl", "output_dir": "packs",
                                                     "pack_size": 256})
    assert not error, text
    assert list((outside / "cache").iterdir()) == [] and not user_cache.exists()
    result = json.loads(text)
    assert result["splits"]["training"]["accounting"]["packed"] == 20
    (data.parent / ".seqpack-cache").unlink()  # negative control: a cache folder inside the root is used
    error, text = await _call(root, "pack_dataset", {"input_path": "sub/d.jsonl", "output_dir": "packs2",
                                                     "pack_size": 256})
    assert not error and (data.parent / ".seqpack-cache" / "d.jsonl.idx.npz").is_file()


async def test_a_symlink_loop_is_a_tool_error(place):
    root, _ = place
    (root / "loop.jsonl").symlink_to(root / "loop.jsonl")
    (root / "good.jsonl").write_text(json.dumps({"prompt": "q", "completion": "a"}) + "\n")
    for tool, args in (("pack_dataset", {"input_path": "loop.jsonl", "output_dir": "o", "pack_size": 64}),
                       ("validate_config", {"path": "loop.jsonl"}), ("inspect_packed_dataset", {"path": "loop.jsonl"}),
                       ("prepare_energon_dataset", {"input_path": "good.jsonl", "output_dir": "loop.jsonl"})):
        error, text = await _call(root, tool, args)
        assert error and "internal error" not in text and "loop.jsonl" in text, text


def test_the_policy_confines_every_layer_call(tmp_path):
    """The library face: inside ``confined_to`` the layer refuses reads and writes that resolve outside."""
    from seqpack.io import atomic, confine, reading
    from seqpack.core.errors import SeqpackError

    root, outside = tmp_path / "r", tmp_path / "o"
    root.mkdir()
    outside.mkdir()
    (outside / "f.txt").write_text("x")
    (root / "link.txt").symlink_to(outside / "f.txt")
    (root / "ok.txt").write_text("y")
    with confine.confined_to([root]):
        for call in (lambda: reading.read_text(root / "link.txt"), lambda: reading.read_text(root / ".." / "o" / "f.txt"),
                     lambda: atomic.write_text(outside / "new.txt", "z"), lambda: atomic.atomic_directory(outside / "d").__enter__()):
            with pytest.raises(SeqpackError, match="outside the allowed roots"):
                call()
        assert reading.read_text(root / "ok.txt") == "y"
        with confine.scratch_directory() as scratch:  # a private temporary directory counts as a root
            atomic.write_text(scratch / "w.txt", "w")
    assert reading.read_text(root / "link.txt") == "x"  # no policy: nothing confined
    assert not (outside / "new.txt").exists() and not (outside / "d").exists()

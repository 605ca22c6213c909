"""Bytes meant for the terminal (issue 34, family 4).

Classes: an escape sequence, a carriage return, a bell or a bidirectional override inside an image path
in a row, a blend manifest's source name, a column name or a file name typed by the user, an output
directory, or an argument argparse refuses; before, each reached the terminal raw in the one-line error
(or in what a command prints), so a dataset could clear the screen or hide text. Now every one is
written as a backslash escape by the one helper (:func:`seqpack.core.textfmt.printable`) that error
lines, the CLI's streams and the MCP server's log share. Negative controls: letters of any script pass
unchanged, and ``--json`` keeps the exact value (JSON escapes it its own way).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from seqpack.core.textfmt import printable

#: What a hostile string may carry: clear the screen, return to the line start, ring, reverse the text.
HOSTILE = {"csi": "\x1b[2J\x1b[H", "cr": "ok\rFINE", "bell": "\x07", "bidi": "\u202egnp.exe", "c1": "\x9b31m",
           "del": "\x7f", "ls": "\u2028"}


def assert_escaped(text: str, hostile: str) -> None:
    """No character of ``hostile`` that is not printable reaches ``text``; its escaped form does."""
    for ch in hostile:
        if not ch.isprintable():
            assert ch not in text, (repr(ch), text)
    assert printable(hostile) in text, (printable(hostile), text)


def test_printable_escapes_what_drives_a_terminal_and_keeps_letters():
    assert printable("a\x1b[2Jb\r\x07\u202e\x7f\x9b") == "a\\x1b[2Jb\\r\\x07\\u202e\\x7f\\x9b"
    assert printable("\udcff") == "\\xff"  # an undecodable byte of a file name, as the byte
    assert printable("one\ntwo\tthree", keep_lines=True) == "one\ntwo\tthree"
    assert printable("one\ntwo") == "one\\ntwo"
    letters = "données-été 中文 ÄÖÜ ñ.jsonl"  # negative control: printable text of any script is unchanged
    assert printable(letters) == letters and printable(letters, keep_lines=True) == letters


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_an_image_path_inside_a_row_is_escaped(cli, write, kind):
    name = f"x{HOSTILE[kind]}.png"
    data = write("vlm.jsonl", json.dumps({"prompt": "<image> q", "completion": "a", "images": [name]}) + "\n")
    for command in (["plan", "--jsonl", data, "--vision", "qwen2_vl"], ["batches", data, "--vision", "qwen2_vl"],
                    ["energon-prepare", data, "--out", data.parent / "ds"]):
        run = cli(*command)
        run.refused("not found", "images[0]")
        assert_escaped(run.err, name)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_blend_source_name_is_escaped(cli, write, tmp_path, kind):
    source = f"s{HOSTILE[kind]}.jsonl"
    blend = write("blend.json", json.dumps([1.0, source]))
    run = cli("pack", blend, "--out", tmp_path / "out", "--pack-size", 256)
    run.refused("not found")
    assert_escaped(run.err, source)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_names_typed_by_the_user_are_escaped(cli, data, tmp_path, kind):
    hostile = HOSTILE[kind]
    run = cli("pack", data, "--prompt-column", f"q{hostile}", "--out", tmp_path / "o", "--pack-size", 256)
    run.refused("is not in the first row")
    assert_escaped(run.err, f"q{hostile}")
    missing = tmp_path / f"in{hostile}.jsonl"
    run = cli("pack", missing, "--out", tmp_path / "o", "--pack-size", 256)
    run.refused("not found")
    assert_escaped(run.err, str(missing))
    run = cli("inspect", tmp_path / f"packs{hostile}")
    assert run.code == 2 and str(tmp_path) in run.err
    assert_escaped(run.err, f"packs{hostile}")



@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_an_argument_argparse_refuses_is_escaped(data, tmp_path, kind, capsys):
    from seqpack.faces.cli import main

    with pytest.raises(SystemExit) as info:
        main(["pack", str(data), "--out", str(tmp_path / "o"), "--pack-size", "256", f"--x{HOSTILE[kind]}"])
    assert info.value.code == 2
    assert_escaped(capsys.readouterr().err, f"--x{HOSTILE[kind]}")


def test_what_a_command_prints_is_escaped_and_json_keeps_the_value(cli, data, tmp_path):
    out = tmp_path / f"packs{HOSTILE['csi']}"
    run = cli("pack", data, "--out", out, "--pack-size", 256, "--no-progress")
    assert run.code == 0, run.err
    assert_escaped(run.out, str(out))
    as_json = cli("pack", data, "--out", out, "--pack-size", 256, "--json")
    assert as_json.code == 0 and "\x1b" not in as_json.out
    assert json.loads(as_json.out)["root"].startswith(str(out))  # negative control: the value itself is exact


def test_letters_of_any_script_reach_the_terminal_unchanged(cli, write, tmp_path):
    """Negative control: escaping leaves readable names alone."""
    name = "données-été-中文.jsonl"
    run = cli("pack", tmp_path / "in" / name, "--out", tmp_path / "o", "--pack-size", 256)
    run.refused("not found", name)


def test_the_mcp_server_log_is_escaped():
    from seqpack.faces.mcp.server import TerminalSafeFormatter

    record = logging.LogRecord("seqpack.mcp", logging.INFO, __file__, 1, "refused %s", (f"/mcp{HOSTILE['csi']}",),
                               None)
    line = TerminalSafeFormatter("%(message)s").format(record)
    assert line == "refused /mcp\\x1b[2J\\x1b[H"


@pytest.mark.anyio
async def test_an_mcp_tool_error_is_escaped(tmp_path):
    from mcp import Client

    from seqpack.faces.mcp.server import build_server

    name = f"x{HOSTILE['csi']}.png"
    (tmp_path / "vlm.jsonl").write_text(json.dumps({"prompt": "<image> q", "completion": "a",
                                                    "images": [name]}) + "\n")
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool("prepare_energon_dataset", {"input_path": "vlm.jsonl", "output_dir": "ds"})
    assert result.is_error
    assert_escaped(result.content[0].text, name)


@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_a_hostile_name_in_a_library_error_is_escaped_too(tmp_path: Path):
    """The library raises the same escaped line a face prints (one helper, in SeqpackError)."""
    from seqpack.core.errors import InputError
    from seqpack.data.jsonl import JsonlFile

    with pytest.raises(InputError) as info:
        JsonlFile(tmp_path / f"a{HOSTILE['cr']}.jsonl")
    assert "\r" not in str(info.value) and "a" + "ok\\rFINE.jsonl" in str(info.value)
    assert info.value.file == str(tmp_path / f"a{HOSTILE['cr']}.jsonl")  # the data keeps the real name

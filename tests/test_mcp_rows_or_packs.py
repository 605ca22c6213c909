"""The MCP path kind of batches' INPUT: rows (a JSONL file) or a folder of offline packs, each confined."""

from __future__ import annotations

import json

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from seqpack.faces.mcp.roots import AllowedRoots
from seqpack.packing.offline.prepare import prepare_packed_dataset


def test_rows_or_packs_takes_a_jsonl_or_a_pack_folder_inside_a_root_and_nothing_outside(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir(), outside.mkdir()
    rows = "".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(4))
    (inside / "data.jsonl").write_text(rows)
    packs = prepare_packed_dataset(inside / "data.jsonl", inside / "packs", pack_size=64).pack_dir
    roots = AllowedRoots([inside])
    assert roots.confine("rows_or_packs", str(inside / "data.jsonl"), field="input_path") == inside / "data.jsonl"
    assert roots.confine("rows_or_packs", str(packs), field="input_path") == packs
    # negative control: the same kinds of input outside every root are refused
    (outside / "data.jsonl").write_text(rows)
    elsewhere = prepare_packed_dataset(outside / "data.jsonl", outside / "packs", pack_size=64).pack_dir
    for path in (outside / "data.jsonl", elsewhere):
        with pytest.raises(ToolError):
            roots.confine("rows_or_packs", str(path), field="input_path")

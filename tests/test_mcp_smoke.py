"""run_packing_smoke_test over MCP: structured report, progress, time limit, cancellation, roots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client, MCPError
from mcp.types import REQUEST_TIMEOUT

from seqpack.faces.mcp.server import build_server


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    rows = [{"prompt": f"question {i}", "completion": "answer " * (1 + i % 6)} for i in range(16)]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "outside.jsonl").write_text(json.dumps(rows[0]) + "\n")
    return root


@pytest.mark.anyio
async def test_smoke_tool_reports_checks_and_progress(root: Path):
    seen: list[tuple] = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async with Client(build_server([root], skill_dir=None)) as c:
        result = await c.call_tool(
            "run_packing_smoke_test",
            {"path": "in_batch", "size": "tiny", "cp_check": False},
            progress_callback=on_progress,
        )
        assert result.is_error is False, result.content[0].text
        report = result.structured_content
        # the CP check was turned off: every other check passed, so the run is incomplete, not a pass
        assert report["result"] == "incomplete" and report["ok"] is False and report["path"] == "in_batch"
        assert report["skipped"] == ["cp_matches_cp1"]
        assert [c["name"] for c in report["checks"]][0] == "config_valid"
        cp = next(c for c in report["checks"] if c["name"] == "cp_matches_cp1")
        assert cp["status"] == "skipped" and cp["passed"] is None and "cp_check=False" in cp["reason"]
        assert all(c["status"] == "passed" for c in report["checks"] if c["name"] != "cp_matches_cp1")
        assert seen and seen[-1][0] == 1.0 and any("forward/backward" in (m or "") for _, _, m in seen)


@pytest.mark.anyio
async def test_smoke_tool_with_user_data_and_config_text(root: Path):
    config = ("model: {seq_length: 128}\n"
              "dataset: {seq_length: 128, enable_offline_packing: true,\n"
              "          offline_packing_specs: {packed_sequence_size: 128, pad_seq_to_mult: 1}}\n")
    async with Client(build_server([root], skill_dir=None)) as c:
        result = await c.call_tool("run_packing_smoke_test", {
            "path": "offline", "config_text": config, "data_path": "rows.jsonl", "size": "medium"})
        assert result.is_error is False, result.content[0].text
        assert result.structured_content["data"]["samples"] == 16


@pytest.mark.slow
@pytest.mark.anyio
async def test_smoke_tool_time_limit_cancellation_and_roots(root: Path, tmp_path: Path):
    async with Client(build_server([root], skill_dir=None)) as c:
        result = await c.call_tool("run_packing_smoke_test", {"path": "offline", "size": "medium",
                                                              "cp_check": False, "time_limit_s": 0.3})
        assert result.is_error is True and "time limit of 0.3 s" in result.content[0].text
        with pytest.raises(MCPError) as exc:
            await c.call_tool("run_packing_smoke_test", {"path": "offline", "size": "medium", "cp_check": False},
                              read_timeout_seconds=0.5)
        assert exc.value.code == REQUEST_TIMEOUT
        result = await c.call_tool("run_packing_smoke_test", {"data_path": str(tmp_path / "outside.jsonl")})
        assert result.is_error is True and "outside the allowed roots" in result.content[0].text
        result = await c.call_tool("derive_alignment", {"cp": 2})
        assert result.structured_content["pad_seq_to_mult"] == 4


@pytest.mark.anyio
async def test_inspect_refuses_a_manifest_that_links_outside_the_roots(root: Path, tmp_path: Path):
    from seqpack.packing.parquet import write_packed_parquet

    packs = root / "packs"
    write_packed_parquet([{"input_ids": [1, 2, 3], "loss_mask": [1, 1, 0], "seq_start_id": [0]}],
                         packs / "training_8.idx.parquet")
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    (packs / "seqpack_manifest.json").symlink_to(secret)
    async with Client(build_server([root], skill_dir=None)) as c:
        result = await c.call_tool("inspect_packed_dataset", {"path": "packs/training_8.idx.parquet", "pack_size": 8})
        assert result.is_error is True and "outside the allowed roots" in result.content[0].text

"""The MCP server at three levels: in-memory client, stdio subprocess, streamable-HTTP subprocess.

Async tests run on the anyio pytest plugin (shipped with anyio), no pytest-asyncio needed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import REQUEST_TIMEOUT

from seqpack.faces.cli import main
from seqpack.config.rules import FAMILIES, RULES, RULES_BY_ID, rules_table, search_rules
from seqpack.config.rules_doc import rules_document
from seqpack.core.errors import UsageError
from seqpack.verbs.inspection import Topology, inspect_packed_dataset
from seqpack.faces.mcp.server import build_server
from seqpack.faces.mcp.content import SKILL_NAME, find_skill_dir
from seqpack.training.ranks import reserved_port
from seqpack.faces.mcp.jobs import JobControl, run_job
from seqpack.verbs.planning import plan_pack_length

REPO = Path(__file__).resolve().parents[1]
TOOLS = {
    "derive_alignment", "validate_config", "explain_rule", "list_rules", "check_model_support",
    "plan_pack_length", "simulate_packing", "pack_dataset", "inspect_packed_dataset", "server_info",
    "run_packing_smoke_test", "inspect_in_batch", "inspect_global_batch", "inspect_offline_batches",
    "prepare_energon_dataset", "count_image_tokens", "mrope_position_ids",
}
WRITERS = {"pack_dataset", "prepare_energon_dataset"}
OUTSIDE_TEXT = "outside the allowed roots"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _rows(n: int = 40) -> list[dict[str, str]]:
    return [{"prompt": "q" * (3 + (7 * i) % 50), "completion": "a" * (2 + (11 * i) % 90)} for i in range(n)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An allowed root with data and a config, plus an outside directory reachable only by escapes."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    (root / "job.yaml").write_text("train:\n  micro_batch_size: 1\ndataset:\n  enable_in_batch_packing: true\n")
    (outside / "secret.jsonl").write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n")
    (outside / "job.yaml").write_text("train:\n  micro_batch_size: 2\n")
    (root / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "blend.json").write_text(json.dumps([1.0, "data.jsonl", 1.0, str(outside / "secret.jsonl")]))
    return root


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    skill = tmp_path / SKILL_NAME
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: megatron-sequence-packing\n---\n# Packing\n")
    (skill / "references" / "offline.md").write_text("# Offline packing\n")
    (skill / "references" / "notes.txt").write_text("not served\n")
    return skill


@pytest.fixture
async def client(root: Path, skill: Path):
    async with Client(build_server([root], skill_dir=skill), raise_exceptions=True) as c:
        yield c


async def call(client: Client, name: str, args: dict) -> dict:
    result = await client.call_tool(name, args)
    assert result.is_error is False, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content  # the model reads the same data
    return result.structured_content


async def call_error(client: Client, name: str, args: dict) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error is True and result.structured_content is None
    text = result.content[0].text
    assert "Traceback" not in text
    return text


# --------------------------------------------------------------------------------------------
# In-memory
# --------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_tools_are_listed_with_schemas_and_annotations(client: Client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.description and "ctx" not in tool.input_schema.get("properties", {})
        assert tool.annotations.open_world_hint is False
        assert tool.annotations.read_only_hint is (name not in WRITERS), name
    assert all(tools[name].annotations.destructive_hint is True for name in WRITERS)
    assert tools["derive_alignment"].input_schema["properties"]["tp"]["minimum"] == 1
    family = tools["list_rules"].input_schema["properties"]["family"]
    assert set(family["anyOf"][0]["enum"]) == set(FAMILIES)
    assert tools["simulate_packing"].input_schema["required"] == ["lengths", "pack_size"]
    assert set(tools["pack_dataset"].input_schema["required"]) == {"input_path", "output_dir", "pack_size"}
    assert "pad_seq_to_mult" in tools["plan_pack_length"].output_schema["properties"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "name, args",
    [
        ("derive_alignment", {"tp": 0}),
        ("derive_alignment", {"tp": "four"}),
        ("simulate_packing", {"lengths": [1, 2]}),
        ("simulate_packing", {"lengths": [1, -2], "pack_size": 8}),
        ("list_rules", {"family": "nope"}),
        ("plan_pack_length", {"lengths": [5], "candidates": []}),
        ("validate_config", {"overrides": ["no equals sign"]}),
        ("check_model_support", {"family": "llama3", "path": "teleport"}),
        ("explain_rule", {"query": ""}),
    ],
)
async def test_schema_rejects_bad_arguments(client: Client, name: str, args: dict):
    text = await call_error(client, name, args)
    assert "validation error" in text.lower()


@pytest.mark.anyio
async def test_derive_alignment(client: Client):
    out = await call(client, "derive_alignment", {"tp": 4, "cp": 2, "sp": True})
    assert out["pad_seq_to_mult"] == 8 and out["cp_multiple"] == 4 and out["sp_multiple"] == 8
    assert out["explanation"] == "pad_seq_to_mult = lcm(4, 8) = 8 [2*CP=4; SP with TP=4: CP*TP=8]"
    out = await call(client, "derive_alignment", {"tp": 2, "cp": 2, "sp": True, "eval_cp": 4})
    assert out["pad_seq_to_mult"] == 8 and out["eval_cp"] == 4


@pytest.mark.anyio
async def test_validate_config(client: Client, root: Path):
    out = await call(client, "validate_config", {"config_text": "train: {micro_batch_size: 1}",
                                                 "overrides": ["dataset.enable_in_batch_packing=true"],
                                                 "bridge_version": "main"})
    assert out["ok"] is False and out["bridge_version"] == "main"
    assert [v["rule_id"] for v in out["violations"]] == ["PACK-IN-BATCH-MBS", "PACK-IN-BATCH-DATALOADER"]
    v = out["violations"][0]
    assert v["fields"]["train.micro_batch_size"] == 1 and v["fix"] == RULES_BY_ID["PACK-IN-BATCH-MBS"].fix
    by_path = await call(client, "validate_config", {"path": "job.yaml", "bridge_version": "main"})
    assert [v["rule_id"] for v in by_path["violations"]] == ["PACK-IN-BATCH-MBS", "PACK-IN-BATCH-DATALOADER"]
    fixed_args = {"path": str(root / "job.yaml"), "overrides": ["train.micro_batch_size=4", "dataset.dataloader_type=single"]}
    fixed = await call(client, "validate_config", {**fixed_args, "bridge_version": "main"})
    assert fixed["ok"] is True and fixed["resolved"]["packing_path"] == "in_batch"
    release = await call(client, "validate_config", fixed_args)  # default: megatron-bridge 0.6.2
    assert release["bridge_version"] == "0.6.2"
    assert [v["rule_id"] for v in release["violations"]] == ["PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION"]
    assert "0.5" in await call_error(client, "validate_config", {"bridge_version": "0.5"})
    example = await call(client, "validate_config", {"example": "offline_8k_tp4_cp2_sp"})
    assert example["ok"] is True and example["resolved"]["pad_seq_to_mult"] == 8
    defaults = await call(client, "validate_config", {})
    assert defaults["ok"] is True and defaults["resolved"]["packing_path"] == "none"

    text = await call_error(client, "validate_config", {"config_text": "train:\n  micro_batch_sise: 1\n"})
    assert "micro_batch_sise" in text and "<text>:2" in text
    text = await call_error(client, "validate_config", {"config_text": "job.yaml"})
    assert "must be a YAML or JSON mapping" in text and "pass it as path" in text
    text = await call_error(client, "validate_config", {"config_text": "a: 1", "path": "job.yaml"})
    assert "not config_text and path" in text


@pytest.mark.anyio
async def test_explain_and_list_rules(client: Client):
    out = await call(client, "explain_rule", {"query": "pack-offline-mbs1"})
    assert out["matched_by"] == "id" and out["total_matches"] == 1
    assert out["rules"][0] == json.loads(json.dumps(RULES_BY_ID["PACK-OFFLINE-MBS1"].describe()))
    out = await call(client, "explain_rule", {"query": "cuda graph", "limit": 2})
    assert out["matched_by"] == "keyword" and out["total_matches"] == len(search_rules("cuda graph")) > 2
    assert [r["id"] for r in out["rules"]] == [r.id for r in search_rules("cuda graph")[:2]]

    text = await call_error(client, "explain_rule", {"query": "PACK-OFFLINE-MBS2"})
    assert "No rule id or keyword match for 'PACK-OFFLINE-MBS2'" in text
    assert "Did you mean PACK-OFFLINE-MBS1" in text and "list_rules" in text

    everything = await call(client, "list_rules", {})
    assert everything["count"] == len(RULES) and [r["id"] for r in everything["rules"]] == [r.id for r in RULES]
    offline = await call(client, "list_rules", {"family": "offline", "severity": "warning"})
    assert [r["id"] for r in offline["rules"]] == [
        r.id for r in RULES if r.family == "offline" and r.severity == "warning"]
    assert offline["count"] >= 1 and offline["families"] == FAMILIES


@pytest.mark.anyio
async def test_plan_pack_length(client: Client, root: Path):
    out = await call(client, "plan_pack_length", {"lengths": [5, 3, 3, 2, 7], "candidates": [8, 16], "token_slots": 32})
    assert out == json.loads(json.dumps(
        plan_pack_length([5, 3, 3, 2, 7], candidates=(8, 16), token_slots=32).to_dict()))
    assert out["recommended_pack_size"] == 8
    hist = await call(client, "plan_pack_length", {"histogram": {"2": 1, "3": 2, "5": 1, "7": 1},
                                                   "candidates": [8, 16], "token_slots": 32, "tp": 4, "cp": 2,
                                                   "sp": True})
    assert hist["pad_seq_to_mult"] == 8 and [r["packs"] for r in hist["rows"]] == [5, 3]
    from_file = await call(client, "plan_pack_length", {"jsonl_path": "data.jsonl", "candidates": [128, 256],
                                                        "token_slots": 1024})
    assert from_file["lengths"]["source"] == "jsonl" and from_file["lengths"]["num_samples"] == 40
    assert from_file["lengths"]["details"]["path"] == str(root / "data.jsonl")

    text = await call_error(client, "plan_pack_length", {"lengths": [5], "histogram": {"5": 1}})
    assert "give exactly one of lengths, histogram, jsonl or mix" in text
    text = await call_error(client, "plan_pack_length", {"lengths": [5], "pad_seq_to_mult": 6, "tp": 4, "cp": 2,
                                                         "sp": True})
    assert "[PACK-OFFLINE-PAD-MULT-TOPOLOGY]" in text and "Fix: use pad_seq_to_mult=8" in text


@pytest.mark.anyio
async def test_simulate_packing_pages_bins(client: Client):
    # best fit decreasing: 7 (item 4) | 5 + 3 (items 0, 1) | 3 + 2 (items 2, 3)
    out = await call(client, "simulate_packing", {"lengths": [5, 3, 3, 2, 7], "pack_size": 8, "max_bins": 2})
    assert out["stats"]["num_bins"] == 3 and out["stats"]["efficiency"] == pytest.approx(20 / 24)
    assert out["bins"] == [
        {"bin": 0, "tokens": 7, "items": [4], "lengths": [7]},
        {"bin": 1, "tokens": 8, "items": [0, 1], "lengths": [5, 3]},
    ]
    assert out["has_more"] is True and out["bins_returned"] == 2
    rest = await call(client, "simulate_packing", {"lengths": [5, 3, 3, 2, 7], "pack_size": 8, "bin_offset": 2})
    assert rest["bins"] == [{"bin": 2, "tokens": 5, "items": [2, 3], "lengths": [3, 2]}] and rest["has_more"] is False
    reported = await call(client, "simulate_packing", {"lengths": [9, 3], "pack_size": 8, "oversize": "report"})
    assert reported["oversize"] == [0] and reported["stats"]["num_packed"] == 1
    text = await call_error(client, "simulate_packing", {"lengths": [9, 3], "pack_size": 8})
    assert "longer than the pack capacity 8" in text and "Fix: raise the capacity" in text


@pytest.mark.anyio
async def test_check_model_support(client: Client):
    out = await call(client, "check_model_support", {"family": "Qwen3-Next", "path": "offline"})
    (res,) = out["results"]
    assert out["known_family"] is True and res["status"] == "opt_out"
    assert res["evidence"] == "megatron-bridge 0.6.2 recipes/qwen/h100/qwen3_next.py"
    unknown = await call(client, "check_model_support", {"family": "my-own-model"})
    assert unknown["known_family"] is False
    assert [r["status"] for r in unknown["results"]] == ["unknown"] * 4


@pytest.mark.anyio
async def test_path_escapes_are_refused(client: Client, root: Path, tmp_path: Path):
    secret = tmp_path / "outside" / "secret.jsonl"
    escapes = ["../outside/secret.jsonl", str(secret), "link.jsonl", "linkdir/secret.jsonl",
               str(root / ".." / "outside" / "secret.jsonl")]
    for bad in escapes:
        text = await call_error(client, "plan_pack_length", {"jsonl_path": bad})
        assert text.startswith("Error executing tool plan_pack_length: jsonl_path ")
        assert OUTSIDE_TEXT in text and str(root) in text, bad
    for name, args in [
        ("validate_config", {"path": "linkdir/job.yaml"}),
        ("pack_dataset", {"input_path": "data.jsonl", "output_dir": "../outside/packs", "pack_size": 64}),
        ("pack_dataset", {"input_path": "link.jsonl", "output_dir": "packs", "pack_size": 64}),
        ("inspect_packed_dataset", {"path": "linkdir"}),
        ("inspect_packed_dataset", {"path": "/etc"}),
    ]:
        assert OUTSIDE_TEXT in await call_error(client, name, args), (name, args)
    assert not (tmp_path / "outside" / "packs").exists() and not (root / "packs").exists()
    # a blend manifest inside the root may not name a file outside it
    text = await call_error(client, "plan_pack_length", {"jsonl_path": "blend.json"})
    assert "blend split 'training'" in text and OUTSIDE_TEXT in text
    text = await call_error(client, "plan_pack_length", {"jsonl_path": "missing.jsonl"})
    assert "does not exist" in text


@pytest.mark.anyio
async def test_pack_then_inspect(client: Client, root: Path):
    args = {"input_path": "data.jsonl", "output_dir": "packs", "pack_size": 256, "cp": 2, "seed": 7}
    out = await call(client, "pack_dataset", args)
    assert out["reused"] is False and Path(out["root"]).parent == root / "packs"
    acc = out["splits"]["training"]["accounting"]
    assert (acc["rows_in"], acc["packed"], acc["skipped_total"]) == (40, 40, 0)
    assert "_pad_seq_to_mult4_" in Path(out["root"]).name  # CP2 -> 2*CP = 4
    again = await call(client, "pack_dataset", args)
    assert again["reused"] is True and again["fingerprint"] == out["fingerprint"]

    report = await call(client, "inspect_packed_dataset", {"path": out["root"], "cp": 2})
    expected = inspect_packed_dataset(out["root"], Topology(cp=2)).to_dict()
    assert report == json.loads(json.dumps(expected))
    assert report["ok"] is True and report["topology"]["usable"] is True
    assert report["stats"]["segments"] == 40 and report["settings"]["pad_seq_to_mult"] == 4
    plain = await call(client, "inspect_packed_dataset", {"path": out["files"]["training"]})
    assert plain["topology"] is None and plain["stats"]["rows"] == report["stats"]["rows"]


@pytest.mark.anyio
async def test_resources(client: Client, skill: Path):
    uris = sorted(str(r.uri) for r in (await client.list_resources()).resources)
    assert uris == ["seqpack://rules.json", "seqpack://rules.md", "seqpack://skill/SKILL.md",
                    "seqpack://skill/references/offline.md", "skill://megatron-sequence-packing/SKILL.md",
                    "skill://megatron-sequence-packing/references/notes.txt",
                    "skill://megatron-sequence-packing/references/offline.md"]  # skill://: every file
    md = await client.read_resource("seqpack://rules.md")
    assert md.contents[0].text == rules_document()
    js = await client.read_resource("seqpack://rules.json")
    assert json.loads(js.contents[0].text) == json.loads(json.dumps(rules_table()))
    skill_md = await client.read_resource("seqpack://skill/SKILL.md")
    assert skill_md.contents[0].text == (skill / "SKILL.md").read_text()
    (skill / "references" / "offline.md").write_text("# Offline packing, edited\n")
    page = await client.read_resource("seqpack://skill/references/offline.md")
    assert page.contents[0].text == "# Offline packing, edited\n"  # read at request time


@pytest.mark.anyio
async def test_without_a_skill_only_the_rules_are_served(root: Path):
    async with Client(build_server([root], skill_dir=None)) as c:
        uris = sorted(str(r.uri) for r in (await c.list_resources()).resources)
        assert uris == ["seqpack://rules.json", "seqpack://rules.md"]
        info = await call(c, "server_info", {})
        assert info["skill_dir"] is None and info["roots"] == [str(root)]


def test_skill_dir_is_found_next_to_the_package():
    repo_skill = REPO / "skills" / SKILL_NAME
    packaged = REPO / "reference_impl" / "seqpack" / "skill_assets" / SKILL_NAME
    expected = next((d for d in (repo_skill, packaged) if (d / "SKILL.md").is_file()), None)
    assert find_skill_dir() == expected


@pytest.mark.anyio
async def test_prompts(client: Client):
    names = {p.name for p in (await client.list_prompts()).prompts}
    assert names == {"configure_packing", "diagnose_packing_error"}
    got = await client.get_prompt("configure_packing", {"job": "Llama3 8B, TP4 CP2 SP, GBS 8 x 8K",
                                                        "config_text": "model:\n  seq_length: 8192\n"})
    text = got.messages[0].content.text
    for tool in ("check_model_support", "derive_alignment", "plan_pack_length", "validate_config", "pack_dataset"):
        assert tool in text
    assert "<job>\nLlama3 8B, TP4 CP2 SP, GBS 8 x 8K\n</job>" in text and "seq_length: 8192" in text
    log = ("step 3\nConfigViolationError: [PACK-OFFLINE-MBS1] micro_batch_size=2 ...\n"
           "see CP-SEQ-DIVISIBLE; X-PACK-OFFLINE-MBS10")  # the last one is no rule id
    got = await client.get_prompt("diagnose_packing_error", {"error_log": log})
    text = got.messages[0].content.text
    assert f"- PACK-OFFLINE-MBS1: {RULES_BY_ID['PACK-OFFLINE-MBS1'].title}." in text
    assert f"- CP-SEQ-DIVISIBLE: {RULES_BY_ID['CP-SEQ-DIVISIBLE'].title}." in text
    assert text.count("\n- ") == 2 and log in text


# --------------------------------------------------------------------------------------------
# The long-running tool hook (a test-only tool; the real one arrives with the smoke test)
# --------------------------------------------------------------------------------------------


class _Counted:
    """What the counting tool's work did, in files: the work runs in the job's own process."""

    def __init__(self, root: Path) -> None:
        self.dir = root / ".count-state"
        self.dir.mkdir(exist_ok=True)
        self.clear()

    def clear(self) -> None:
        for f in self.dir.iterdir():
            f.unlink()

    @property
    def last(self) -> int:
        f = self.dir / "last"
        return int(f.read_text() or 0) if f.exists() else 0

    def stopped(self, timeout: float = 0.0) -> bool:
        deadline = time.monotonic() + timeout
        while not (self.dir / "stopped").exists():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


def _server_with_counting_tool(root: Path, state: dict):
    server = build_server([root], skill_dir=None)
    counted = state["counted"] = _Counted(root)

    @server.tool()
    async def count(
        n: int, step_s: float, ctx: Context, time_limit_s: float = 30.0, fail: bool = False
    ) -> dict[str, int]:
        """Count to n, one progress note per step."""

        def work(job: JobControl) -> dict[str, int]:
            try:
                if fail:
                    raise UsageError("cannot count", fix="count less")
                for i in range(1, n + 1):
                    time.sleep(step_s)
                    job.progress(i, n, f"step {i}")
                    (counted.dir / "last").write_text(str(i))
                return {"done": n}
            finally:
                (counted.dir / "stopped").touch()

        return await run_job(ctx, work, time_limit_s=time_limit_s)

    return server


@pytest.mark.anyio
async def test_long_running_hook_progress_limit_and_errors(root: Path):
    state: dict = {}
    async with Client(_server_with_counting_tool(root, state)) as c:
        seen = []

        async def on_progress(progress, total, message):
            seen.append((progress, total, message))

        result = await c.call_tool("count", {"n": 4, "step_s": 0}, progress_callback=on_progress)
        assert result.is_error is False and result.structured_content == {"done": 4}
        assert seen == [(i, 4, f"step {i}") for i in range(1, 5)]

        state["counted"].clear()
        text = await call_error(c, "count", {"n": 10_000, "step_s": 0.01, "time_limit_s": 0.2})
        assert "stopped after the time limit of 0.2 s" in text
        assert state["counted"].stopped() and state["counted"].last < 10_000

        text = await call_error(c, "count", {"n": 3, "step_s": 0, "fail": True})
        assert text.endswith("cannot count. Fix: count less")


@pytest.mark.anyio
async def test_long_running_hook_stops_the_work_on_cancellation(root: Path):
    state: dict = {}
    async with Client(_server_with_counting_tool(root, state)) as c:
        with pytest.raises(MCPError) as exc:
            await c.call_tool("count", {"n": 10_000, "step_s": 0.01}, read_timeout_seconds=0.3)
        assert exc.value.code == REQUEST_TIMEOUT
        assert await anyio.to_thread.run_sync(state["counted"].stopped, 5.0)  # the work ended, long before 100 s
        assert state["counted"].last < 10_000
        ok = await call(c, "derive_alignment", {"cp": 2})  # the server still answers
        assert ok["pad_seq_to_mult"] == 4


@pytest.mark.anyio
async def test_run_job_without_a_context_and_with_a_bad_limit():
    assert await run_job(None, lambda job: job.progress(1, 1) or 41 + 1, time_limit_s=5) == 42
    with pytest.raises(ToolError, match="time_limit_s must be positive"):
        await run_job(None, lambda job: 1, time_limit_s=0)


# --------------------------------------------------------------------------------------------
# Subprocesses: stdio and streamable HTTP
# --------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO)}


@pytest.mark.slow  # a server process
@pytest.mark.anyio
async def test_stdio_subprocess(root: Path, tmp_path: Path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "seqpack", "mcp", "--root", str(root)],
                                   env=_env(), cwd=str(tmp_path))
    errlog = (tmp_path / "stderr.log").open("w+")
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=30) as session:
            init = await session.initialize()
            assert init.server_info.name == "seqpack"
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS

            ok = await session.call_tool("derive_alignment", {"tp": 4, "cp": 2, "sp": True})
            assert ok.is_error is False and ok.structured_content["pad_seq_to_mult"] == 8
            bad = await session.call_tool("validate_config", {"path": "../outside/job.yaml"})
            assert bad.is_error is True and OUTSIDE_TEXT in bad.content[0].text

            # 20 concurrent calls over one session, each checked against its own expected answer
            results: dict[int, object] = {}

            async def one(i: int) -> None:
                if i % 3 == 0:
                    r = await session.call_tool("derive_alignment", {"tp": 1 + i % 4, "cp": 2, "sp": True})
                    # lcm(2*CP, CP*TP): TP1 -> 4, TP2 -> 4, TP3 -> lcm(4, 6) = 12, TP4 -> 8
                    assert r.structured_content["pad_seq_to_mult"] == {1: 4, 2: 4, 3: 12, 4: 8}[1 + i % 4]
                elif i % 3 == 1:
                    r = await session.call_tool("validate_config", {"overrides": [f"train.micro_batch_size={i}"]})
                    assert r.structured_content["config"]["train"]["micro_batch_size"] == i
                else:
                    r = await session.call_tool("plan_pack_length", {"lengths": [i, 3, 3], "candidates": [32],
                                                                     "token_slots": 64})
                    assert r.structured_content["lengths"]["total_tokens"] == i + 6
                results[i] = r

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
            assert sorted(results) == list(range(20)) and not any(r.is_error for r in results.values())

            await session.call_tool("simulate_packing", {"lengths": [3, 4], "pack_size": 8})
            await session.call_tool("list_rules", {})
            info = await session.call_tool("server_info", {})
            loaded = info.structured_content["heavy_modules_loaded"]
            assert loaded["torch"] is False and loaded["megatron.core"] is False
            assert info.structured_content["roots"] == [str(root)]
    errlog.seek(0)
    log = errlog.read()
    assert "seqpack MCP server" in log and f"roots: {root}" in log  # logs go to stderr


def _post_status(port: int, host: str) -> int:
    import urllib.error
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers={
        "Host": host, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.slow  # a server process
@pytest.mark.anyio
async def test_streamable_http_subprocess(root: Path, tmp_path: Path):
    with reserved_port() as port:  # held until the test ends: no other test process is given it
        out, err = (tmp_path / "out.log").open("w+"), (tmp_path / "err.log").open("w+")
        proc = subprocess.Popen(
            [sys.executable, "-m", "seqpack", "mcp", "--transport", "http", "--port", str(port),
             "--root", str(root), "--lifetime", "60"],
            stdout=out, stderr=err, env={**os.environ, **_env()}, cwd=str(tmp_path),
        )
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert proc.poll() is None, "server exited early"
                await anyio.sleep(0.1)
            else:
                pytest.fail("streamable-http server did not start")
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                r = await c.call_tool("derive_alignment", {"tp": 4, "cp": 2, "sp": True})
                assert r.is_error is False and r.structured_content["pad_seq_to_mult"] == 8
                r = await c.call_tool("plan_pack_length", {"jsonl_path": "../outside/secret.jsonl"})
                assert r.is_error is True and OUTSIDE_TEXT in r.content[0].text
                uris = {str(x.uri) for x in (await c.list_resources()).resources}
                assert {"seqpack://rules.md", "seqpack://rules.json"} <= uris
            # DNS-rebinding protection: a request naming a foreign host is refused
            assert await anyio.to_thread.run_sync(_post_status, port, "evil.example") == 421
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        out.seek(0)
        err.seek(0)
        assert out.read() == ""  # nothing on stdout, even over HTTP
        assert f"http://127.0.0.1:{port}" in err.read()


@pytest.mark.slow
def test_http_server_stops_by_itself_after_its_lifetime(root: Path, tmp_path: Path):
    with reserved_port() as port:
        proc = subprocess.Popen(
            [sys.executable, "-m", "seqpack", "mcp", "--transport", "http", "--port", str(port),
             "--root", str(root), "--lifetime", "1.5"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **_env()}, cwd=str(tmp_path),
        )
        try:
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out == b""
    assert b"lifetime of 1.5 s is over" in err


def test_cli_rejects_bad_server_arguments(tmp_path: Path, capsys):
    assert main(["mcp", "--root", str(tmp_path / "missing")]) == 2
    assert "root is not a directory" in capsys.readouterr().err
    assert main(["mcp", "--port", "0"]) == 2
    assert "--port must be between 1 and 65535" in capsys.readouterr().err
    assert main(["mcp", "--lifetime", "5"]) == 2
    assert "--lifetime applies to --transport http" in capsys.readouterr().err

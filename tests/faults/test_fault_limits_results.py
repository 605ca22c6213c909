"""Faults of size and sense: absurd sizes refused before allocation, results that would be silently wrong.

Classes: plan --n / pack --num-samples of a billion (CLI and MCP), a blend drawing a few rows a
million times, seeds and histogram keys beyond int64 (CLI and MCP), booleans where MCP wants
integers; global-batch with more DP ranks than samples, a final partial step, a global batch
larger than the file; plan --jsonl text hiding skipped rows.
"""

from __future__ import annotations

import json
import resource
import time

import anyio
import pytest
from mcp import Client

from seqpack.core import limits
from seqpack.faces.mcp.server import build_server

BILLION = 1_000_000_000


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "args, needle",
    [
        (["plan", "--mix", "lognormal", "--n", BILLION], f"over the limit of {limits.MAX_PLAN_SAMPLES}"),
        (["pack", "{data}", "--out", "{out}", "--pack-size", 256, "--num-samples", BILLION],
         f"over the limit of {limits.MAX_BLEND_SAMPLES}"),
        (["pack", "{data}", "--out", "{out}", "--pack-size", 256, "--num-samples", 1_000_000],
         f"the limit is {limits.MAX_BLEND_EPOCHS} passes"),
        (["smoke", "--seed", 10**30], "over the limit"),
        (["pack", "{data}", "--out", "{out}", "--pack-size", 256, "--seed", 10**30], "over the limit"),
        (["plan", "--mix", "uniform", "--max-len", 10**30], "over the limit"),
        (["batches", "{data}", "--mbs", 10**12], "over the limit"),
        (["inspect", "{data}", "--eos-id", 10**30], "over the limit"),
    ],
    ids=["plan-n", "pack-num-samples", "blend-epochs", "smoke-seed", "pack-seed", "plan-max-len", "batches-mbs",
         "inspect-eos"],
)
def test_absurd_sizes_are_refused_before_allocation(cli, data, tmp_path, args, needle):
    filled = [str(a).replace("{data}", str(data)).replace("{out}", str(tmp_path / "out")) for a in args]
    before = _peak_mb()
    t0 = time.monotonic()
    cli(*filled).refused(needle)
    assert time.monotonic() - t0 < 10 and _peak_mb() - before < 200  # refused, not attempted
    assert not (tmp_path / "out").exists()


@pytest.fixture
def mcp_root(data):
    return data.parent


async def _call(root, name, args):
    async with Client(build_server([root])) as client:
        return await client.call_tool(name, args)


@pytest.mark.parametrize(
    "name, args, needle",
    [
        ("pack_dataset", {"input_path": "data.jsonl", "output_dir": "o", "pack_size": 256, "num_samples": BILLION},
         "less than or equal to"),
        ("plan_pack_length", {"histogram": {"99999999999999999999999": 3}}, "less than or equal to"),
        ("plan_pack_length", {"histogram": {"512": 10**30}}, "less than or equal to"),
        ("plan_pack_length", {"mix": "lognormal", "n": BILLION}, "less than or equal to"),
        ("derive_alignment", {"tp": True}, "expected a number, got a boolean"),
        ("plan_pack_length", {"lengths": [True, 5]}, "expected a number, got a boolean"),
        ("simulate_packing", {"lengths": [1, 2], "pack_size": 8, "max_bins": False}, "got a boolean"),
        ("pack_dataset", {"input_path": "data.jsonl", "output_dir": "o", "pack_size": True}, "got a boolean"),
    ],
    ids=["pack-num-samples", "histogram-key", "histogram-count", "plan-n", "bool-tp", "bool-in-list", "bool-max-bins",
         "bool-pack-size"],
)
def test_mcp_refuses_absurd_and_wrongly_typed_sizes(mcp_root, name, args, needle):
    result = anyio.run(_call, mcp_root, name, args)
    text = result.content[0].text
    assert result.is_error and needle in text and "Traceback" not in text
    assert not (mcp_root / "o").exists()


def test_the_library_refuses_histogram_lengths_beyond_the_limit():
    from seqpack.core.errors import InputError
    from seqpack.verbs import PlanOptions, plan

    for histogram in ({"9" * 5000: 1}, {str(limits.MAX_SAMPLE_TOKENS + 1): 1}, {"512": limits.MAX_PLAN_SAMPLES + 1}):
        with pytest.raises(InputError, match="histogram"):
            plan(PlanOptions(histogram=histogram))


# --------------------------------------------------------------------------------------------
# silently wrong results
# --------------------------------------------------------------------------------------------


def test_more_dp_ranks_than_samples_is_refused(cli, write):
    path = write("few.jsonl", "".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(10)))
    cli("batches", path, "--mode", "global-batch", "--dp", 32, "--gbs", 32).refused(
        "holds 10 rows, fewer than one global batch of 32")
    cli("batches", path, "--mode", "global-batch", "--dp", 2, "--gbs", 64).refused("global batch of 64")


def test_a_partial_final_step_is_left_out_as_training_does(cli, write):
    path = write("rows.jsonl", "".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n"
                                       for i in range(20)))
    run = cli("batches", path, "--mode", "global-batch", "--dp", 2, "--gbs", 8, "--num-steps", 10, "--json")
    report = json.loads(run.out)
    assert run.code == 0 and len(report["steps"]) == 2 and report["full_steps"] == 2
    assert report["dropped_rows"] == 4 and all(s["num_samples"] == 8 for s in report["steps"])
    text = cli("batches", path, "--mode", "global-batch", "--dp", 2, "--gbs", 8, "--num-steps", 10)
    assert "the last 4 row(s) do not fill a global batch of 8" in text.out


def test_plan_text_shows_skipped_rows(cli, write):
    rows = [{"prompt": "q", "completion": ""}] + [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(5)]
    path = write("rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    run = cli("plan", "--jsonl", path)
    assert run.code == 0 and "6 read, 5 measured whole" in run.out and "empty_completion=1 (first at line 1)" in run.out

"""The long-running MCP tool: the packing smoke test, with progress, a time limit and cancellation."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from seqpack.core.choices import PACKING_PATHS, SMOKE_SIZES, literal
from seqpack.core.limits import MAX_CONFIG_CHARS, MAX_OVERRIDE_CHARS, MAX_OVERRIDES, MAX_PATH_CHARS, MAX_SMOKE_SECONDS
from seqpack.faces.mcp.jobs import JobControl, run_job
from seqpack.faces.mcp.registry import roots_of, tool
from seqpack.smoke.report import SmokeReport

__all__ = ["run_packing_smoke_test"]

SmokePath = literal(PACKING_PATHS)
SmokeSize = literal(SMOKE_SIZES)


@tool(title="Run the packing smoke test (packed == unpacked, CP=2 == CP=1)", extra="train")
async def run_packing_smoke_test(
    ctx: Context,
    path: Annotated[SmokePath, Field(description="which packing path to build batches with")] = "offline",
    config_text: Annotated[str | None, Field(description="training config as YAML/JSON text (default: a "
                                             "small CP=2 config for the path)", max_length=MAX_CONFIG_CHARS)] = None,
    config_path: Annotated[str | None, Field(description="a config file inside an allowed root",
                                             max_length=MAX_PATH_CHARS)] = None,
    overrides: Annotated[list[Annotated[str, Field(max_length=MAX_OVERRIDE_CHARS)]],
                         Field(description="dotted overrides, e.g. 'model.context_parallel_size=1'",
                               max_length=MAX_OVERRIDES)] = [],  # noqa: B006 - the SDK copies arguments per call
    data_path: Annotated[str | None, Field(description="JSONL rows inside an allowed root (default: the "
                                           "path's smoke data)", max_length=MAX_PATH_CHARS)] = None,
    size: Annotated[SmokeSize, Field(description="rows used: 12, 32 or 96")] = "small",
    cp_check: Annotated[bool, Field(description="run the real CP=2 check on gloo processes (slower; without "
                                    "it the result is incomplete)")] = True,
    time_limit_s: Annotated[float, Field(gt=0, le=MAX_SMOKE_SECONDS, description="stop after this many seconds")]
    = 300.0,
    moe: Annotated[bool, Field(description="reference model with a mixture-of-experts MLP: adds the "
                               "moe_router_statistics check (padding out of every routing statistic)")] = False,
    mtp: Annotated[bool, Field(description="reference model with an MTP depth: adds the mtp_equals_unpacked "
                               "check (MTP targets rolled inside each sequence)")] = False,
) -> SmokeReport:
    """Build real batches through a packing path, read their boundaries as Megatron-Core PackedSeqParams
    fields, run a tiny float64 GPT forward and backward, and report each check as passed, failed or
    skipped (with the reason), with numbers: packed outputs, losses and gradients equal the unpacked
    ones, no cross-sequence leakage, position ids restart, supervised tokens preserved, every sample
    exactly once, CP=2 equals CP=1 (multi-process gloo, real PackedSeqParams), config valid. result is
    pass only when every check ran and passed (incomplete when one was skipped). Sends progress
    notifications; honours cancellation and time_limit_s. Takes seconds; the CP check adds a few more
    (longer on a busy machine).
    """
    from seqpack.smoke.options import model_options
    from seqpack.verbs.smoke_test import SmokeOptions, smoke

    roots = roots_of(ctx)
    config = roots.resolve(config_path, field="config_path", kind="file") if config_path is not None else None
    data = roots.resolve(data_path, field="data_path", kind="file") if data_path else None
    options = dict(path=path, config_path=config, config_text=config_text, overrides=tuple(overrides), data=data,
                   size=size, cp_check=cp_check, cp_timeout=max(10.0, min(120.0, time_limit_s)),
                   model=model_options(moe, mtp))

    def work(job: JobControl) -> SmokeReport:
        job.check()
        return smoke(SmokeOptions(**options,  # type: ignore[arg-type]
                                  progress=lambda stage, fraction: job.progress(fraction, 1.0, stage)))

    return await run_job(ctx, work, time_limit_s=time_limit_s)

"""The long-running MCP tool: the packing smoke test, with progress, a time limit and cancellation."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from reference_impl.mcp_support.hints import READ_ONLY
from reference_impl.mcp_support.jobs import JobControl, run_job
from reference_impl.mcp_support.outputs import SmokeOut
from reference_impl.mcp_support.roots import AllowedRoots

SmokePath = Literal["offline", "in_batch", "energon", "global_batch"]
MAX_CONFIG_CHARS = 200_000


def register_smoke_tools(server: MCPServer, roots: AllowedRoots) -> None:
    """Add run_packing_smoke_test."""

    @server.tool(title="Run the packing smoke test (packed == unpacked, CP=2 == CP=1)", annotations=READ_ONLY)
    async def run_packing_smoke_test(
        ctx: Context,
        path: Annotated[SmokePath, Field(description="which packing path to build batches with")] = "offline",
        config_text: Annotated[str | None, Field(description="training config as YAML/JSON text (default: a "
                                                 "small CP=2 config for the path)", max_length=MAX_CONFIG_CHARS)] = None,
        config_path: Annotated[str | None, Field(description="a config file inside an allowed root",
                                                 max_length=4096)] = None,
        overrides: Annotated[list[Annotated[str, Field(max_length=500)]],
                             Field(description="dotted overrides, e.g. 'model.context_parallel_size=1'",
                                   max_length=100)] = [],  # noqa: B006 - the SDK copies arguments per call
        data_path: Annotated[str | None, Field(description="JSONL rows inside an allowed root (default: the "
                                               "bundled demo data)", max_length=4096)] = None,
        size: Annotated[Literal["tiny", "small", "medium"], Field(description="rows used: 12, 32 or 96")] = "small",
        cp_check: Annotated[bool, Field(description="run the real CP=2 check on gloo processes (slower)")] = True,
        time_limit_s: Annotated[float, Field(gt=0, le=3600, description="stop after this many seconds")] = 300.0,
    ) -> SmokeOut:
        """Build real batches through a packing path, convert them to Megatron-Core PackedSeqParams, run a
        tiny float64 GPT forward and backward, and report each check with numbers: packed loss and
        gradients equal the unpacked ones, no cross-sequence leakage, position ids restart, supervised
        tokens preserved, every sample exactly once, CP=2 equals CP=1 (multi-process gloo), config valid.
        Sends progress notifications; honours cancellation and time_limit_s. Takes seconds (tiny) to a
        minute or two (with the CP check on a busy machine).
        """
        from reference_impl.smoke import PATHS

        if path not in PATHS:
            raise ToolError(f"the {path} path is not available in this build; available: {', '.join(PATHS)}.")
        if config_text is not None and config_path is not None:
            raise ToolError("give config_text or config_path, not both.")
        config: object = None
        if config_text is not None:
            config = config_text if config_text.endswith("\n") else config_text + "\n"
        elif config_path is not None:
            config = roots.resolve(config_path, field="config_path", kind="file")
        data = roots.resolve(data_path, field="data_path", kind="file") if data_path else None

        def work(job: JobControl) -> dict:
            from reference_impl.smoke import run_packing_smoke_test as smoke

            job.check()
            report = smoke(
                path, config, data, overrides=list(overrides), size=size, cp_check=cp_check,
                cp_timeout=max(10.0, min(120.0, time_limit_s)),
                progress=lambda stage, fraction: job.progress(fraction, 1.0, stage),
            )
            return report.to_dict()

        return await run_job(ctx, work, time_limit_s=time_limit_s)  # type: ignore[return-value]


__all__ = ["register_smoke_tools"]

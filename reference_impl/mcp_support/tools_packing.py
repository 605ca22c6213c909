"""MCP tools that pack: planning, packing simulation, offline packing and artifact inspection.

numpy is imported when a tool runs; pyarrow only by pack_dataset and inspect_packed_dataset;
torch never.
"""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from reference_impl.mcp_support.errors import tool_errors
from reference_impl.mcp_support.hints import READ_ONLY, WRITES
from reference_impl.mcp_support.outputs import InspectOut, PlanOut, PreparedOut, SimulationOut
from reference_impl.mcp_support.roots import AllowedRoots

MAX_LENGTHS = 1_000_000
MAX_BINS = 1000
MAX_ITEMS_OUT = 20_000
MAX_INDEX_LIST = 1000
MAX_CAPACITY = 1 << 22

Algorithm = Literal["best_fit_decreasing", "first_fit_decreasing", "first_fit_shuffle", "first_fit", "next_fit"]
Truncation = Literal["right", "left", "reject"]
SchemaKind = Literal["auto", "prompt_completion", "chat"]
Size = Annotated[int, Field(ge=1, le=4096)]
PackLen = Annotated[int, Field(ge=1, le=MAX_CAPACITY)]
PathArg = Annotated[str, Field(min_length=1, max_length=4096)]

TP = Annotated[Size | None, Field(description="tensor-parallel size (derives the alignment)")]
CP = Annotated[Size | None, Field(description="context-parallel size (derives the alignment)")]
SP = Annotated[bool, Field(description="sequence parallelism (derives the alignment)")]
EVAL_CP = Annotated[Size | None, Field(description="evaluation CP size (derives the alignment)")]
PAD = Annotated[
    int | None,
    Field(ge=1, le=65536, description="explicit pad_seq_to_mult; must be a multiple of the one TP/CP/SP derive"),
]


def _multiple(pad: int | None, tp: int | None, cp: int | None, sp: bool, eval_cp: int | None) -> int:
    from reference_impl.planning import alignment_multiple

    with tool_errors():
        return alignment_multiple(pad, tp or 1, cp or 1, sp, eval_cp)


def register_packing_tools(server: MCPServer, roots: AllowedRoots) -> None:
    """Add plan_pack_length, simulate_packing, pack_dataset and inspect_packed_dataset."""

    @server.tool(title="Plan the pack length (equal token slots per step)", annotations=READ_ONLY)
    def plan_pack_length(
        lengths: Annotated[list[Annotated[int, Field(ge=1)]] | None,
                           Field(description="sample lengths in tokens", max_length=MAX_LENGTHS)] = None,
        histogram: Annotated[dict[int, Annotated[int, Field(ge=0)]] | None,
                             Field(description="sample counts by length, e.g. {\"512\": 1200, \"3000\": 40}")] = None,
        jsonl_path: Annotated[str | None, Field(description="a JSONL file (or blend manifest) inside an allowed "
                                                "root, tokenized like pack_dataset does", max_length=4096)] = None,
        candidates: Annotated[
            list[PackLen], Field(min_length=1, max_length=16, description="pack lengths to compare")
        ] = [2048, 4096, 8192],  # noqa: B006 - the SDK copies validated arguments per call
        token_slots: Annotated[int, Field(ge=1, le=1 << 40, description="token slots per optimizer step")] = 65536,
        dp: Annotated[int, Field(ge=1, le=1 << 20, description="data-parallel size")] = 1,
        tp: TP = None,
        cp: CP = None,
        sp: SP = False,
        eval_cp: EVAL_CP = None,
        pad_seq_to_mult: PAD = None,
        algorithm: Algorithm = "best_fit_decreasing",
        seed: Annotated[int, Field(ge=0)] = 0,
        max_seqs_per_pack: Annotated[int | None, Field(ge=1)] = None,
        truncation: Annotated[Truncation, Field(description="samples longer than a pack: cut, or leave out")] = "right",
        schema: Annotated[SchemaKind, Field(description="row schema of jsonl_path")] = "auto",
        tokenizer_path: Annotated[str | None, Field(description="tokenizer.json for jsonl_path (default: bytes)",
                                                    max_length=4096)] = None,
    ) -> PlanOut:
        """Compare candidate pack lengths at equal token slots per step and recommend one.

        Give exactly one of lengths, histogram or jsonl_path. Each candidate gets global batch
        size = token_slots / pack_len, a validity check (slots divisible, GBS divisible by DP and
        >= DP, pack_len a multiple of pad_seq_to_mult) and a simulated packing of the aligned
        lengths: packs, lower bound, token efficiency, padding waste, sequences per pack, samples
        too long, optimizer steps per epoch. The rule behind the recommendation is returned too.
        """
        from reference_impl.planning import plan_pack_length as plan

        multiple = _multiple(pad_seq_to_mult, tp, cp, sp, eval_cp)
        jsonl = roots.resolve_inputs(jsonl_path, field="jsonl_path") if jsonl_path is not None else None
        tokenizer = roots.resolve(tokenizer_path, field="tokenizer_path", kind="file") if tokenizer_path else None
        with tool_errors():
            schema_obj = None
            if schema != "auto":
                from reference_impl.data.schemas import default_schema

                schema_obj = default_schema(schema)
            return plan(  # type: ignore[return-value]
                lengths,
                histogram=histogram,
                jsonl=jsonl,
                candidates=candidates,
                token_slots=token_slots,
                dp=dp,
                pad_seq_to_mult=multiple,
                algorithm=algorithm,
                seed=seed,
                max_seqs_per_pack=max_seqs_per_pack,
                truncation=truncation,
                schema=schema_obj,
                tokenizer=tokenizer,
            ).to_dict()

    @server.tool(title="Simulate bin packing of lengths", annotations=READ_ONLY)
    def simulate_packing(
        lengths: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=MAX_LENGTHS,
                                                                    description="item lengths in tokens")],
        capacity: Annotated[PackLen, Field(description="tokens per pack")],
        algorithm: Algorithm = "best_fit_decreasing",
        seed: Annotated[int, Field(ge=0, description="drives first_fit_shuffle only")] = 0,
        max_seqs_per_pack: Annotated[int | None, Field(ge=1)] = None,
        oversize: Annotated[Literal["error", "report", "truncate"],
                            Field(description="items longer than capacity: fail, leave out, or cut")] = "error",
        max_bins: Annotated[int, Field(ge=0, le=MAX_BINS, description="bins to return (stats cover all)")] = 20,
        bin_offset: Annotated[int, Field(ge=0, description="first bin to return (paging)")] = 0,
    ) -> SimulationOut:
        """Pack item lengths into bins of `capacity` tokens and return the statistics plus a few bins.

        stats: bins, lower bound, efficiency, items per bin, oversize/truncated counts. bins:
        at most max_bins bins from bin_offset (and at most 20000 item indices in all), each with
        its item indices in placement order, their lengths and its token count; has_more tells
        whether more bins follow. Item indices refer to positions in `lengths`.
        """
        from reference_impl.packing.algorithms import pack_lengths

        with tool_errors():
            result = pack_lengths(
                lengths, capacity, algorithm, seed=seed, max_seqs_per_pack=max_seqs_per_pack, oversize=oversize
            )
        order, offsets, sums = result.order.tolist(), result.offsets.tolist(), result.bin_sums.tolist()
        bins, items_out = [], 0
        b = bin_offset
        while b < result.num_bins and len(bins) < max_bins:
            items = order[offsets[b] : offsets[b + 1]]
            if bins and items_out + len(items) > MAX_ITEMS_OUT:
                break
            bins.append({"bin": b, "tokens": int(sums[b]), "items": items, "lengths": [lengths[i] for i in items]})
            items_out += len(items)
            b += 1
        return {  # type: ignore[return-value]
            "stats": result.stats(),
            "oversize": result.oversize[:MAX_INDEX_LIST].tolist(),
            "truncated": result.truncated[:MAX_INDEX_LIST].tolist(),
            "bins": bins,
            "bin_offset": bin_offset,
            "bins_returned": len(bins),
            "has_more": b < result.num_bins,
        }

    @server.tool(title="Pack a JSONL dataset offline (writes packed Parquet)", annotations=WRITES)
    def pack_dataset(
        input_path: Annotated[PathArg, Field(description="JSONL file (or blend manifest) inside an allowed root")],
        output_dir: Annotated[PathArg, Field(description="output root inside an allowed root; the packs go to "
                                             "a fingerprinted directory in it")],
        pack_size: Annotated[PackLen, Field(description="pack capacity in tokens, e.g. 8192")],
        validation_path: Annotated[str | None, Field(description="validation JSONL packed the same way",
                                                     max_length=4096)] = None,
        tp: TP = None,
        cp: CP = None,
        sp: SP = False,
        eval_cp: EVAL_CP = None,
        pad_seq_to_mult: PAD = None,
        max_seq_length: Annotated[int | None, Field(ge=1, description="per-sample cap (default: pack_size)")] = None,
        schema: SchemaKind = "auto",
        prompt_column: Annotated[str, Field(min_length=1, max_length=200)] = "prompt",
        completion_column: Annotated[str, Field(min_length=1, max_length=200)] = "completion",
        loss_mode: Annotated[Literal["completion", "full", "assistant", "last_turn"] | None,
                             Field(description="completion|full (prompt/completion), assistant|last_turn|full (chat)")]
        = None,
        tokenizer_path: Annotated[str | None, Field(description="tokenizer.json (default: the byte tokenizer)",
                                                    max_length=4096)] = None,
        truncation: Truncation = "right",
        algorithm: Algorithm = "best_fit_decreasing",
        seed: Annotated[int, Field(ge=0)] = 1234,
        max_seqs_per_pack: Annotated[int | None, Field(ge=1)] = None,
        bridge_compat: Annotated[bool, Field(description="reproduce Megatron-Bridge's packing exactly")] = False,
        num_samples: Annotated[int | None, Field(ge=1, description="draws from a blend")] = None,
        overwrite: Annotated[bool, Field(description="replace an existing pack directory of the same fingerprint")]
        = False,
    ) -> PreparedOut:
        """Tokenize, align, bin-pack and write packed Parquet + metadata + manifest (like `seqpack pack`).

        pad_seq_to_mult comes from tp/cp/sp/eval_cp unless given. The output directory name
        carries a fingerprint of the inputs and options: the same call again reuses it. Every
        input row is accounted for per split (packed, truncated, skipped by reason).
        """
        from reference_impl.data.schemas import schema_from_options
        from reference_impl.packing.offline import prepare_packed_dataset

        multiple = _multiple(pad_seq_to_mult, tp, cp, sp, eval_cp)
        train = roots.resolve_inputs(input_path, field="input_path")
        inputs: object = train
        if validation_path is not None:
            inputs = {"training": str(train), "validation": str(roots.resolve_inputs(validation_path,
                                                                                    field="validation_path"))}
        out = roots.resolve(output_dir, field="output_dir", must_exist=False, kind="dir")
        tokenizer = roots.resolve(tokenizer_path, field="tokenizer_path", kind="file") if tokenizer_path else None
        with tool_errors():
            schema_obj = schema_from_options(schema, prompt_column=prompt_column,
                                             completion_column=completion_column, loss_mode=loss_mode)
            result = prepare_packed_dataset(
                inputs,  # type: ignore[arg-type]
                out,
                pack_size=pack_size,
                pad_seq_to_mult=multiple,
                max_seq_length=max_seq_length,
                schema=schema_obj,
                tokenizer=tokenizer,
                truncation=truncation,
                algorithm=algorithm,
                seed=seed,
                max_seqs_per_pack=max_seqs_per_pack,
                bridge_compat=bridge_compat,
                num_samples=num_samples,
                overwrite=overwrite,
            )
        return result.to_dict()  # type: ignore[return-value]

    @server.tool(title="Inspect packed Parquet (integrity, stats, topology fit)", annotations=READ_ONLY)
    def inspect_packed_dataset(
        path: Annotated[
            PathArg, Field(description="a packed Parquet file or a directory of them (no glob), inside a root")
        ],
        tp: TP = None,
        cp: CP = None,
        sp: SP = False,
        eval_cp: EVAL_CP = None,
        pack_size: Annotated[int | None, Field(ge=1, description="needed for artifacts without a manifest")] = None,
        eos_id: Annotated[int | None, Field(ge=0, description="EOS id (real-token counts of foreign packs)")] = None,
        fixed_width: Annotated[bool | None, Field(description="the run pads rows to pack_size")] = None,
    ) -> InspectOut:
        """Check a packed artifact (seqpack's or Megatron-Bridge's) and, given tp/cp/sp, whether it fits.

        Reports integrity issues (segment structure, loss on positions without a label, rows over
        capacity, manifest mismatches), statistics (efficiency, padding shares, sequences per
        pack, inferred alignment), and with a topology whether every physical segment is a
        multiple of the derived pad_seq_to_mult (topology.usable and reasons).
        """
        from reference_impl.inspect import Topology, inspect_packed_dataset as inspect
        from reference_impl.packing.parquet import resolve_parquet_paths

        target = roots.resolve(path, field="path")
        with tool_errors():
            files = resolve_parquet_paths(target)
        for f in files:
            roots.check_resolved(f, field="path")
        manifest = files[0].parent / "seqpack_manifest.json"  # read by inspect when present
        if manifest.exists():
            roots.check_resolved(manifest, field="path")
        topo = None
        if tp is not None or cp is not None or sp or eval_cp is not None:
            topo = Topology(tp=tp or 1, cp=cp or 1, sp=sp, eval_cp=eval_cp)
        with tool_errors():
            report = inspect(target, topo, pack_size=pack_size, eos_id=eos_id, pad_to_max_length=fixed_width)
        return report.to_dict()  # type: ignore[return-value]


__all__ = ["register_packing_tools"]

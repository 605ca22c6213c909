"""MCP tools that pack: planning, packing simulation, offline packing, artifact inspection, the
batches of the runtime paths, and Energon dataset preparation.

Each tool confines its paths to the allowed roots, parses its arguments into the verb's options
and returns the verb's result (:mod:`seqpack.verbs`). The tools that read or write data
run as jobs (:func:`~seqpack.faces.mcp.jobs.run_job`): the work stops at its next row
when the client cancels the request or ``time_limit_s`` passes. Loading this module imports neither
numpy nor torch; a tool imports what its verb needs when it runs (numpy for planning and packing,
pyarrow for pack_dataset and inspect_packed_dataset, torch for the batches tools).
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from seqpack.core.choices import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    LENGTH_MIXES,
    LOSS_MODES,
    OVERSIZE_MODES,
    REASONING_POLICIES,
    RUNTIME_DATALOADER_TYPES,
    SCHEDULERS,
    SCHEMA_KINDS,
    SCHEMA_OPTIONS,
    TRUNCATION_MODES,
    VISION_OPTIONS,
    literal,
)
from seqpack.core.limits import (
    DEFAULT_TOOL_SECONDS,
    MAX_BATCHES_SHOWN,
    MAX_BINS_RETURNED,
    MAX_BLEND_SAMPLES,
    MAX_CANDIDATES,
    MAX_DATA_PARALLEL_SIZE,
    MAX_GLOBAL_BATCH_SIZE,
    MAX_INLINE_LENGTHS,
    MAX_MIX_LENGTH,
    MAX_PACK_LEN,
    MAX_PAD_SEQ_TO_MULT,
    MAX_PARALLEL_SIZE,
    MAX_PATH_CHARS,
    MAX_PLAN_SAMPLES,
    MAX_SAMPLE_TOKENS,
    MAX_SEED,
    MAX_SEQS_PER_PACK,
    MAX_SHARD_SIZE,
    MAX_STEPS_SHOWN,
    MAX_TOKEN_ID,
    MAX_TOKEN_SLOTS,
    MAX_TOOL_SECONDS,
)
from seqpack.config.dispatch import DISPATCHERS
from seqpack.faces.mcp.hints import WRITES
from seqpack.faces.mcp.jobs import run_job
from seqpack.faces.mcp.links import energon_links, pack_links
from seqpack.faces.mcp.registry import roots_of, tool
from seqpack.packing.global_batch.report import GlobalBatchReport
from seqpack.packing.in_batch_report import InBatchReport
from seqpack.core.reports import InspectReport, PackPlan, PreparedEnergonDataset, PreparedPacks
from seqpack.verbs.batch_views import BatchesOptions, batches
from seqpack.verbs.energon import EnergonPrepareOptions, energon_prepare
from seqpack.verbs.inspection import InspectOptions, inspect_packs
from seqpack.verbs.packing import PackOptions, pack
from seqpack.verbs.planning import PlanOptions, plan
from seqpack.verbs.simulation import PackingSimulation, SimulateOptions, simulate_packing as simulate

__all__ = [
    "inspect_global_batch",
    "inspect_in_batch",
    "inspect_packed_dataset",
    "pack_dataset",
    "plan_pack_length",
    "prepare_energon_dataset",
    "simulate_packing",
]

Algorithm = literal(ALGORITHMS)
Truncation = literal(TRUNCATION_MODES)
SchemaOption = literal(SCHEMA_OPTIONS)
SchemaKind = literal(SCHEMA_KINDS)
Size = Annotated[int, Field(ge=1, le=MAX_PARALLEL_SIZE)]
PackLen = Annotated[int, Field(ge=1, le=MAX_PACK_LEN)]
PathArg = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)]
OptionalPath = Annotated[str | None, Field(max_length=MAX_PATH_CHARS)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
MaxSeqs = Annotated[int | None, Field(ge=1, le=MAX_SEQS_PER_PACK)]

TP = Annotated[Size | None, Field(description="tensor-parallel size (derives the alignment)")]
CP = Annotated[Size | None, Field(description="context-parallel size (derives the alignment)")]
SP = Annotated[bool, Field(description="sequence parallelism (derives the alignment)")]
EVAL_CP = Annotated[Size | None, Field(description="evaluation CP size (derives the alignment)")]
PAD = Annotated[
    int | None,
    Field(ge=1, le=MAX_PAD_SEQ_TO_MULT,
          description="explicit pad_seq_to_mult; must be a multiple of the one TP/CP/SP derive"),
]


TimeLimit = Annotated[float, Field(gt=0, le=MAX_TOOL_SECONDS,
                                   description="stop the work after this many seconds (it also stops when the "
                                   "request is cancelled)")]


def _file(ctx: Context, path: str | None, field: str) -> str | None:
    return None if path is None else str(roots_of(ctx).resolve(path, field=field, kind="file"))


@tool(title="Plan the pack length (equal token slots per step)")
async def plan_pack_length(
    ctx: Context,
    lengths: Annotated[list[Annotated[int, Field(ge=1, le=MAX_SAMPLE_TOKENS)]] | None,
                       Field(description="sample lengths in tokens", max_length=MAX_INLINE_LENGTHS)] = None,
    histogram: Annotated[dict[Annotated[int, Field(ge=1, le=MAX_SAMPLE_TOKENS)],
                              Annotated[int, Field(ge=0, le=MAX_PLAN_SAMPLES)]] | None,
                         Field(description="sample counts by length, e.g. {\"512\": 1200, \"3000\": 40}",
                               max_length=MAX_INLINE_LENGTHS)] = None,
    jsonl_path: Annotated[str | None, Field(description="a JSONL file (or blend manifest) inside an allowed "
                                            "root, tokenized like pack_dataset does", max_length=MAX_PATH_CHARS)]
    = None,
    mix: Annotated[literal(LENGTH_MIXES) | None,  # type: ignore[valid-type]
                   Field(description="a synthetic length mix (with n, max_len, seed)")] = None,
    n: Annotated[int, Field(ge=1, le=MAX_PLAN_SAMPLES, description="samples drawn from mix")] = 100_000,
    max_len: Annotated[int, Field(ge=1, le=MAX_MIX_LENGTH, description="longest sample mix draws")] = 4096,
    candidates: Annotated[
        list[PackLen], Field(min_length=1, max_length=MAX_CANDIDATES, description="pack lengths to compare")
    ] = [2048, 4096, 8192],  # noqa: B006 - the SDK copies validated arguments per call
    token_slots: Annotated[int, Field(ge=1, le=MAX_TOKEN_SLOTS, description="token slots per optimizer step")]
    = 65536,
    dp: Annotated[int, Field(ge=1, le=MAX_DATA_PARALLEL_SIZE, description="data-parallel size")] = 1,
    tp: TP = None,
    cp: CP = None,
    sp: SP = False,
    eval_cp: EVAL_CP = None,
    pad_seq_to_mult: PAD = None,
    algorithm: Algorithm = DEFAULT_ALGORITHM,
    seed: Annotated[int, Field(ge=0, le=MAX_SEED, description="seed of mix and of first_fit_shuffle")] = 0,
    max_seqs_per_pack: MaxSeqs = None,
    truncation: Annotated[Truncation, Field(description="samples longer than a pack: cut, or leave out")] = "right",
    schema: Annotated[SchemaOption, Field(description="row schema of jsonl_path")] = "auto",
    tokenizer_path: Annotated[str | None, Field(description="tokenizer.json for jsonl_path (default: bytes)",
                                                max_length=MAX_PATH_CHARS)] = None,
    vision: Annotated[literal(VISION_OPTIONS),  # type: ignore[valid-type]
                      Field(description="jsonl_path rows with images: auto (qwen2_vl preset when the file has "
                                        "images), none (refuse them) or a preset; lengths count image tokens")]
    = "auto",
    moe_dispatcher: Annotated[literal(DISPATCHERS) | None,  # type: ignore[valid-type]
                              Field(description="an MoE model's token dispatcher: adds the dispatch padding "
                                                "overhead to every row")] = None,
    ep: Annotated[int, Field(ge=1, le=MAX_PARALLEL_SIZE, description="expert-parallel size")] = 1,
    pad_to_max_length: Annotated[bool, Field(description="fixed-width packs (every pack pack_len wide)")] = False,
    time_limit_s: TimeLimit = DEFAULT_TOOL_SECONDS,
) -> PackPlan:
    """Compare candidate pack lengths at equal token slots per step and recommend one.

    Give exactly one of lengths, histogram, jsonl_path or mix. Each candidate gets global batch
    size = token_slots / pack_len, a validity check (slots divisible, GBS divisible by DP and
    >= DP, pack_len a multiple of pad_seq_to_mult) and a simulated packing of the aligned
    lengths: packs, lower bound, token efficiency, padding waste, sequences per pack, samples
    too long, optimizer steps per epoch. The rule behind the recommendation is returned too.
    With moe_dispatcher, each row also gives the MoE dispatch width rule and the share of
    dispatched tokens that are padding.
    """
    jsonl = str(roots_of(ctx).resolve_inputs(jsonl_path, field="jsonl_path")) if jsonl_path is not None else None
    options = PlanOptions(
        lengths=lengths, histogram=histogram, jsonl=jsonl, mix=mix, n=n, max_len=max_len,
        candidates=tuple(candidates), token_slots=token_slots, dp=dp, tp=tp, cp=cp, sp=sp, eval_cp=eval_cp,
        pad_seq_to_mult=pad_seq_to_mult, algorithm=algorithm, seed=seed, max_seqs_per_pack=max_seqs_per_pack,
        truncation=truncation, schema=schema, tokenizer=_file(ctx, tokenizer_path, "tokenizer_path"), vision=vision,
        moe_dispatcher=moe_dispatcher, ep=ep, pad_to_max_length=pad_to_max_length,
    )
    return await run_job(ctx, lambda job: plan(options), time_limit_s=time_limit_s)


@tool(title="Simulate bin packing of lengths")
def simulate_packing(
    lengths: Annotated[list[Annotated[int, Field(ge=1, le=MAX_SAMPLE_TOKENS)]],
                       Field(min_length=1, max_length=MAX_INLINE_LENGTHS, description="item lengths in tokens")],
    capacity: Annotated[PackLen, Field(description="tokens per pack")],
    algorithm: Algorithm = DEFAULT_ALGORITHM,
    seed: Annotated[int, Field(ge=0, le=MAX_SEED, description="drives first_fit_shuffle only")] = 0,
    max_seqs_per_pack: MaxSeqs = None,
    oversize: Annotated[literal(OVERSIZE_MODES),  # type: ignore[valid-type]
                        Field(description="items longer than capacity: fail, leave out, or cut")] = "error",
    max_bins: Annotated[int, Field(ge=0, le=MAX_BINS_RETURNED, description="bins to return (stats cover all)")] = 20,
    bin_offset: Annotated[int, Field(ge=0, description="first bin to return (paging)")] = 0,
) -> PackingSimulation:
    """Pack item lengths into bins of `capacity` tokens and return the statistics plus a few bins.

    stats: bins, lower bound, efficiency, items per bin, oversize/truncated counts. bins:
    at most max_bins bins from bin_offset (and at most 20000 item indices in all), each with
    its item indices in placement order, their lengths and its token count; has_more tells
    whether more bins follow. Item indices refer to positions in `lengths`.
    """
    return simulate(SimulateOptions(lengths=lengths, capacity=capacity, algorithm=algorithm, seed=seed,
                                    max_seqs_per_pack=max_seqs_per_pack, oversize=oversize, max_bins=max_bins,
                                    bin_offset=bin_offset))


@tool(title="Pack a JSONL dataset offline (writes packed Parquet)", annotations=WRITES, links=pack_links)
async def pack_dataset(
    ctx: Context,
    input_path: Annotated[PathArg, Field(description="JSONL file (or blend manifest) inside an allowed root")],
    output_dir: Annotated[PathArg, Field(description="output root inside an allowed root; the packs go to "
                                         "a fingerprinted directory in it")],
    pack_size: Annotated[PackLen, Field(description="pack capacity in tokens, e.g. 8192")],
    validation_path: Annotated[str | None, Field(description="validation JSONL packed the same way",
                                                 max_length=MAX_PATH_CHARS)] = None,
    tp: TP = None,
    cp: CP = None,
    sp: SP = False,
    eval_cp: EVAL_CP = None,
    pad_seq_to_mult: PAD = None,
    max_seq_length: Annotated[int | None, Field(ge=1, le=MAX_PACK_LEN,
                                                description="per-sample cap (default: pack_size)")] = None,
    schema: SchemaOption = "auto",
    prompt_column: Annotated[str, Field(min_length=1, max_length=200)] = "prompt",
    completion_column: Annotated[str, Field(min_length=1, max_length=200)] = "completion",
    loss_mode: Annotated[literal(LOSS_MODES) | None,  # type: ignore[valid-type]
                         Field(description="completion|full (prompt/completion), assistant|last_turn|full (chat)")]
    = None,
    reasoning: Annotated[literal(REASONING_POLICIES) | None,  # type: ignore[valid-type]
                         Field(description="chat only: train (default) or mask the reasoning of assistant turns")]
    = None,
    tokenizer_path: Annotated[str | None, Field(description="tokenizer.json (default: the byte tokenizer)",
                                                max_length=MAX_PATH_CHARS)] = None,
    truncation: Truncation = "right",
    algorithm: Algorithm = DEFAULT_ALGORITHM,
    seed: Seed = 1234,
    max_seqs_per_pack: MaxSeqs = None,
    bridge_compat: Annotated[bool, Field(description="reproduce Megatron-Bridge's packing exactly")] = False,
    num_samples: Annotated[int | None, Field(ge=1, le=MAX_BLEND_SAMPLES, description="draws from a blend")] = None,
    pad_seq_length_to_mult: Annotated[int | None, Field(
        ge=1, le=MAX_PAD_SEQ_TO_MULT, description="pre-pad samples to this multiple instead (a multiple of the "
        "alignment), as Megatron-Bridge's dataset_kwargs override does")] = None,
    metadata_path: Annotated[str | None, Field(description="also append the metadata entries to this JSON array "
                                               "file inside an allowed root", max_length=MAX_PATH_CHARS)] = None,
    overwrite: Annotated[bool, Field(description="rewrite the pack directory of this fingerprint (only one seqpack "
                                     "wrote: a directory with other files is never replaced)")] = False,
    time_limit_s: TimeLimit = DEFAULT_TOOL_SECONDS,
) -> PreparedPacks:
    """Tokenize, align, bin-pack and write packed Parquet + metadata + manifest (like `seqpack pack`).

    pad_seq_to_mult comes from tp/cp/sp/eval_cp unless given. The output directory name
    carries a fingerprint of the inputs and options: the same call again reuses it. Every
    input row is accounted for per split (packed, truncated, skipped by reason).
    """
    roots = roots_of(ctx)
    train = roots.resolve_inputs(input_path, field="input_path")
    validation = roots.resolve_inputs(validation_path, field="validation_path") if validation_path else None
    out = roots.resolve(output_dir, field="output_dir", must_exist=False, kind="dir")
    options = PackOptions(
        input=train, out=out, validation=validation, pack_size=pack_size, tp=tp, cp=cp, sp=sp, eval_cp=eval_cp,
        pad_seq_to_mult=pad_seq_to_mult, max_seq_length=max_seq_length, schema=schema, prompt_column=prompt_column,
        completion_column=completion_column, loss_mode=loss_mode, reasoning=reasoning,
        tokenizer=_file(ctx, tokenizer_path, "tokenizer_path"), truncation=truncation, algorithm=algorithm,
        seed=seed, max_seqs_per_pack=max_seqs_per_pack, bridge_compat=bridge_compat, num_samples=num_samples,
        pad_seq_length_to_mult=pad_seq_length_to_mult,
        metadata_path=None if metadata_path is None else roots.resolve(metadata_path, field="metadata_path",
                                                                       must_exist=False),
        overwrite=overwrite, distributed=False,
    )
    return await run_job(ctx, lambda job: pack(options), time_limit_s=time_limit_s)


@tool(title="Inspect packed Parquet or a prepared Energon dataset (integrity, stats, topology fit)")
async def inspect_packed_dataset(
    ctx: Context,
    path: Annotated[PathArg, Field(description="a packed Parquet file or a directory of them (no glob), or a "
                                   "prepared Energon dataset directory, inside a root")],
    tp: TP = None,
    cp: CP = None,
    sp: SP = False,
    eval_cp: EVAL_CP = None,
    pack_size: Annotated[int | None, Field(ge=1, le=MAX_PACK_LEN,
                                           description="needed for artifacts without a manifest")] = None,
    eos_id: Annotated[int | None, Field(ge=0, le=MAX_TOKEN_ID,
                                        description="EOS id (real-token counts of foreign packs)")] = None,
    fixed_width: Annotated[bool | None, Field(description="the run pads rows to pack_size")] = None,
    vision: Annotated[literal(VISION_OPTIONS),  # type: ignore[valid-type]
                      Field(description="Energon datasets: the vision preset that counts image tokens "
                                        "(auto: qwen2_vl when the dataset holds images)")] = "auto",
    time_limit_s: TimeLimit = DEFAULT_TOOL_SECONDS,
) -> InspectReport:
    """Check a packed artifact (seqpack's or Megatron-Bridge's) and, given tp/cp/sp, whether it fits.

    Reports integrity issues (segment structure, loss on positions without a label, rows over
    capacity, manifest mismatches), statistics (efficiency, padding shares, sequences per
    pack, inferred alignment), and with a topology whether every physical segment is a
    multiple of the derived pad_seq_to_mult (topology.usable and reasons). For a prepared
    Energon dataset: shard checksums, samples, images, videos and image tokens, sample lengths,
    and with pack_size (its seq_length) the samples that would not fit.
    """
    from seqpack.packing.energon.inspect import is_energon_dataset
    from seqpack.packing.parquet import resolve_parquet_paths

    roots = roots_of(ctx)
    target = roots.resolve(path, field="path")
    if is_energon_dataset(target):
        energon = InspectOptions(path=target, tp=tp, cp=cp, sp=sp, eval_cp=eval_cp, pack_size=pack_size, vision=vision)
        return await run_job(ctx, lambda job: inspect_packs(energon), time_limit_s=time_limit_s)
    files = resolve_parquet_paths(target)
    for f in files:
        roots.check_resolved(f, field="path")
    manifest = files[0].parent / "seqpack_manifest.json"  # read by inspect when present
    if manifest.exists():
        roots.check_resolved(manifest, field="path")
    options = InspectOptions(path=target, tp=tp, cp=cp, sp=sp, eval_cp=eval_cp, pack_size=pack_size, eos_id=eos_id,
                             fixed_width=fixed_width, vision=vision)
    return await run_job(ctx, lambda job: inspect_packs(options), time_limit_s=time_limit_s)


def _batches_options(
    ctx: Context, mode: str, input_path: str, tokenizer_path: str | None, **kwargs: object
) -> BatchesOptions:
    return BatchesOptions(input=_file(ctx, input_path, "input_path"), mode=mode,  # type: ignore[arg-type]
                          tokenizer=_file(ctx, tokenizer_path, "tokenizer_path"), **kwargs)  # type: ignore[arg-type]


_INPUT = Annotated[PathArg, Field(description="prompt/completion or chat JSONL file inside an allowed root")]
_SEQ = Annotated[int, Field(ge=1, le=MAX_PACK_LEN, description="sequence length; bounds every row")]
_LOADER = Annotated[literal(RUNTIME_DATALOADER_TYPES),  # type: ignore[valid-type]
                    Field(description="dataloader type (batch is refused by the rules)")]
_SCHEMA = Annotated[SchemaKind | None, Field(description="row schema (default: detected from the first row)")]
_TOKENIZER = Annotated[str | None, Field(description="tokenizer.json (default: the byte tokenizer)",
                                         max_length=MAX_PATH_CHARS)]


@tool(title="Show the first in-batch packed micro-batches of a JSONL file", extra="train")
async def inspect_in_batch(
    ctx: Context,
    input_path: _INPUT,
    mbs: Annotated[int | None, Field(ge=1, le=MAX_GLOBAL_BATCH_SIZE,
                                     description="rows packed into one THD row (default 4)")] = None,
    seq_length: _SEQ = 4096,
    tp: TP = None,
    cp: CP = None,
    sp: SP = False,
    eval_cp: EVAL_CP = None,
    num_batches: Annotated[int, Field(ge=1, le=MAX_BATCHES_SHOWN, description="micro-batches to show")] = 3,
    dataloader: _LOADER = "single",
    seed: Seed = 1234,
    schema: _SCHEMA = None,
    tokenizer_path: _TOKENIZER = None,
    truncation: Truncation = "right",
    pad_to_max_length: Annotated[bool, Field(description="fixed packed width (static-shape kernels)")] = False,
    width: Annotated[int | None, Field(ge=1, le=MAX_PACK_LEN, description="the fixed width (default seq_length)")]
    = None,
    vision: Annotated[literal(VISION_OPTIONS),  # type: ignore[valid-type]
                      Field(description="rows with images: auto (qwen2_vl preset when the file has images), "
                                        "none (refuse them) or a preset")] = "auto",
    time_limit_s: TimeLimit = DEFAULT_TOOL_SECONDS,
) -> InBatchReport:
    """Build the real in-batch loader (rules, derived alignment, collator) on rank 0 and summarise its first
    micro-batches: rows, lengths, cu_seqlens (real and padded), width, alignment and width padding
    (like `seqpack batches --mode in-batch`). Settings that break a packing rule are a tool error
    naming the rule."""
    options = _batches_options(
        ctx, "in-batch", input_path, tokenizer_path, mbs=mbs, seq_length=seq_length, tp=tp, cp=cp, sp=sp,
        eval_cp=eval_cp, num_batches=num_batches, dataloader=dataloader, seed=seed, schema=schema,
        truncation=truncation, pad_to_max_length=pad_to_max_length, width=width, vision=vision,
    )
    return await run_job(ctx, lambda job: batches(options), time_limit_s=time_limit_s)  # type: ignore[return-value]


@tool(title="Show the first global-batch packing steps of a JSONL file (DP ranks simulated)", extra="train")
async def inspect_global_batch(
    ctx: Context,
    input_path: _INPUT,
    seq_length: _SEQ = 4096,
    dp: Annotated[int, Field(ge=1, le=MAX_DATA_PARALLEL_SIZE, description="data-parallel ranks to simulate")] = 2,
    gbs: Annotated[int, Field(ge=1, le=MAX_GLOBAL_BATCH_SIZE, description="global batch size in samples")] = 16,
    tp: TP = None,
    cp: CP = None,
    sp: SP = False,
    max_seqlen_per_rank: Annotated[int | None, Field(ge=1, le=MAX_PACK_LEN,
                                                     description="model.max_seqlen_per_dp_cp_rank (default "
                                                     "ceil(seq_length / cp))")] = None,
    scheduler: Annotated[literal(SCHEDULERS),  # type: ignore[valid-type]
                         Field(description="global-batch scheduler")] = "dp_balanced",
    num_steps: Annotated[int, Field(ge=1, le=MAX_STEPS_SHOWN, description="steps to show")] = 2,
    dataloader: _LOADER = "single",
    seed: Seed = 1234,
    schema: _SCHEMA = None,
    tokenizer_path: _TOKENIZER = None,
    truncation: Truncation = "right",
    time_limit_s: TimeLimit = DEFAULT_TOOL_SECONDS,
) -> GlobalBatchReport:
    """Simulate the DP ranks of global-batch packing in one process (the training scheduler and pack
    builder, no collectives) and return every step's packs per (micro-batch, DP rank), the per-rank
    token and attention loads and the FLOPs sums (like `seqpack batches --mode global-batch`)."""
    options = _batches_options(
        ctx, "global-batch", input_path, tokenizer_path, seq_length=seq_length, dp=dp, gbs=gbs, tp=tp, cp=cp,
        sp=sp, max_seqlen_per_rank=max_seqlen_per_rank, scheduler=scheduler, num_steps=num_steps,
        dataloader=dataloader, seed=seed, schema=schema, truncation=truncation,
    )
    return await run_job(ctx, lambda job: batches(options), time_limit_s=time_limit_s)  # type: ignore[return-value]


@tool(title="Prepare a Megatron-Energon dataset from JSONL (writes WebDataset shards)", annotations=WRITES,
      extra="energon", links=energon_links)
async def prepare_energon_dataset(
    ctx: Context,
    input_path: _INPUT,
    output_dir: Annotated[PathArg, Field(description="dataset directory inside an allowed root (written atomically)")],
    with_media: Annotated[bool, Field(description="give about half the rows without images a seeded synthetic picture")]
    = False,
    shard_size: Annotated[int, Field(ge=1, le=MAX_SHARD_SIZE, description="samples per tar shard")] = 1000,
    val_fraction: Annotated[float, Field(ge=0.0, lt=1.0, description="fraction of rows in the val split")] = 0.0,
    seed: Seed = 1234,
    overwrite: Annotated[bool, Field(description="replace an existing output directory (only a dataset seqpack "
                                     "wrote, with no other file in it)")] = False,
    time_limit_s: TimeLimit = DEFAULT_TOOL_SECONDS,
) -> PreparedEnergonDataset:
    """Turn JSONL into WebDataset shards and index them as a prepared Energon dataset for online packing
    (like `seqpack energon-prepare`): samples and shards per split, the schema, media and a fingerprint."""
    roots = roots_of(ctx)
    options = EnergonPrepareOptions(
        input=roots.resolve(input_path, field="input_path", kind="file"),
        out=roots.resolve(output_dir, field="output_dir", must_exist=False, kind="dir"),
        with_media=with_media, shard_size=shard_size, val_fraction=val_fraction, seed=seed, overwrite=overwrite,
    )
    return await run_job(ctx, lambda job: energon_prepare(options), time_limit_s=time_limit_s)

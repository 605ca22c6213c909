"""``pack``: offline packing of rows (JSONL, Parquet, a ``datasets`` folder, or a blend) into packed Parquet + metadata +
manifest."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from seqpack.core.choices import BIN_SCOPES, ENGINES, LOSS_MODES, REASONING_POLICIES
from seqpack.core.limits import (
    MAX_BLEND_SAMPLES,
    MAX_PACK_LEN,
    MAX_PAD_SEQ_TO_MULT,
    MAX_SHARD_ROWS,
    MAX_WORKERS,
    MIN_SHARD_ROWS,
)
from seqpack.core.reports import PreparedPacks
from seqpack.core.glossary import glossary_line
from seqpack.core.textfmt import text_table
from seqpack.verbs.common import (
    AlignedOptions,
    algorithm_option,
    bridge_version_option,
    max_seqs_option,
    schema_option,
    seed_option,
    template_error_option,
    tokenizer_option,
    truncation_option,
)
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["PACK", "PackOptions", "pack", "pack_links", "render_pack"]

_COLUMN = dict(min_length=1, max_length=200)


@verb_options
class PackOptions(AlignedOptions):
    """Inputs (``input``: JSONL, Parquet, a ``datasets`` folder or a blend manifest; optional ``validation``), output root,
    pack size, the topology (or an explicit ``pad_seq_to_mult``) and every packing setting.

    ``pad_seq_length_to_mult`` overrides the pre-padding multiple (a multiple of the alignment,
    capped at the per-sample cap, as in Megatron-Bridge); ``metadata_path`` also appends the
    metadata entries to that JSON array file; ``distributed`` runs on the ranks of a ``torchrun``
    job (``None``: detected from the environment)."""

    input: str | os.PathLike[str] | Mapping[str, Any] = option(
        help="JSONL or Parquet file, a datasets.save_to_disk folder, or a blend manifest (.json/.yaml: [weight, path, "
        "...]); s3:// and other object-storage URIs too", positional=True, path="inputs")
    out: str | os.PathLike[str] = option(
        help="output root; the packs go to a fingerprinted directory inside it", path="out_dir")
    pack_size: int = option(help="pack capacity in runtime tokens (e.g. 8192)", minimum=1, maximum=MAX_PACK_LEN)
    validation: str | os.PathLike[str] | None = option(None, help="validation rows (JSONL, Parquet, a datasets folder) packed with the same settings",
                                                       path="inputs")
    max_seq_length: int | None = option(None, help="per-sample cap (default: the pack size)", minimum=1,
                                        maximum=MAX_PACK_LEN)
    schema: str = schema_option()
    prompt_column: str = option("prompt", help="prompt column of prompt/completion rows", **_COLUMN)
    completion_column: str = option("completion", help="completion column of prompt/completion rows", **_COLUMN)
    loss_mode: str | None = option(None, help="completion|full (prompt/completion), assistant|last_turn|full (chat)",
                                   choices=LOSS_MODES)
    reasoning: str | None = option(None, help="chat only: train on the reasoning of assistant turns (train, the "
                                   "default) or mask it", choices=REASONING_POLICIES)
    tokenizer: Any = tokenizer_option()
    truncation: str = truncation_option()
    on_template_error: str = template_error_option()
    algorithm: str = algorithm_option()
    seed: int = seed_option(1234)
    max_seqs_per_pack: int | None = max_seqs_option()
    bridge_compat: bool = option(False, help="reproduce Megatron-Bridge's packing strategy and fill exactly")
    bridge_version: str = bridge_version_option("the packs are for (main refuses a non-empty completion left "
                                                "without a supervised token, PR #5737)")
    num_samples: int | None = option(None, help="draws from a blend (default: the sum of the source rows)",
                                     minimum=1, maximum=MAX_BLEND_SAMPLES)
    pad_seq_length_to_mult: int | None = option(
        None, help="pre-pad samples to this multiple instead (a multiple of the alignment; capped at the per-sample "
        "cap), as Megatron-Bridge's dataset_kwargs override does", minimum=1, maximum=MAX_PAD_SEQ_TO_MULT)
    metadata_path: str | os.PathLike[str] | None = option(
        None, help="also append the metadata entries to this JSON array file (created when absent), as "
        "Megatron-Bridge does", path="out_file")
    workers: int = option(1, help="tokenizer and writer processes (per rank under torchrun)", minimum=1,
                          maximum=MAX_WORKERS, mcp=False)
    distributed: bool | None = option(None, help="run on the ranks of a torchrun job (detected from WORLD_SIZE when "
                                      "not given); every rank must see the output root", mcp=False)
    engine: str = option("local", help="who runs the stages: the local worker pool (also on torchrun ranks) or Ray "
                         "tasks (RAY_ADDRESS, or a local cluster of --workers CPUs; the ray extra); the same bytes",
                         choices=ENGINES, mcp=False)
    bin_scope: str = option("global", help="assign bins over the whole split (exact) or within shards of --shard-rows "
                            "rows (approximate: the summary's gap says what it cost)", choices=BIN_SCOPES)
    shard_rows: int | None = option(None, help="rows per shard with --bin-scope shard (default 1,000,000)",
                                    minimum=MIN_SHARD_ROWS, maximum=MAX_SHARD_ROWS)
    max_gap: float | None = option(None, help="fail when the packs exceed the lower bound ceil(aligned tokens / pack "
                                   "size) by more than this fraction (e.g. 0.001), before anything is written",
                                   minimum=0.0)
    work_dir: str | os.PathLike[str] | None = option(
        None, help="where object-storage inputs are staged and a remote output is written first (default: the "
        "system's temporary directory)", path="out_dir", mcp=False, mcp_name="work_dir")
    overwrite: bool = option(False, help="rewrite the pack directory of this fingerprint (only one seqpack wrote: a "
                             "directory with other files is never replaced)")
    progress: bool = option(False, help="show a progress bar on stderr", cli_help="no progress bar (the CLI shows "
                            "one on a terminal unless --json)", flag="--no-progress", inverse=True, interactive=True,
                            cli_default=True, mcp=False)


def pack(options: PackOptions) -> PreparedPacks:
    """Tokenize, align, bin-pack and write the packs (:func:`seqpack.packing.offline.prepare.prepare_packed_dataset`).

    ``pad_seq_to_mult`` is the recommended value of the topology unless given, and an explicit value must be
    a multiple of the required 2*CP (rule ``PACK-OFFLINE-PAD-MULT-TOPOLOGY``): the CLI and the MCP tool refuse
    the same packs. ``bridge_version`` main refuses what Bridge main's preparation refuses (PR #5737).
    """

    from seqpack.data.detect import schema_for_file
    from seqpack.data.tokenizers import byte_tokenizer_warning, tokenizer_label
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    check_options(options)
    multiple = options.multiple()
    inputs: Any = options.input
    if options.validation is not None:
        inputs = {"training": os.fspath(options.input), "validation": os.fspath(options.validation)}
    schema = schema_for_file(options.schema, first_source(options.input), prompt_column=options.prompt_column,
                             completion_column=options.completion_column, loss_mode=options.loss_mode,
                             reasoning=options.reasoning, on_template_error=options.on_template_error)
    result = prepare_packed_dataset(
        inputs,
        options.out,
        pack_size=options.pack_size,
        pad_seq_to_mult=multiple,
        max_seq_length=options.max_seq_length,
        schema=schema,
        tokenizer=options.tokenizer,
        truncation=options.truncation,
        algorithm=options.algorithm,
        seed=options.seed,
        max_seqs_per_pack=options.max_seqs_per_pack,
        bridge_compat=options.bridge_compat,
        num_samples=options.num_samples,
        pad_seq_length_to_mult=options.pad_seq_length_to_mult,
        bridge_version=options.bridge_version,
        metadata_path=options.metadata_path,
        num_workers=options.workers,
        distributed=options.distributed,
        engine=options.engine,
        bin_scope=options.bin_scope,
        shard_rows=options.shard_rows,
        max_gap=options.max_gap,
        work_dir=options.work_dir,
        overwrite=options.overwrite,
        progress=options.progress,
    )
    warning = byte_tokenizer_warning(options.tokenizer, result.manifest.get("schema", {}).get("kind"))
    return result.replaced(tokenizer=tokenizer_label(options.tokenizer), warnings=[warning] if warning else [])


def first_source(source: Any) -> str | None:
    """The JSONL whose first row shows the schema: the file itself, or a blend manifest's first source."""
    from seqpack.packing.offline.sources import is_blend_manifest, read_blend_manifest

    if not isinstance(source, (str, os.PathLike)):
        return None
    if is_blend_manifest(source):
        blends = read_blend_manifest(source)
        return next((path for pairs in blends.values() for _, path in pairs), None)
    return os.fspath(source)


def render_pack(result: PreparedPacks, options: PackOptions) -> str:
    """The CLI's text: where the packs went and how every row was accounted for."""
    rows = []
    for split, info in result.splits.items():
        acc = info["accounting"]
        skipped = ", ".join(f"{k}={v['count']}" for k, v in acc["skipped"].items()) or "-"
        gap = info.get("gap", {}).get("gap")
        rows.append([split, acc["rows_in"], acc["packed"], acc["truncated"], skipped, info["packs"],
                     f"{info['aligned_tokens'] / info['token_slots']:.2%}", "-" if gap is None else f"{gap:.4%}"])
    return "\n".join([
        f"{'reused' if result.reused else 'wrote'} {result.pack_dir}" + (f" (rebuilt: {result.rebuilt})" if result.rebuilt
                                                                     else ""),
        text_table(["split", "rows", "packed", "truncated", "skipped", "packs", "packing eff.", "gap"], rows),
        f"pad_seq_to_mult={_multiple_words(options)} pack_size={options.pack_size} algorithm={options.algorithm} "
        f"seed={options.seed} truncation={options.truncation}",
        f"tokenizer: {result.tokenizer}",
        glossary_line("packing efficiency"),
        *(f"warning: {w}" for w in result.warnings),
    ])


def _multiple_words(options: PackOptions) -> str:
    """``4 (given; required 4, recommended 8)`` or ``8 (recommended; required 4)`` for the offline path."""
    from seqpack.core.alignment import alignment_requirement

    topo = options.topology
    req = alignment_requirement("offline", topo.tp, topo.cp, topo.sp, topo.eval_cp, bridge_version=options.bridge_version)
    if options.pad_seq_to_mult is not None:
        return f"{options.multiple()} (given; required {req.required}, recommended {req.recommended})"
    return f"{options.multiple()} (recommended; required {req.required})"


#: MIME types of what a writing tool links to.
DIRECTORY, JSON, PARQUET = "inode/directory", "application/json", "application/vnd.apache.parquet"


def pack_links(data: dict[str, Any]) -> Iterable[tuple[str, str, str, str]]:
    """pack_dataset wrote: the pack directory, its manifest, its metadata file and the Parquet file of each split."""
    yield data["pack_dir"], "packs", "the fingerprinted pack directory", DIRECTORY
    yield data["manifest_path"], "manifest", "seqpack manifest: fingerprint, options, per-split accounting", JSON
    yield data["metadata_path"], "metadata", "pack metadata entries (Megatron-Bridge form)", JSON
    for split, path in sorted(data.get("files", {}).items()):
        yield path, f"{split} packs", f"packed Parquet of the {split} split", PARQUET


PACK = Verb(
    name="pack", options=PackOptions, function=pack, render=render_pack,
    help="pack rows (JSONL, Parquet, a datasets folder, or a blend manifest) offline into packed Parquet + metadata + "
         "manifest",
    tools=(Tool(
        "pack_dataset", title="Pack a JSONL dataset offline (writes packed Parquet)", writes=True, job=True,
        fixed={"distributed": False}, links=pack_links,
        description="""Tokenize, align, bin-pack and write packed Parquet + metadata + manifest (like `seqpack pack`).

Pass the model's tokenizer folder as tokenizer_path (tokenizer.json with tokenizer_config.json and
its chat template): chat rows are rendered with that template and lengths are the model's; without it
the byte tokenizer is used and the result's warnings say so. Chat rows: loss_mode assistant (every
assistant turn, default), last_turn or full; reasoning train or mask; truncation oldest_turns drops a
long chat's oldest exchanges (system prompt and last answer kept); on_template_error skip counts rows
the template refuses instead of stopping. pad_seq_to_mult is the recommended value for tp/cp/sp/eval_cp
unless given; a given value must be a multiple of what context parallelism requires (2*CP).
bridge_version main refuses a non-empty completion left without a supervised token (PR #5737).
The packs go to pack_dir, a fingerprinted folder inside output_dir (root: the same, deprecated): the
same call again reuses it. Every input row is accounted for per split (packed, truncated, skipped by
reason).""",
    ),),
)

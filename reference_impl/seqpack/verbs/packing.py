"""``pack``: offline packing of JSONL (or a blend) into packed Parquet + metadata + manifest."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.choices import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    LOSS_MODES,
    REASONING_POLICIES,
    SCHEMA_OPTIONS,
    TRUNCATION_MODES,
)
from seqpack.core.limits import (
    MAX_BLEND_SAMPLES,
    MAX_PACK_LEN,
    MAX_PAD_SEQ_TO_MULT,
    MAX_SEQS_PER_PACK,
    MAX_WORKERS,
)
from seqpack.core.reports import PreparedPacks
from seqpack.verbs.common import AlignedOptions, check_choice, check_path, check_seed

__all__ = ["PackOptions", "pack"]


@dataclass(frozen=True, kw_only=True)
class PackOptions(AlignedOptions):
    """Inputs (``input``: JSONL or blend manifest, optional ``validation`` JSONL), output root,
    pack size, the topology (or an explicit ``pad_seq_to_mult``) and every packing setting.

    ``pad_seq_length_to_mult`` overrides the pre-padding multiple (a multiple of the alignment,
    capped at the per-sample cap, as in Megatron-Bridge); ``metadata_path`` also appends the
    metadata entries to that JSON array file; ``distributed`` runs on the ranks of a ``torchrun``
    job (``None``: detected from the environment)."""

    input: str | os.PathLike[str] | Mapping[str, Any]
    out: str | os.PathLike[str]
    pack_size: int
    validation: str | os.PathLike[str] | None = None
    max_seq_length: int | None = None
    schema: str = "auto"
    prompt_column: str = "prompt"
    completion_column: str = "completion"
    loss_mode: str | None = None
    reasoning: str | None = None
    tokenizer: Any = None
    truncation: str = "right"
    algorithm: str = DEFAULT_ALGORITHM
    seed: int = 1234
    max_seqs_per_pack: int | None = None
    bridge_compat: bool = False
    num_samples: int | None = None
    pad_seq_length_to_mult: int | None = None
    metadata_path: str | os.PathLike[str] | None = None
    workers: int = 1
    distributed: bool | None = None
    overwrite: bool = False
    progress: bool = False


def pack(options: PackOptions) -> PreparedPacks:
    """Tokenize, align, bin-pack and write the packs (:func:`seqpack.packing.offline.prepare.prepare_packed_dataset`).

    ``pad_seq_to_mult`` comes from the topology unless given, and an explicit value must be a
    multiple of the derived one (rule ``PACK-OFFLINE-PAD-MULT-TOPOLOGY``): the CLI and the MCP
    tool refuse the same packs.
    """
    from seqpack.data.schemas import schema_from_options
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    multiple = options.multiple()
    check_choice("schema", options.schema, SCHEMA_OPTIONS)
    check_choice("loss_mode", options.loss_mode, LOSS_MODES, allow_none=True)
    check_choice("reasoning", options.reasoning, REASONING_POLICIES, allow_none=True)
    check_choice("truncation", options.truncation, TRUNCATION_MODES)
    check_choice("algorithm", options.algorithm, ALGORITHMS)
    if not isinstance(options.input, Mapping):
        check_path("input", options.input)
    check_path("out", options.out)
    inputs: Any = options.input
    if options.metadata_path is not None:
        check_path("metadata_path", options.metadata_path)
    if options.validation is not None:
        inputs = {"training": os.fspath(check_path("input", options.input)),
                  "validation": os.fspath(check_path("validation", options.validation))}
    return prepare_packed_dataset(
        inputs,
        options.out,
        pack_size=positive_int("pack_size", options.pack_size, maximum=MAX_PACK_LEN),
        pad_seq_to_mult=multiple,
        max_seq_length=positive_int("max_seq_length", options.max_seq_length, allow_none=True, maximum=MAX_PACK_LEN),
        schema=schema_from_options(options.schema, prompt_column=options.prompt_column,
                                   completion_column=options.completion_column, loss_mode=options.loss_mode,
                                   reasoning=options.reasoning),
        tokenizer=options.tokenizer,
        truncation=options.truncation,
        algorithm=options.algorithm,
        seed=check_seed(options.seed),
        max_seqs_per_pack=positive_int("max_seqs_per_pack", options.max_seqs_per_pack, allow_none=True,
                                       maximum=MAX_SEQS_PER_PACK),
        bridge_compat=options.bridge_compat,
        num_samples=positive_int("num_samples", options.num_samples, allow_none=True, maximum=MAX_BLEND_SAMPLES),
        pad_seq_length_to_mult=positive_int("pad_seq_length_to_mult", options.pad_seq_length_to_mult, allow_none=True,
                                            maximum=MAX_PAD_SEQ_TO_MULT),
        metadata_path=options.metadata_path,
        num_workers=positive_int("workers", options.workers, maximum=MAX_WORKERS),
        distributed=options.distributed,
        overwrite=options.overwrite,
        progress=options.progress,
    )

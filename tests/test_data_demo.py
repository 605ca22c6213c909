"""Shipped demo datasets: reproducible byte for byte, lengths exactly as drawn, all rows usable."""

from __future__ import annotations

import numpy as np
import pytest

from seqpack.data.demo import (
    DEMO_MIXES,
    DEMO_ROWS,
    DEMO_SCHEMAS,
    DEMO_SEEDS,
    MAX_LEN,
    MIN_LEN,
    WORDS_BY_LEN,
    demo_path,
    generate_rows,
    write_demo_files,
)
from seqpack.data.jsonl import JsonlFile
from seqpack.data.length_mixes import sample_lengths
from seqpack.data.schemas import default_schema, detect_schema
from seqpack.data.tokenize import tokenize_row
from seqpack.data.tokenizers import ByteTokenizer
from seqpack.core.errors import UsageError


def test_regenerated_files_are_byte_identical_to_the_shipped_ones(tmp_path):
    written = write_demo_files(tmp_path)
    for schema in DEMO_SCHEMAS:
        shipped = demo_path(schema)
        assert shipped.is_file(), f"missing shipped demo file {shipped}"
        assert written[schema].read_bytes() == shipped.read_bytes(), f"regenerate with python -m seqpack.data.demo"


@pytest.mark.parametrize("schema", DEMO_SCHEMAS)
def test_demo_rows_tokenize_to_exactly_the_drawn_lengths(schema, tmp_path):
    f = JsonlFile(demo_path(schema), cache_dir=tmp_path)
    assert len(f) == DEMO_ROWS
    expected = sample_lengths(DEMO_MIXES[schema], DEMO_ROWS, seed=DEMO_SEEDS[schema], min_len=MIN_LEN, max_len=MAX_LEN)
    tok = ByteTokenizer()
    got, ids, non_ascii = [], set(), 0
    for i in range(len(f)):
        row = f.row(i)
        assert detect_schema(row) == schema
        sample = tokenize_row(row, default_schema(schema), tok, max_length=MAX_LEN, location=f.location(i))
        assert not sample.truncated and sample.num_supervised > 0
        got.append(sample.num_tokens)
        ids.add(row["id"])
        non_ascii += any(b >= 0x80 for b in f.raw(i))
    assert np.array_equal(np.array(got), expected)
    assert len(ids) == DEMO_ROWS
    assert 10 <= non_ascii <= 200  # about 2 % of the rows carry special characters


def test_demo_sizes_and_shape():
    for schema in DEMO_SCHEMAS:
        assert 0.8e6 <= demo_path(schema).stat().st_size <= 2.2e6
    lengths = sample_lengths("lognormal", DEMO_ROWS, seed=DEMO_SEEDS["prompt_completion"], min_len=MIN_LEN, max_len=MAX_LEN)
    assert np.median(lengths) < np.mean(lengths) < np.percentile(lengths, 90)  # right-skewed (heavy tail)
    chat = generate_rows("chat", 50)
    assert all(m["role"] in ("system", "user", "assistant") for r in chat for m in r["messages"])
    assert all(r["messages"][-1]["role"] == "assistant" for r in chat)


def test_generation_is_seeded_and_word_table_is_consistent():
    assert generate_rows("chat", 20, seed=5) == generate_rows("chat", 20, seed=5)
    assert generate_rows("chat", 20, seed=5) != generate_rows("chat", 20, seed=6)
    assert all(len(w) == n for n, words in WORDS_BY_LEN.items() for w in words)
    assert sorted(WORDS_BY_LEN) == list(range(1, 13))


def test_unknown_demo_schema():
    with pytest.raises(UsageError):
        demo_path("legacy")
    with pytest.raises(UsageError):
        generate_rows("legacy")

"""Offline packed SFT pipeline: accounting, integrity, determinism, fingerprints, bad input."""

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import ByteTokenizer, PromptCompletionSchema, demo_path, tokenize_row
from seqpack.data.jsonl import JsonlFile
from seqpack.core.errors import ArtifactError, InputError, UsageError
from seqpack.packing.offline.prepare import MANIFEST_NAME, prepare_packed_dataset
from seqpack.packing.packed_dataset import PackedParquetDataset
from seqpack.packing.parquet import PackedParquetReader

TOK = ByteTokenizer()


def _rows(n, seed=0, max_words=40):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "pack", "token", "sequence", "x"]
    out = []
    for i in range(n):
        p = " ".join(rng.choice(words, rng.integers(1, max_words)))
        c = " ".join(rng.choice(words, rng.integers(1, max_words)))
        out.append({"prompt": f"{i}: {p}", "completion": c})
    return out


def _segments(reader):
    """Every stored segment (as a tuple of ids) across the artifact."""
    segs = []
    for _, row in reader.iter_rows():
        bounds = np.append(row["seq_start_id"], row["input_ids"].size)
        for s, e in zip(bounds[:-1], bounds[1:]):
            segs.append(row["input_ids"][s:e])
    return segs


def test_demo_prompt_completion_accounts_for_every_row(tmp_path):
    res = prepare_packed_dataset(demo_path("prompt_completion"), tmp_path / "out", pack_size=4096, pad_seq_to_mult=4)
    info = res.manifest["splits"]["training"]
    acc = info["accounting"]
    assert acc["rows_in"] == len(JsonlFile(demo_path("prompt_completion")))
    assert acc["rows_in"] == acc["packed"] + acc["skipped_total"]
    reader = PackedParquetReader(res.files["training"])
    assert len(reader) == info["packs"]
    segs = _segments(reader)
    assert len(segs) == acc["packed"]
    assert all((len(s) - 1) % 4 == 0 for s in segs)
    for _, row in reader.iter_rows():
        runtime = row["input_ids"].size - row["seq_start_id"].size
        assert runtime <= 4096
    meta = json.loads(res.metadata_path.read_text())
    assert list(meta[0]) == ["dataset_max_seqlen", "max_samples_per_bin", "packing_factor", "packing_efficiency",
                             "pack_size", "min_packed_seqlen"]
    assert meta[0]["pack_size"] == 4096
    assert meta[0]["max_samples_per_bin"] == max(r["seq_start_id"].size for _, r in reader.iter_rows())


def test_every_sample_packed_exactly_once_with_its_loss(write_jsonl, tmp_path):
    rows = _rows(300)
    path = write_jsonl(rows)
    res = prepare_packed_dataset(path, tmp_path / "out", pack_size=256, pad_seq_to_mult=8, seed=3)
    schema = PromptCompletionSchema()
    expected = Counter()
    supervised = 0
    for row in rows:
        sample = tokenize_row(row, schema, TOK, max_length=257)
        ids = sample.input_ids.tolist()
        r = len(ids) - 1
        pad = -(-r // 8) * 8 - r
        expected[tuple(ids + [TOK.eos_id] * pad)] += 1
        supervised += int(sample.loss_mask[1:].sum())
    got = Counter(tuple(s.tolist()) for s in _segments(PackedParquetReader(res.files["training"])))
    assert got == expected
    ds = PackedParquetDataset(res.files["training"])
    total = sum(float(ds.collate([ds[i]])["loss_mask"].sum()) for i in range(len(ds)))
    assert total == supervised


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 120), min_size=1, max_size=60),
    m=st.sampled_from([1, 2, 4, 8]),
    algorithm=st.sampled_from(["best_fit_decreasing", "first_fit_decreasing", "first_fit_shuffle", "next_fit"]),
)
def test_property_no_pack_over_capacity_and_nothing_lost(tmp_path_factory, lengths, m, algorithm):
    tmp = tmp_path_factory.mktemp("p")
    path = tmp / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": "p", "completion": "c" * n}) + "\n" for n in lengths))
    res = prepare_packed_dataset(path, tmp / "out", pack_size=128, pad_seq_to_mult=m, algorithm=algorithm)
    acc = res.manifest["splits"]["training"]["accounting"]
    assert acc["packed"] + acc["skipped_total"] == len(lengths)
    reader = PackedParquetReader(res.files["training"])
    n_segments = 0
    for _, row in reader.iter_rows():
        assert row["input_ids"].size - row["seq_start_id"].size <= 128
        n_segments += row["seq_start_id"].size
    assert n_segments == acc["packed"]
    assert acc["truncated"] == sum(1 for n in lengths if n + 3 > (128 // m) * m + 1)


def test_byte_identical_output_for_same_inputs_and_seed(write_jsonl, tmp_path):
    path = write_jsonl(_rows(120))
    a = prepare_packed_dataset(path, tmp_path / "a", pack_size=256, seed=7)
    b = prepare_packed_dataset(path, tmp_path / "b", pack_size=256, seed=7)
    assert a.root.name == b.root.name
    for name in ("training_256.idx.parquet", "256_metadata.jsonl", MANIFEST_NAME):
        assert (a.root / name).read_bytes() == (b.root / name).read_bytes()


def test_changed_option_writes_a_fresh_root_and_same_options_reuse(write_jsonl, tmp_path):
    path = write_jsonl(_rows(50))
    out = tmp_path / "out"
    base = prepare_packed_dataset(path, out, pack_size=256)
    assert base.reused is False
    again = prepare_packed_dataset(path, out, pack_size=256)
    assert again.reused is True and again.root == base.root
    roots = {base.root}
    for change in ({"pad_seq_to_mult": 4}, {"seed": 2}, {"algorithm": "first_fit_decreasing"}, {"pack_size": 512},
                   {"schema": PromptCompletionSchema(loss_mode="full")}, {"max_seq_length": 128}):
        res = prepare_packed_dataset(path, out, **{"pack_size": 256, **change})
        assert res.root not in roots, change
        roots.add(res.root)
    path.write_text(path.read_text() + json.dumps({"prompt": "new", "completion": "row"}) + "\n")
    changed_input = prepare_packed_dataset(path, out, pack_size=256)
    assert changed_input.root not in roots


def test_failure_leaves_nothing_behind(write_jsonl, tmp_path):
    path = write_jsonl([{"prompt": "a", "completion": "b"}, '{"prompt": "broken"'], name="bad.jsonl")
    out = tmp_path / "out"
    with pytest.raises(InputError) as info:
        prepare_packed_dataset(path, out, pack_size=64)
    assert info.value.line == 2 and str(path) in str(info.value)
    assert not out.exists() or list(out.iterdir()) == []


GOOD = {"prompt": "ok", "completion": "fine"}


@pytest.mark.parametrize(
    "rows, line, fragment, field",
    [
        ([GOOD, GOOD, {"prompt": "a", "completion": 3}], 3, "must be a string", "completion"),
        ([GOOD, {"prompt": "a"}], 2, "missing field 'completion'", "completion"),
        ([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}], 1, "content",
         "messages[1].content"),
        (["not json at all"], 1, "JSON", None),
        ([GOOD, "[1, 2]"], 2, "JSON object", None),
    ],
)
def test_bad_rows_name_file_line_field(write_jsonl, tmp_path, rows, line, fragment, field):
    path = write_jsonl(rows)
    with pytest.raises(InputError) as info:
        prepare_packed_dataset(path, tmp_path / "out", pack_size=64)
    err = info.value
    assert fragment in str(err)
    assert err.file == str(path) and err.line == line
    if field:
        assert err.field == field or field in str(err)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_empty_and_non_utf8_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match="no rows"):
        prepare_packed_dataset(empty, tmp_path / "o", pack_size=64)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"prompt": "a", "completion": "b"}\n{"prompt": "\xff", "completion": "x"}\n')
    with pytest.raises(InputError) as info:
        prepare_packed_dataset(binary, tmp_path / "o", pack_size=64)
    assert info.value.line == 2 and "UTF-8" in str(info.value)


def test_empty_completions_are_skipped_and_counted(write_jsonl, tmp_path):
    rows = [{"prompt": "p", "completion": "c"}, {"prompt": "p", "completion": "  "}, {"prompt": "q", "completion": "d"}]
    res = prepare_packed_dataset(write_jsonl(rows), tmp_path / "o", pack_size=64)
    acc = res.manifest["splits"]["training"]["accounting"]
    assert acc["packed"] == 2 and acc["skipped"]["empty_completion"]["count"] == 1
    assert acc["skipped"]["empty_completion"]["examples"][0]["line"] == 2


def test_long_samples_truncated_or_rejected_never_dropped(write_jsonl, tmp_path):
    rows = [{"prompt": "p", "completion": "x" * 500}, {"prompt": "p", "completion": "short"}]
    path = write_jsonl(rows)
    res = prepare_packed_dataset(path, tmp_path / "o", pack_size=64, pad_seq_to_mult=8)
    acc = res.manifest["splits"]["training"]["accounting"]
    assert (acc["packed"], acc["truncated"]) == (2, 1)
    segs = _segments(PackedParquetReader(res.files["training"]))
    assert max(len(s) for s in segs) == 65
    res = prepare_packed_dataset(path, tmp_path / "o2", pack_size=64, truncation="reject")
    acc = res.manifest["splits"]["training"]["accounting"]
    assert acc["packed"] == 1 and acc["skipped"]["too_long"]["count"] == 1


def test_only_rejected_rows_is_an_error(write_jsonl, tmp_path):
    with pytest.raises(InputError, match="no usable sample"):
        prepare_packed_dataset(write_jsonl([{"prompt": "p", "completion": ""}]), tmp_path / "o", pack_size=64)


def test_option_errors_cite_rules(write_jsonl, tmp_path):
    path = write_jsonl(_rows(5))
    with pytest.raises(UsageError) as info:
        prepare_packed_dataset(path, tmp_path / "o", pack_size=64, max_seq_length=128)
    assert info.value.rule_id == "PACK-OFFLINE-MAX-SINGLE-LE-PACK"
    with pytest.raises(UsageError) as info:
        prepare_packed_dataset(path, tmp_path / "o", pack_size=66, pad_seq_to_mult=4)
    assert info.value.rule_id == "PACK-OFFLINE-WIDTH-ALIGNED"


def test_existing_foreign_directory_is_not_overwritten(write_jsonl, tmp_path):
    path = write_jsonl(_rows(5))
    res = prepare_packed_dataset(path, tmp_path / "o", pack_size=64)
    (res.root / MANIFEST_NAME).write_text("{}")
    before = sorted(p.name for p in res.root.iterdir())
    with pytest.raises(ArtifactError, match="cannot tell that it wrote"):
        prepare_packed_dataset(path, tmp_path / "o", pack_size=64)
    # --overwrite replaces only what seqpack wrote: a foreign manifest keeps the directory as it is
    with pytest.raises(ArtifactError, match="cannot tell that it wrote"):
        prepare_packed_dataset(path, tmp_path / "o", pack_size=64, overwrite=True)
    assert sorted(p.name for p in res.root.iterdir()) == before and (res.root / MANIFEST_NAME).read_text() == "{}"


@pytest.mark.slow  # worker processes
def test_chat_demo_and_workers_match_serial(tmp_path):
    serial = prepare_packed_dataset(demo_path("chat"), tmp_path / "s", pack_size=4096, pad_seq_to_mult=2)
    parallel = prepare_packed_dataset(demo_path("chat"), tmp_path / "p", pack_size=4096, pad_seq_to_mult=2, num_workers=2)
    assert serial.files["training"].read_bytes() == parallel.files["training"].read_bytes()
    assert serial.manifest["schema"]["type"] == "ChatSchema"


def test_bridge_compat_reproduces_bridge_sample_bins(write_jsonl, tmp_path):
    from seqpack.packing.offline.bridge_compat import bridge_pack_samples

    rows = _rows(80, seed=5, max_words=12)
    path = write_jsonl(rows)
    res = prepare_packed_dataset(path, tmp_path / "o", pack_size=128, algorithm="first_fit_shuffle",
                                 bridge_compat=True, seed=1234)
    # with pad_seq_to_mult=1 Bridge's budget is pack_size stored ids (pack_size - 1 runtime tokens)
    runtime = [len(tokenize_row(r, PromptCompletionSchema(), TOK, max_length=128).input_ids) - 1 for r in rows]
    assert max(runtime) == 127  # some rows were cut to Bridge's budget
    expected = bridge_pack_samples(runtime, 128, seed=1234, algorithm="first_fit_shuffle")
    reader = PackedParquetReader(res.files["training"])
    assert len(reader) == len(expected.sample_bins)
    for (_, row), bin_ in zip(reader.iter_rows(), expected.sample_bins):
        lens = np.diff(np.append(row["seq_start_id"], row["input_ids"].size)) - 1
        assert lens.tolist() == [runtime[i] for i in bin_]
    meta = json.loads(res.metadata_path.read_text())[0]
    assert meta == expected.metadata


def test_train_and_validation_splits(write_jsonl, tmp_path):
    train = write_jsonl(_rows(40), name="train.jsonl")
    val = write_jsonl(_rows(10, seed=9), name="val.jsonl")
    res = prepare_packed_dataset({"training": train, "validation": val}, tmp_path / "o", pack_size=256)
    assert set(res.files) == {"training", "validation"}
    meta = json.loads(res.metadata_path.read_text())
    assert len(meta) == 2


def test_blend_manifest_weights_and_no_concatenated_copy(write_jsonl, tmp_path):
    a = write_jsonl(_rows(30, seed=1), name="a.jsonl")
    b = write_jsonl(_rows(10, seed=2), name="b.jsonl")
    manifest = tmp_path / "blend.json"
    manifest.write_text(json.dumps([0.75, "a.jsonl", 0.25, "b.jsonl"]))
    res = prepare_packed_dataset(manifest, tmp_path / "o", pack_size=256, num_samples=40)
    sources = res.manifest["splits"]["training"]["sources"]
    assert [s["drawn"] for s in sources] == [30, 10]
    assert res.manifest["splits"]["training"]["accounting"]["rows_in"] == 40
    res2 = prepare_packed_dataset(manifest, tmp_path / "o", pack_size=256, num_samples=80)
    assert [s["drawn"] for s in res2.manifest["splits"]["training"]["sources"]] == [60, 20]
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["a.jsonl", "b.jsonl"]


def test_blend_manifest_errors(tmp_path):
    bad = tmp_path / "blend.json"
    bad.write_text(json.dumps([0.5, "a.jsonl", "b.jsonl"]))
    with pytest.raises(InputError, match="alternating"):
        prepare_packed_dataset(bad, tmp_path / "o", pack_size=64)
    bad.write_text(json.dumps([-1, "a.jsonl"]))
    with pytest.raises(InputError, match="positive number"):
        prepare_packed_dataset(bad, tmp_path / "o", pack_size=64)


def test_sample_lengths_matches_the_pipeline(write_jsonl, tmp_path):
    from seqpack.packing.offline.prepare import sample_lengths

    rows = _rows(60) + [{"prompt": "p", "completion": ""}]
    path = write_jsonl(rows)
    got = sample_lengths(path, max_seq_length=128)
    assert got.account["rows_in"] == 61 and got.account["skipped"]["empty_completion"]["count"] == 1
    expected = [len(tokenize_row(r, PromptCompletionSchema(), TOK, max_length=129).input_ids) - 1 for r in rows[:60]]
    assert got.lengths.tolist() == expected
    res = prepare_packed_dataset(path, tmp_path / "o", pack_size=128)
    assert res.manifest["splits"]["training"]["aligned_tokens"] == int(got.lengths.sum())

"""Parquet files and ``datasets.save_to_disk`` folders as inputs: the same packs as the JSONL of the same rows.

Every test writes the JSONL twin and the columnar inputs from the same Python rows (Parquet with pyarrow,
the folder with the real ``datasets`` package, as users make them) and compares the packed Parquet and
metadata bytes; bad rows must fail with the same one-line error (the location says ``row N`` where
JSONL says ``line:row``).
"""

from __future__ import annotations

import filecmp
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from seqpack.core.errors import InputError, SeqpackError, UsageError
from seqpack.data import demo_path
from seqpack.data.rows import ArrowRows, ParquetRows, input_kind, open_rows
from seqpack.packing.offline.prepare import prepare_packed_dataset, sample_lengths

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

ROOT = Path(__file__).resolve().parent.parent
QWEN3 = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR", ROOT / ".seqpack-cache" / "tokenizers")) / "qwen3"


def _rows(kind: str, n: int = 2000) -> list[dict]:
    return [json.loads(line) for line in demo_path(kind).read_text().splitlines()[:n] if line.strip()]


def _twins(tmp_path: Path, rows: list[dict], *, row_group_size: int = 300) -> dict[str, Path]:
    """The same rows as JSONL, Parquet (several row groups) and a save_to_disk folder (two shards)."""
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = datasets.Dataset.from_list(rows).data.table  # the schema unified over every row, as datasets makes it
    parquet = tmp_path / "rows.parquet"
    pq.write_table(table, parquet, row_group_size=row_group_size)
    folder = tmp_path / "rows_ds"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder), num_shards=2)
    return {"jsonl": jsonl, "parquet": parquet, "dataset": folder}


def _pack(inputs, out: Path, **kw):
    kw.setdefault("pack_size", 4096)
    kw.setdefault("pad_seq_to_mult", 4)
    return prepare_packed_dataset(inputs, out, **kw)


def _assert_same_packs(results: dict) -> None:
    ref = results["jsonl"]
    for name, res in results.items():
        for split, path in ref.files.items():
            assert filecmp.cmp(path, res.files[split], shallow=False), (name, split)
        assert ref.metadata_path.read_bytes() == res.metadata_path.read_bytes(), name
        assert ref.manifest["splits"]["training"]["accounting"]["rows_in"] == \
            res.manifest["splits"]["training"]["accounting"]["rows_in"]


@pytest.mark.parametrize("kind", ["prompt_completion", "chat"])
def test_demo_rows_pack_identically_from_every_format(tmp_path, kind):
    paths = _twins(tmp_path, _rows(kind, 2000 if kind == "prompt_completion" else 600))
    assert {input_kind(p) for p in paths.values()} == {"jsonl", "parquet", "dataset"}
    results = {name: _pack(p, tmp_path / f"out_{name}") for name, p in paths.items()}
    _assert_same_packs(results)
    # the manifest names the input it read, and its hash covers the content (not the JSONL's)
    assert results["parquet"].manifest["splits"]["training"]["sources"][0]["path"] == str(paths["parquet"])
    assert results["parquet"].root.name != results["jsonl"].root.name


def test_a_changed_row_changes_the_packs(tmp_path):
    """Negative control of the comparison: one completion changed in the Parquet twin."""
    rows = _rows("prompt_completion")
    paths = _twins(tmp_path, rows)
    changed = [dict(r) for r in rows]
    changed[7]["completion"] += " and one more word"
    pq.write_table(pa.Table.from_pylist(changed), tmp_path / "changed.parquet")
    a = _pack(paths["jsonl"], tmp_path / "a")
    b = _pack(tmp_path / "changed.parquet", tmp_path / "b")
    assert not filecmp.cmp(a.files["training"], b.files["training"], shallow=False)


def test_blend_over_formats_reads_random_rows_identically(tmp_path):
    """A blend draws rows in a seeded random order: Parquet row groups and Arrow batches are read backwards too."""
    rows = _rows("prompt_completion")
    paths = _twins(tmp_path, rows, row_group_size=97)
    (tmp_path / "half").mkdir()
    half = _twins(tmp_path / "half", rows[:500])
    results = {}
    for name in paths:
        blend = tmp_path / f"blend_{name}.json"
        blend.write_text(json.dumps([0.7, str(paths[name]), 0.3, str(half[name])]))
        results[name] = _pack(blend, tmp_path / f"out_{name}", num_samples=2500)
    _assert_same_packs(results)


def test_dataset_dict_folder_packs_its_splits(tmp_path):
    rows = _rows("prompt_completion")
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:1500]),
                               "validation": datasets.Dataset.from_list(rows[1500:])})
    dd.save_to_disk(str(tmp_path / "dd"))
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:1500]))
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1500:]))
    got = _pack(tmp_path / "dd", tmp_path / "o1")
    want = _pack({"training": tmp_path / "train.jsonl", "validation": tmp_path / "val.jsonl"}, tmp_path / "o2")
    assert sorted(got.files) == ["training", "validation"]
    _assert_same_packs({"jsonl": want, "dd": got})
    with pytest.raises(InputError, match="several splits"):
        open_rows(tmp_path / "dd")


def test_dataset_dict_with_an_unknown_split_is_refused(tmp_path):
    rows = _rows("prompt_completion")[:20]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                         "extra": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(UsageError, match="'extra' is not a split"):
        _pack(tmp_path / "dd", tmp_path / "o")


BAD_ROWS = [
    ({"prompt": "a", "completion": None}, "field must be a string"),
    ({"prompt": None, "completion": "x"}, "field must be a string"),
    ({"prompt": "a", "completion": "x", "images": ["a.png"]}, "the row carries images"),
]


@pytest.mark.parametrize("bad,message", BAD_ROWS)
def test_bad_rows_fail_with_the_same_line(tmp_path, bad, message):
    rows = [{"prompt": f"p{i}", "completion": f"c{i} words", "images": None} for i in range(10)]
    rows.insert(3, {"images": None, **bad})
    paths = _twins(tmp_path, rows, row_group_size=4)
    errors = {}
    for name, p in paths.items():
        with pytest.raises(SeqpackError) as info:
            _pack(p, tmp_path / f"o_{name}", pack_size=256)
        errors[name] = info.value
    for name, err in errors.items():
        assert message in err.message and err.row == 3 and err.file == str(paths[name]), (name, str(err))
        assert err.message == errors["jsonl"].message and err.field == errors["jsonl"].field
        assert "\n" not in str(err)
    assert errors["jsonl"].line == 4 and errors["parquet"].line is None
    assert str(errors["parquet"]).startswith(f"{paths['parquet']}, row 3")


def test_skipped_rows_are_accounted_the_same(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": "" if i % 5 == 0 else f"c{i}"} for i in range(40)]
    paths = _twins(tmp_path, rows, row_group_size=7)
    results = {name: _pack(p, tmp_path / f"o_{name}", pack_size=256) for name, p in paths.items()}
    _assert_same_packs(results)
    skipped = results["parquet"].manifest["splits"]["training"]["accounting"]["skipped"]["empty_completion"]
    assert skipped["count"] == 8 and skipped["examples"][1] == {"file": str(paths["parquet"]), "line": None, "row": 5}


def test_nested_nulls_read_as_absent_keys(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
            {"messages": [{"role": "user", "content": "q"},
                          {"role": "assistant", "content": "a", "reasoning_content": "think"}]}]
    paths = _twins(tmp_path, rows)
    for name in ("parquet", "dataset"):
        with open_rows(paths[name]) as src:
            assert src.rows([0, 1]) == rows and src.row(-1) == rows[1]
            assert src.location(1).to_dict() == {"file": str(paths[name]), "line": None, "row": 1}


def test_parquet_rows_in_any_order(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(5000)]
    paths = _twins(tmp_path, rows, row_group_size=1500)
    order = [4999, 0, 2500, 2499, 1500, 1499, 3000, 3000, 17]
    for reader in (ParquetRows(paths["parquet"]), ArrowRows(paths["dataset"])):
        assert reader.rows(order) == [rows[i] for i in order]
        assert reader.rows(range(1000, 3100)) == rows[1000:3100]
        with pytest.raises(IndexError):
            reader.row(5000)
        reader.close()


def test_damaged_and_empty_inputs_are_input_errors(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        open_rows(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    with pytest.raises(InputError, match="has no rows"):
        open_rows(tmp_path / "empty.parquet")
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="neither"):
        open_rows(tmp_path / "plain")
    folder = tmp_path / "ds"
    datasets.Dataset.from_list([{"prompt": "a", "completion": "b"}]).save_to_disk(str(folder))
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": "../escape.arrow"}]
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(InputError, match="no plain file name"):
        open_rows(folder)


def test_plan_lengths_from_parquet_equal_jsonl(tmp_path):
    paths = _twins(tmp_path, _rows("chat", 400))
    got = {name: sample_lengths(p, max_seq_length=4096) for name, p in paths.items()}
    for name in ("parquet", "dataset"):
        assert got[name].lengths.tolist() == got["jsonl"].lengths.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["in-batch", "global-batch"])
def test_batches_of_parquet_equal_jsonl(tmp_path, mode):
    pytest.importorskip("torch")
    from seqpack.verbs.batch_views import BatchesOptions, batches

    paths = _twins(tmp_path, _rows("prompt_completion", 200))
    reports = {name: batches(BatchesOptions(input=p, mode=mode, seq_length=1024)).to_dict()
               for name, p in paths.items()}
    for name in ("parquet", "dataset"):
        got = json.dumps(reports[name]).replace(str(paths[name]), "INPUT")
        assert got == json.dumps(reports["jsonl"]).replace(str(paths["jsonl"]), "INPUT"), name


@pytest.mark.slow
def test_qwen3_chat_with_tools_and_reasoning_packs_identically(tmp_path):
    """Heterogeneous chat rows (tools with nested schemas, tool calls, reasoning) with a real tokenizer: Arrow
    fills every struct with every field, which must not reach the chat template."""
    if not (QWEN3 / "tokenizer.json").is_file():
        pytest.skip("real tokenizer bundle 'qwen3' absent: run scripts/fetch_tokenizers.py")
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    other = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "description": "first"}, "b": {"type": "integer"}}}}}
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    rows = []
    for i in range(60):
        msgs = [{"role": "user", "content": f"question {i}"}]
        if i % 3 == 0:
            msgs += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "get_weather"}]
        msgs.append({"role": "assistant", "content": f"answer {i}",
                     **({"reasoning_content": f"because {i}"} if i % 2 else {})})
        rows.append({"messages": msgs, **({"tools": [tool, other]} if i % 3 == 0 else {})})
    paths = _twins(tmp_path, rows)
    results = {name: _pack(p, tmp_path / f"o_{name}", tokenizer=str(QWEN3)) for name, p in paths.items()}
    _assert_same_packs(results)


def test_object_storage_uris_are_refused_under_allowed_roots(tmp_path):
    """Under the MCP server's roots no URI is readable (the Ray lane tests S3 itself, against moto)."""
    from seqpack.io.confine import OutsideRootsError, confined_to
    from seqpack.data.objects import is_uri, open_filesystem

    assert is_uri("s3://bucket/key") and not is_uri("/data/x.jsonl") and not is_uri("file:///data/x")
    assert not is_uri(tmp_path)
    with confined_to([tmp_path]), pytest.raises(OutsideRootsError, match="object storage"):
        open_filesystem("s3://bucket/key")
    with pytest.raises(UsageError, match="staging area"):
        from seqpack.data.objects import stage_input

        stage_input("s3://bucket/key")

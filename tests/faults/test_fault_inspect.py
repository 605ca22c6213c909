"""Faults in packed artifacts as inspect (and the Parquet reader) meets them.

Classes: split files deleted from a pack with a validation split; a stray Parquet file; token ids
outside the vocabulary (negative, too large); a missing or corrupt metadata file; a corrupt or
foreign manifest; a file whose bytes differ from the manifest; topology arguments of 0; a Parquet
file of random bytes; a damaged row group; columns of the wrong type.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults_helpers import digest

from seqpack.verbs import InspectOptions, PackOptions, inspect_packs, pack


@pytest.fixture
def packs(data, write, tmp_path) -> Path:
    """A pack with training and validation splits, copied to a directory the test may damage."""
    val = write("val.jsonl", "".join(data.read_text().splitlines(keepends=True)[:12]))
    result = pack(PackOptions(input=data, validation=val, out=tmp_path / "packs", pack_size=256))
    return result.root


def _issues(run_out: str) -> dict:
    report = json.loads(run_out)
    return {i["check"] for i in report["issues"]}, report


def test_a_clean_pack_is_ok(cli, packs):
    run = cli("inspect", packs, "--json")
    checks, report = _issues(run.out)
    assert run.code == 0 and report["ok"] and not checks and len(report["files"]) == 2


@pytest.mark.parametrize("victim", ["training_256.idx.parquet", "validation_256.idx.parquet"])
def test_a_deleted_split_file_is_an_issue(cli, packs, victim):
    (packs / victim).unlink()
    run = cli("inspect", packs, "--json")
    checks, report = _issues(run.out)
    assert run.code == 1 and not report["ok"] and "missing_file" in checks
    assert "integrity issues" in cli("inspect", packs).out


def test_rows_removed_from_a_split(cli, packs):
    import pyarrow.parquet as pq

    path = packs / "training_256.idx.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows // 3), path)  # two thirds of the training packs gone
    run = cli("inspect", packs, "--json")
    checks, report = _issues(run.out)
    assert run.code == 1 and "manifest" in checks
    assert any("packs for training" in i["message"] for i in report["issues"])
    assert cli("inspect", packs).out.splitlines()[-1] == "RESULT: integrity issues"


def test_a_stray_parquet_file_is_not_counted_as_data(cli, packs):
    clean = json.loads(cli("inspect", packs, "--json").out)
    (packs / "extra.parquet").write_bytes((packs / "validation_256.idx.parquet").read_bytes())
    run = cli("inspect", packs, "--json")
    checks, report = _issues(run.out)
    assert run.code == 1 and checks == {"stray_file"}
    assert report["stats"]["rows"] == clean["stats"]["rows"] and len(report["files"]) == 2


def test_bytes_that_differ_from_the_manifest(cli, packs):
    target = packs / "validation_256.idx.parquet"
    other = pack(PackOptions(input=packs.parent.parent / "in" / "val.jsonl", out=packs.parent.parent / "other",
                             pack_size=256, seed=7))
    target.write_bytes(other.files["training"].read_bytes())  # a valid Parquet file, but not this one
    checks, report = _issues(cli("inspect", packs, "--json").out)
    assert "manifest" in checks and any("SHA-256" in i["message"] for i in report["issues"])


@pytest.mark.parametrize("bad_id", [-5, 10**9])
def test_token_ids_outside_the_vocabulary(cli, packs, tmp_path, bad_id):
    import pyarrow.parquet as pq

    path = packs / "training_256.idx.parquet"
    table = pq.read_table(path).to_pylist()
    table[0]["input_ids"][1] = bad_id
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(path)), path)
    checks, report = _issues(cli("inspect", packs, "--json").out)
    assert "token_id" in checks and str(bad_id) in json.dumps(report["issues"])
    # a foreign artifact (no manifest, no vocabulary) still refuses a negative id
    if bad_id < 0:
        lone = tmp_path / "lone.idx.parquet"
        lone.write_bytes(path.read_bytes())
        checks, _ = _issues(cli("inspect", lone, "--json").out)
        assert "token_id" in checks


@pytest.mark.parametrize("content", [None, "{not json", '{"a": 1}', "[]"], ids=["missing", "corrupt", "object",
                                                                               "empty"])
def test_missing_or_corrupt_metadata(cli, packs, content):
    meta = packs / "256_metadata.jsonl"
    if content is None:
        meta.unlink()
    else:
        meta.write_text(content)
    run = cli("inspect", packs, "--json")
    checks, _ = _issues(run.out)
    assert run.code == 1 and "metadata" in checks


@pytest.mark.parametrize("content", ["{", '{"format": "other/1"}', "[1, 2]"])
def test_a_corrupt_or_foreign_manifest_is_an_issue(cli, packs, content):
    (packs / "seqpack_manifest.json").write_text(content)
    run = cli("inspect", packs, "--json")
    checks, report = _issues(run.out)
    assert run.code == 1 and "manifest" in checks and not report["settings"]["from_manifest"]


@pytest.mark.parametrize("flag", ["--tp", "--cp", "--eval-cp", "--pack-size"])
def test_topology_arguments_of_zero(cli, packs, flag):
    cli("inspect", packs, flag, 0).refused(flag.lstrip("-").replace("-", "_"), "positive integer")


def test_random_bytes_and_a_damaged_row_group(cli, packs, tmp_path):
    before = digest([packs])
    noise = tmp_path / "noise.idx.parquet"
    noise.write_bytes(bytes(range(256)) * 4)
    cli("inspect", noise).refused("noise.idx.parquet", "not a readable Parquet file")
    damaged = tmp_path / "damaged.idx.parquet"
    good = (packs / "training_256.idx.parquet").read_bytes()
    damaged.write_bytes(good[:4] + b"\xff" * (len(good) // 2) + good[4 + len(good) // 2:])
    cli("inspect", damaged).refused("damaged.idx.parquet")
    assert digest([packs]) == before


@pytest.mark.parametrize(
    "columns, needle",
    [
        ({"input_ids": [["a", "b"]], "loss_mask": [[0, 1]], "seq_start_id": [[0]]}, "list<element: string>"),
        ({"input_ids": [1], "loss_mask": [[0, 1]], "seq_start_id": [[0]]}, "type int64"),
        ({"input_ids": [[1.5, 2.0]], "loss_mask": [[0, 1]], "seq_start_id": [[0]]}, "list<element: double>"),
        ({"tokens": [[1, 2]]}, "missing required columns"),
    ],
    ids=["strings", "scalar", "floats", "foreign"],
)
def test_wrong_typed_parquet(cli, tmp_path, columns, needle):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "wt.idx.parquet"
    pq.write_table(pa.table(columns), path)
    cli("inspect", path).refused("wt.idx.parquet", needle)
    with pytest.raises(Exception, match=needle.split("<")[0]):
        inspect_packs(InspectOptions(path=path))

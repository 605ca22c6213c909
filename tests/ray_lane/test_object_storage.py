"""Inputs and outputs on object storage (``s3://``), against a local S3-compatible server (moto's server
mode, from PyPI, in the Ray lane's venv): the same packs as from and to local paths, with both engines."""

from __future__ import annotations

import filecmp
import json
import logging
import os
from pathlib import Path

import pytest

from seqpack.core.errors import InputError, UsageError
from seqpack.data import demo_path
from seqpack.packing.offline.prepare import prepare_packed_dataset

BUCKET = "seqpack-test"


@pytest.fixture(scope="module")
def s3(need):
    """A moto S3 server on a free local port, the AWS variables pointing at it, one bucket."""
    need("moto.server")
    boto3 = need("boto3")
    import moto.server as server_mod

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server logs every request

    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    yield client
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


def _put(client, local: Path, key: str) -> str:
    client.upload_file(str(local), BUCKET, key)
    return f"s3://{BUCKET}/{key}"


def _get(client, uri: str) -> bytes:
    key = uri.split(f"s3://{BUCKET}/", 1)[1]
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _keys(client, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def _pack(inputs, out, **kw):
    return prepare_packed_dataset(inputs, out, pack_size=2048, pad_seq_to_mult=8, row_group_size=7, **kw)


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_s3_in_local_out_gives_the_local_packs(s3, ray_cluster, tmp_path, engine):
    data = demo_path("chat")
    uri = _put(s3, data, f"in/{engine}/chat.jsonl")
    ref = _pack(data, tmp_path / "ref")
    got = _pack(uri, tmp_path / "got", engine=engine)
    assert got.root.name == ref.root.name  # the fingerprint reads content, not where it came from
    assert filecmp.cmp(ref.files["training"], got.files["training"], shallow=False)
    assert ref.metadata_path.read_bytes() == got.metadata_path.read_bytes()
    assert got.manifest["splits"]["training"]["sources"][0]["path"] == uri  # the URI, not the staged copy


def test_s3_in_and_out_with_ray_gives_the_local_packs_and_is_reused(s3, ray_cluster, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in demo_path("prompt_completion").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet", row_group_size=333)
    train = _put(s3, tmp_path / "rows.parquet", "in/rows.parquet")
    ref = _pack(demo_path("prompt_completion"), tmp_path / "ref")
    out = f"s3://{BUCKET}/packs"
    work = tmp_path / "work"
    work.mkdir()
    got = _pack(train, out, engine="ray", work_dir=work)
    assert str(got.root).startswith(out + "/") and not got.reused
    assert _get(s3, str(got.files["training"])) == ref.files["training"].read_bytes()
    assert _get(s3, str(got.metadata_path)) == ref.metadata_path.read_bytes()
    manifest = json.loads(_get(s3, str(got.manifest_path)))
    assert manifest["fingerprint"] == got.fingerprint and manifest["splits"]["training"]["gap"]["gap"] >= 0
    again = _pack(train, out, engine="local")
    assert again.reused and str(again.root) == str(got.root)
    assert not any(work.iterdir())  # the staged input and the local working root are gone


def test_a_bad_row_on_s3_names_the_uri_and_writes_nothing(s3, ray_cluster, tmp_path):
    lines = [json.dumps({"prompt": f"p{i}", "completion": f"c{i}"}) for i in range(300)]
    lines[120] = '{"prompt": 1'
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    uri = _put(s3, tmp_path / "bad.jsonl", "in/bad.jsonl")
    with pytest.raises(InputError) as info:
        _pack(uri, f"s3://{BUCKET}/bad-out", engine="ray")
    assert info.value.file == uri and info.value.line == 121
    assert _keys(s3, "bad-out") == []


def test_foreign_files_at_the_remote_target_are_refused(s3, tmp_path):
    ref = _pack(demo_path("prompt_completion"), tmp_path / "ref")
    s3.put_object(Bucket=BUCKET, Key=f"foreign/{ref.root.name}/notes.txt", Body=b"mine")
    with pytest.raises(UsageError, match="did not write"):
        _pack(str(demo_path("prompt_completion")), f"s3://{BUCKET}/foreign")
    assert _keys(s3, "foreign") == [f"foreign/{ref.root.name}/notes.txt"]

"""Offline options that follow Megatron-Bridge's preparation: the pre-padding override, EOD padding,
appending to a metadata file, and the distributed switch outside torchrun."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.faces.cli import main
from seqpack.data import ByteTokenizer
from seqpack.core.errors import ArtifactError, UsageError
from seqpack.packing.offline.bins import aligned_lengths
from seqpack.packing.offline.options import OfflinePackOptions
from seqpack.packing.offline.prepare import MANIFEST_NAME, append_metadata, prepare_packed_dataset
from seqpack.packing.parquet import PackedParquetReader


def _rows(n=80, seed=0):
    rng = np.random.default_rng(seed)
    return [{"prompt": "p" * int(rng.integers(1, 90)), "completion": "c" * int(rng.integers(1, 60))} for _ in range(n)]


def _segments(path):
    reader = PackedParquetReader(path)
    out = []
    for i in range(len(reader)):
        row = reader.row(i)
        bounds = [*row["seq_start_id"].tolist(), row["input_ids"].size]
        out += [b - a - 1 for a, b in zip(bounds, bounds[1:])]  # runtime length of each stored slot
    return out


def test_override_pads_to_its_multiple_capped_at_the_per_sample_cap():
    options = OfflinePackOptions(pack_size=64, pad_seq_to_mult=4, pad_seq_length_to_mult=16)
    assert aligned_lengths(np.array([1, 16, 17, 40, 60, 64]), options).tolist() == [16, 16, 32, 48, 64, 64]
    capped = OfflinePackOptions(pack_size=64, max_seq_length=50, pad_seq_to_mult=4, pad_seq_length_to_mult=32)
    assert capped.cap == 48 and aligned_lengths(np.array([3, 33, 48]), capped).tolist() == [32, 48, 48]
    plain = OfflinePackOptions(pack_size=64, pad_seq_to_mult=4)
    assert aligned_lengths(np.array([1, 16, 17]), plain).tolist() == [4, 16, 20]


def test_override_in_the_pipeline(write_jsonl, tmp_path):
    path = write_jsonl(_rows())
    res = prepare_packed_dataset(path, tmp_path / "o", pack_size=256, pad_seq_to_mult=4, pad_seq_length_to_mult=32)
    segments = _segments(res.files["training"])
    assert all(s % 32 == 0 or s == 256 for s in segments) and len(segments) == 80
    assert res.manifest["options"]["pad_seq_length_to_mult"] == 32
    plain = prepare_packed_dataset(path, tmp_path / "o", pack_size=256, pad_seq_to_mult=4)
    assert plain.root != res.root and "pad_seq_length_to_mult" not in plain.manifest["options"]
    assert any(s % 32 for s in _segments(plain.files["training"]))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"pad_seq_to_mult": 4, "pad_seq_length_to_mult": 6}, "not a multiple of pad_seq_to_mult=4"),
    ({"pad_seq_to_mult": 1, "pad_seq_length_to_mult": 8, "bridge_compat": True, "algorithm": "first_fit_shuffle"},
     "ignores pad_seq_length_to_mult"),
    ({"pad_seq_length_to_mult": 0}, "pad_seq_length_to_mult"),
])
def test_override_refusals(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        OfflinePackOptions(pack_size=64, **kwargs)


def test_unset_later_options_leave_the_fingerprint_payload_unchanged():
    options = OfflinePackOptions(pack_size=64)
    assert "pad_seq_length_to_mult" not in options.to_dict()
    assert OfflinePackOptions(pack_size=64, pad_seq_length_to_mult=8).to_dict()["pad_seq_length_to_mult"] == 8


class _EodTokenizer(ByteTokenizer):
    eod_id = ByteTokenizer.PAD


def test_pre_padding_uses_the_tokenizers_eod(write_jsonl, tmp_path):
    path = write_jsonl(_rows(30))
    eos = prepare_packed_dataset(path, tmp_path / "a", pack_size=128, pad_seq_to_mult=8)
    eod = prepare_packed_dataset(path, tmp_path / "b", pack_size=128, pad_seq_to_mult=8, tokenizer=_EodTokenizer())
    a, b = PackedParquetReader(eos.files["training"]), PackedParquetReader(eod.files["training"])
    ids_a = np.concatenate([a.row(i)["input_ids"] for i in range(len(a))])
    ids_b = np.concatenate([b.row(i)["input_ids"] for i in range(len(b))])
    assert ids_a.size == ids_b.size
    assert (ids_b == ByteTokenizer.PAD).sum() > 0 and (ids_a == ByteTokenizer.PAD).sum() == 0
    # the only difference: pre-padding positions hold EOD instead of EOS
    assert np.array_equal(np.where(ids_b == ByteTokenizer.PAD, ByteTokenizer.EOS, ids_b), ids_a)
    assert "eod_id" not in eos.manifest["tokenizer"] and eod.manifest["tokenizer"]["eod_id"] == ByteTokenizer.PAD


def test_metadata_is_appended_like_bridge(write_jsonl, tmp_path):
    path = write_jsonl(_rows(40))
    meta = tmp_path / "meta" / "packing_metadata.jsonl"
    first = prepare_packed_dataset(path, tmp_path / "o", pack_size=128, metadata_path=meta)
    entries = json.loads(meta.read_text())
    assert entries == json.loads(first.metadata_path.read_text())
    again = prepare_packed_dataset(path, tmp_path / "o", pack_size=128, metadata_path=meta)
    assert again.reused and json.loads(meta.read_text()) == entries  # reused packs: nothing appended, as in Bridge
    second = prepare_packed_dataset(path, tmp_path / "o", pack_size=256, metadata_path=meta)
    assert json.loads(meta.read_text()) == entries + json.loads(second.metadata_path.read_text())


@pytest.mark.parametrize("content", ['{"pack_size": 1}', "not json", "[1, 2]"])
def test_metadata_file_that_is_not_an_array_of_objects_is_refused_and_kept(tmp_path, content):
    meta = tmp_path / "meta.json"
    meta.write_text(content)
    with pytest.raises(ArtifactError):
        append_metadata(meta, [{"pack_size": 8}])
    assert meta.read_text() == content


def test_cli_flags(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(30)))
    meta = tmp_path / "m.json"
    assert main(["pack", str(data), "--out", str(tmp_path / "o"), "--pack-size", "256", "--cp", "2",
                 "--pad-seq-length-to-mult", "16", "--metadata-path", str(meta), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    manifest = json.loads((tmp_path / "o" / res["root"].split("/")[-1] / MANIFEST_NAME).read_text())
    assert manifest["options"]["pad_seq_length_to_mult"] == 16 and len(json.loads(meta.read_text())) == 1
    assert main(["pack", str(data), "--out", str(tmp_path / "o"), "--pack-size", "256", "--cp", "2",
                 "--pad-seq-length-to-mult", "6"]) == 2
    assert "not a multiple of pad_seq_to_mult=4" in capsys.readouterr().err


def test_distributed_outside_torchrun_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n")
    assert main(["pack", str(data), "--out", str(tmp_path / "o"), "--pack-size", "64", "--distributed"]) == 2
    err = capsys.readouterr().err
    assert "needs torchrun" in err and len(err.strip().splitlines()) == 1


def test_a_rank_that_does_not_see_the_output_directory_is_an_error(tmp_path):
    from seqpack.packing.offline.executors import PoolExecutor
    from seqpack.packing.offline.options import PROBE_NAME

    class TwoRanks:
        """Rank 1's view of a two-rank group on a filesystem it does not share with rank 0."""

        rank, world_size = 1, 2

        def from_root(self, fn):
            fn()  # rank 0 writes its probe...
            (tmp_path / "work" / PROBE_NAME).unlink()  # ...which rank 1's filesystem does not have
            return "token"

        def everywhere(self, fn):
            return [fn()]

    with pytest.raises(UsageError, match="rank 1 does not see the output directory"):
        PoolExecutor(TwoRanks()).prepare_work(tmp_path / "work")

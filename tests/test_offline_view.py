"""``batches --mode offline``: a pack as the THD micro-batch its reader builds, and each CP rank's share."""

from __future__ import annotations

import pytest

from seqpack.core.errors import UsageError
from seqpack.data import demo_path
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.training.offline_view import inspect_offline_batches


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    out = tmp_path_factory.mktemp("packs")
    rows = out / "chat.jsonl"
    rows.write_bytes(b"".join(demo_path("chat").read_bytes().splitlines(keepends=True)[:120]))
    return prepare_packed_dataset(rows, out / "packs", pack_size=1024, pad_seq_to_mult=4)


def test_boundaries_padding_and_cp_shares_add_up(packs):
    report = inspect_offline_batches(packs.pack_dir.parent, cp=2, num_batches=2)
    assert report.pack_dir == str(packs.pack_dir) and report.packs == packs.manifest["splits"]["training"]["packs"]
    for b in report.batches:
        assert b.cu_seqlens[-1] == b.real_tokens and (b.cu_seqlens_padded or b.cu_seqlens)[-1] <= b.width
        assert all(p % 4 == 0 and p >= n for n, p in zip(b.lengths, b.physical_lengths))
        assert b.real_tokens + b.alignment_padding + b.width_padding == b.width
        assert [r["rank"] for r in b.cp_ranks] == [0, 1]
        assert sum(r["positions"] for r in b.cp_ranks) == b.width
        assert sum(r["real_tokens"] for r in b.cp_ranks) == b.real_tokens
        covered = sorted(p for r in b.cp_ranks for s, e in r["ranges"] for p in range(s, e))
        assert covered == list(range(b.width))  # every position on exactly one rank
    assert report.totals.batches == 2


def test_cp1_has_no_shares_and_bad_requests_are_refused(packs):
    assert inspect_offline_batches(packs.pack_dir, cp=1, num_batches=1).batches[0].cp_ranks == []
    with pytest.raises(UsageError, match="past the last"):
        inspect_offline_batches(packs.pack_dir, start=10_000)
    with pytest.raises(UsageError, match="no validation packs"):
        inspect_offline_batches(packs.pack_dir, split="validation")

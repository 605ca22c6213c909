"""The packing certificate (gap) in every summary and manifest, ``bin_scope="shard"`` and ``max_gap``."""

from __future__ import annotations

import filecmp
import json

import numpy as np
import pytest

from seqpack.core.errors import PackingError, UsageError
from seqpack.data import demo_path
from seqpack.packing.offline.bins import assign_scoped, packing_gap
from seqpack.packing.offline.options import OfflinePackOptions
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.packing.parquet import read_metadata

PC = demo_path("prompt_completion")


def _pack(out, **kw):
    kw.setdefault("pack_size", 2048)
    kw.setdefault("pad_seq_to_mult", 8)
    return prepare_packed_dataset(PC, out, **kw)


def test_every_summary_and_manifest_records_the_gap(tmp_path):
    res = _pack(tmp_path / "g")
    info = res.splits["training"]
    gap = info["gap"]
    assert gap["packs"] == info["packs"] >= gap["lower_bound"] == -(-info["aligned_tokens"] // 2048)
    assert gap["gap"] == pytest.approx(gap["packs"] / gap["lower_bound"] - 1) and gap["gap"] >= 0
    on_disk = json.loads(res.manifest_path.read_text())["splits"]["training"]["gap"]
    assert on_disk == gap and res.to_dict()["splits"]["training"]["gap"] == gap


def test_packing_gap_is_a_lower_bound_certificate():
    assert packing_gap(10, 10 * 4096, 4096) == {"packs": 10, "lower_bound": 10, "gap": 0.0}
    assert packing_gap(11, 10 * 4096 - 5, 4096)["gap"] == pytest.approx(0.1)
    assert packing_gap(3, 1, 4096)["lower_bound"] == 1


def test_one_shard_is_exactly_the_global_packing(tmp_path):
    glob = _pack(tmp_path / "g")
    shard = _pack(tmp_path / "s", bin_scope="shard", shard_rows=10_000)
    assert filecmp.cmp(glob.files["training"], shard.files["training"], shallow=False)
    assert glob.root.name != shard.root.name  # the scope is part of the fingerprint
    assert shard.manifest["options"]["bin_scope"] == "shard" and shard.manifest["options"]["shard_rows"] == 10_000
    assert "bin_scope" not in glob.manifest["options"]  # the exact default leaves earlier fingerprints as they were


def test_shards_pack_only_their_own_samples():
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 3000, size=5000) // 8 * 8 + 8
    shard = np.repeat(np.arange(5), 1000)
    options = OfflinePackOptions(pack_size=4096, pad_seq_to_mult=8, bin_scope="shard", shard_rows=1024)
    bins, bounds = assign_scoped(options, lengths, shard)
    assert len(bounds) == 6 and bounds[-1] == bins.count
    assert sorted(bins.order.tolist()) == list(range(5000))  # every sample once
    for k in range(5):
        members = bins.order[bins.offsets[bounds[k]]: bins.offsets[bounds[k + 1]]]
        assert set(shard[members].tolist()) == {k}
    sums = np.add.reduceat(lengths[bins.order], bins.offsets[:-1])
    assert sums.max() <= 4096
    glob, _ = assign_scoped(OfflinePackOptions(pack_size=4096, pad_seq_to_mult=8), lengths)
    assert bins.count >= glob.count >= bins.stats["lower_bound"]


def test_shard_scope_with_workers_and_small_row_groups_is_deterministic(tmp_path):
    kw = {"bin_scope": "shard", "shard_rows": 1024, "row_group_size": 7, "pack_size": 8192}
    one = _pack(tmp_path / "a", **kw)
    two = _pack(tmp_path / "b", num_workers=2, **kw)
    assert filecmp.cmp(one.files["training"], two.files["training"], shallow=False)
    packing = one.splits["training"]["packing"]
    assert packing["bin_scope"] == "shard" and packing["shards"] == 2
    meta = read_metadata(one.metadata_path)[0]
    assert meta["pack_size"] == 8192


def test_max_gap_fails_the_run_and_leaves_nothing(tmp_path):
    kw = {"bin_scope": "shard", "shard_rows": 1024, "pack_size": 8192}
    gap = _pack(tmp_path / "ok", **kw).splits["training"]["gap"]["gap"]
    assert gap > 0  # two shards, two partly filled last packs
    with pytest.raises(PackingError, match="above the lower bound") as info:
        _pack(tmp_path / "bad", max_gap=gap / 2, **kw)
    assert info.value.field == "max_gap" and "--shard-rows" in str(info.value)
    assert not any((tmp_path / "bad").iterdir())
    assert _pack(tmp_path / "ok", max_gap=gap, **kw).reused  # at the limit passes, and reuse checks it too
    with pytest.raises(PackingError, match="reused packs"):
        _pack(tmp_path / "ok", max_gap=gap / 2, **kw)


@pytest.mark.parametrize("kw,match", [
    ({"shard_rows": 5000}, "bin_scope='shard' only"),
    ({"bin_scope": "row"}, "unknown bin_scope"),
    ({"bin_scope": "shard", "shard_rows": 10}, "shard_rows"),
    ({"bin_scope": "shard", "bridge_compat": True, "algorithm": "first_fit_shuffle"}, "no shard scope"),
    ({"max_gap": -0.1}, "max_gap must be"),
    ({"max_gap": float("nan")}, "max_gap must be"),
])
def test_bad_scope_options_are_usage_errors(tmp_path, kw, match):
    with pytest.raises(UsageError, match=match):
        _pack(tmp_path / "o", **kw)


def test_gathering_does_not_depend_on_the_order_jobs_come_back_in(tmp_path):
    """The global key: a job's index; any executor may return jobs in any order (Ray does)."""
    import random

    from seqpack.packing.offline.executors import PoolExecutor
    from seqpack.packing.offline.distributed import LocalCollective
    from seqpack.packing.offline.jobs import TokenizeContext, tokenize_jobs
    from seqpack.packing.offline.stages import gather_split, resolve_inputs
    from seqpack.data.schemas import PromptCompletionSchema
    from seqpack.data.tokenizers import load_tokenizer

    stream = resolve_inputs(str(PC), 0, None)["training"]
    ctx = TokenizeContext(PromptCompletionSchema(), load_tokenizer(None), 2049, "right")
    jobs = tokenize_jobs(stream, rows_per_job=100)
    done = PoolExecutor(LocalCollective()).tokenize(jobs, ctx)
    shuffled = list(done)
    random.Random(0).shuffle(shuffled)
    assert [d.index for d in shuffled] != [d.index for d in done]
    a_acc, a_idx = gather_split(stream, done, np.dtype("<u2"))
    b_acc, b_idx = gather_split(stream, shuffled, np.dtype("<u2"))
    assert a_acc.to_dict() == b_acc.to_dict() and np.array_equal(a_idx.length, b_idx.length)


# ------------------------------------------------------------------------------------------------
# The faces: the CLI and the MCP tool carry the declared options
# ------------------------------------------------------------------------------------------------


def test_cli_shard_scope_gap_column_and_max_gap(tmp_path, capsys):
    import importlib.util

    from seqpack.faces.cli import main

    base = ["pack", str(PC), "--pack-size", "8192", "--pad-seq-to-mult", "8", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "a"), "--bin-scope", "shard", "--shard-rows", "1024"]) == 0
    text = capsys.readouterr().out
    assert "gap" in text.splitlines()[1] and "%" in text.splitlines()[3]
    assert main([*base, "--out", str(tmp_path / "b"), "--bin-scope", "shard", "--shard-rows", "1024",
                 "--max-gap", "0.00001"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "above the lower bound" in err and "--shard-rows" in err
    assert not any((tmp_path / "b").iterdir())
    assert main([*base, "--out", str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["training"]["gap"]["gap"] >= 0
    if importlib.util.find_spec("ray") is None:  # this venv: the ray extra is named, nothing is written
        assert main([*base, "--out", str(tmp_path / "d"), "--engine", "ray"]) == 2
        assert "pip install 'seqpack[ray]'" in capsys.readouterr().err
        assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_pack_dataset_takes_the_scope_and_a_datasets_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    from mcp import Client

    from seqpack.faces.mcp.server import build_server

    rows = [json.loads(line) for line in PC.read_text().splitlines()]
    datasets.disable_progress_bars()
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    async with Client(build_server([tmp_path])) as client:
        result = await client.call_tool("pack_dataset", {
            "input_path": "ds", "output_dir": "packs", "pack_size": 8192, "pad_seq_to_mult": 8,
            "bin_scope": "shard", "shard_rows": 1024, "max_gap": 0.05})
        assert not result.is_error, result.content[0].text
        data = result.structured_content or json.loads(result.content[0].text)
        assert data["splits"]["training"]["gap"]["packs"] == data["splits"]["training"]["packs"]
        plain = tmp_path / "plain"
        plain.mkdir()
        refused = await client.call_tool("pack_dataset", {"input_path": "plain", "output_dir": "packs2",
                                                          "pack_size": 8192})
        assert refused.is_error and "datasets folder" in refused.content[0].text


@pytest.fixture
def anyio_backend():
    return "asyncio"

"""In-batch loader: micro-batch samplers, the config builder (registry rules, derived alignment),
every row exactly once through a real DataLoader, and flat memory on a large JSONL."""

import gc
import json
import time

import numpy as np
import pytest
import torch

from seqpack.config import load_config
from seqpack.data import demo_path
from seqpack.data.demo import DEMO_ROWS
from seqpack.core.errors import ArtifactError, ConfigViolationError, UsageError
from seqpack.packing.in_batch import (
    IN_BATCH_RULE_IDS,
    InBatchPackingCollator,
    alignment_for_config,
    build_in_batch_loader,
)
from seqpack.packing.samplers import (
    CyclicMicroBatchSampler,
    SingleMicroBatchSampler,
    make_micro_batch_sampler,
)
from seqpack.packing.sft_dataset import SFTJsonlDataset, scan_rows
from seqpack.packing.thd import validate_thd_batch


def cfg_for(**overrides):
    data = {
        "model": {"seq_length": 4096},
        "dataset": {"enable_in_batch_packing": True, "dataloader_type": "single", "num_workers": 0, "seed": 7},
        "train": {"micro_batch_size": 4, "global_batch_size": 64},
    }
    return load_config(data, list(overrides.items()))


# ---------------------------------------------------------------- samplers
def test_single_sampler_rank_layout_and_dropped_tail():
    kw = dict(micro_batch_size=2, data_parallel_size=2)
    r0 = SingleMicroBatchSampler(10, data_parallel_rank=0, **kw)
    r1 = SingleMicroBatchSampler(10, data_parallel_rank=1, **kw)
    assert list(r0) == [[0, 1], [4, 5]] and list(r1) == [[2, 3], [6, 7]]
    assert len(r0) == len(r1) == 2 and r0.dropped_samples == 2
    assert list(r0) == [[0, 1], [4, 5]]  # stateless: every pass is the same


def test_single_sampler_keeps_the_tail_without_drop_last():
    kw = dict(micro_batch_size=2, data_parallel_size=2, drop_last=False)
    r0 = SingleMicroBatchSampler(11, data_parallel_rank=0, **kw)
    r1 = SingleMicroBatchSampler(11, data_parallel_rank=1, **kw)
    assert list(r0) == [[0, 1], [4, 5], [8, 9]] and list(r1) == [[2, 3], [6, 7], [10]]
    assert (len(r0), len(r1), r0.dropped_samples) == (3, 3, 0)
    r1_short = SingleMicroBatchSampler(9, data_parallel_rank=1, **kw)
    assert list(r1_short) == [[2, 3], [6, 7]] and len(r1_short) == 2  # nothing left for rank 1


def test_single_sampler_resumes_from_consumed_samples():
    s = SingleMicroBatchSampler(12, micro_batch_size=3, consumed_samples=6)
    assert list(s) == [[6, 7, 8], [9, 10, 11]] and len(s) == 2
    with pytest.raises(UsageError, match="consumed_samples"):
        SingleMicroBatchSampler(12, micro_batch_size=3, consumed_samples=12)


def test_sampler_maps_positions_through_indices():
    s = SingleMicroBatchSampler(indices=[3, 5, 8, 13, 21], micro_batch_size=2, drop_last=False)
    assert list(s) == [[3, 5], [8, 13], [21]]
    with pytest.raises(UsageError, match="disagrees"):
        SingleMicroBatchSampler(4, indices=[1, 2, 3], micro_batch_size=2)


def test_cyclic_sampler_is_deterministic_from_its_seed_only():
    def first_epoch(seed):
        return list(CyclicMicroBatchSampler(20, micro_batch_size=4, seed=seed))

    np.random.seed(1)
    torch.manual_seed(1)
    a = first_epoch(3)
    np.random.seed(99)
    torch.manual_seed(99)
    assert first_epoch(3) == a  # global RNG state plays no part
    assert first_epoch(4) != a
    assert sorted(i for mb in a for i in mb) == list(range(20))
    assert a != [list(range(k, k + 4)) for k in range(0, 20, 4)]  # actually shuffled


def test_cyclic_sampler_walks_through_epochs_with_new_orders():
    s = CyclicMicroBatchSampler(12, micro_batch_size=3, seed=0)
    e0, e1 = list(s), list(s)
    assert s.consumed_samples == 24 and s.epoch == 2
    for epoch in (e0, e1):
        assert sorted(i for mb in epoch for i in mb) == list(range(12))
    assert e0 != e1


def test_cyclic_sampler_resumes_mid_epoch_and_in_later_epochs():
    full = CyclicMicroBatchSampler(10, micro_batch_size=2, seed=5)
    e0, e1 = list(full), list(full)
    resumed = CyclicMicroBatchSampler(10, micro_batch_size=2, seed=5, consumed_samples=6)
    assert len(resumed) == 2 and list(resumed) == e0[3:]
    later = CyclicMicroBatchSampler(10, micro_batch_size=2, seed=5, consumed_samples=14)
    assert list(later) == e1[2:]


def test_cyclic_sampler_drops_a_different_tail_each_epoch():
    s = CyclicMicroBatchSampler(10, micro_batch_size=4, seed=1)
    assert s.epoch_length == 8 and s.dropped_samples == 2 and len(s) == 2
    seen = [sorted(i for mb in s for i in mb) for _ in range(4)]
    assert all(len(e) == 8 and len(set(e)) == 8 for e in seen)
    left_out = [set(range(10)) - set(e) for e in seen]
    assert len({frozenset(x) for x in left_out}) > 1


def test_cyclic_sampler_ranks_split_each_step():
    kw = dict(micro_batch_size=2, data_parallel_size=3, seed=11, drop_last=False)
    ranks = [list(CyclicMicroBatchSampler(14, data_parallel_rank=r, **kw)) for r in range(3)]
    rows = [i for batches in ranks for mb in batches for i in mb]
    assert sorted(rows) == list(range(14))
    assert [len(b) for b in ranks] == [3, 2, 2]  # 14 = 2 full steps of 6, then a tail of 2 for rank 0
    with pytest.raises(UsageError, match="do not fill one step"):
        CyclicMicroBatchSampler(5, micro_batch_size=2, data_parallel_size=3, seed=0)


def test_make_sampler_refuses_batch_with_the_registry_rule():
    with pytest.raises(ConfigViolationError) as info:
        make_micro_batch_sampler("batch", 10, micro_batch_size=4)
    assert info.value.rule_id == "PACK-IN-BATCH-DATALOADER" and "dataloader_type=single" in str(info.value)
    with pytest.raises(UsageError, match="external"):
        make_micro_batch_sampler("external", 10, micro_batch_size=4)
    with pytest.raises(UsageError, match="seed"):
        make_micro_batch_sampler("cyclic", 10, micro_batch_size=4)
    assert isinstance(make_micro_batch_sampler("cyclic", 10, micro_batch_size=4, seed=0), CyclicMicroBatchSampler)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(total_samples=0, micro_batch_size=2), "total_samples"),
        (dict(total_samples=8, micro_batch_size=0), "micro_batch_size"),
        (dict(total_samples=8, micro_batch_size=2, data_parallel_rank=2, data_parallel_size=2), "below"),
        (dict(total_samples=8, micro_batch_size=2, consumed_samples=-1), "consumed_samples"),
        (dict(total_samples=8, micro_batch_size=2, drop_last=1), "drop_last"),
    ],
)
def test_bad_sampler_arguments(kwargs, pattern):
    with pytest.raises(UsageError, match=pattern):
        SingleMicroBatchSampler(**kwargs)


# ---------------------------------------------------------------- builder: registry rules
@pytest.mark.parametrize(
    "overrides, rule_id",
    [
        ({"train.micro_batch_size": 1}, "PACK-IN-BATCH-MBS"),
        ({"dataset.dataloader_type": "batch"}, "PACK-IN-BATCH-DATALOADER"),
        ({"dataset.dataloader_type": None}, "PACK-IN-BATCH-DATALOADER"),  # gpt_sft defaults to batch
        ({"dataset.enable_offline_packing": True, "dataset.offline_packing_specs.packed_sequence_size": 4096},
         "PACK-EXCLUSIVE-OFFLINE-IN-BATCH"),
        ({"dataset.kind": "pretrain"}, "PACK-IN-BATCH-DATASET-KIND"),
        ({"model.tensor_model_parallel_size": 4, "model.context_parallel_size": 2, "model.sequence_parallel": True,
          "dist.world_size": 8, "model.seq_length": 4092}, "ALIGN-SEQ-LENGTH"),
        ({"model.context_parallel_size": 2, "dist.world_size": 2, "model.seq_length": 4095}, "CP-SEQ-DIVISIBLE"),
        ({"dataset.seq_length": 2048}, "SEQ-LENGTH-MATCH"),
    ],
)
def test_builder_rejects_configs_with_the_rule_ids(overrides, rule_id):
    assert rule_id in IN_BATCH_RULE_IDS
    with pytest.raises(ConfigViolationError) as info:
        build_in_batch_loader(cfg_for(**overrides), demo_path("prompt_completion"))
    assert info.value.rule_id == rule_id and f"[{rule_id}]" in str(info.value)


def test_builder_needs_in_batch_enabled_and_a_jsonl_kind():
    with pytest.raises(UsageError, match="does not enable"):
        build_in_batch_loader(cfg_for(**{"dataset.enable_in_batch_packing": False}), demo_path("chat"))
    with pytest.raises(UsageError, match="mock_vlm"):
        build_in_batch_loader(cfg_for(**{"dataset.kind": "mock_vlm"}), demo_path("chat"))


def test_builder_logs_registry_warnings(caplog):
    build_in_batch_loader(cfg_for(**{"dataset.in_batch_packing_pad_to_multiple_of": 16}), demo_path("chat"))
    assert any("PACK-IN-BATCH-MULTIPLE-OVERRIDDEN" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({}, 1),
        ({"model.tensor_model_parallel_size": 4, "model.context_parallel_size": 2, "model.sequence_parallel": True,
          "dist.world_size": 8}, 8),
        ({"model.context_parallel_size": 3, "dist.eval_context_parallel_size": 2, "dist.world_size": 6,
          "model.seq_length": 4092}, 12),  # lcm(2*3, 2*2)
    ],
)
def test_builder_derives_the_alignment_from_the_topology(overrides, expected):
    cfg = cfg_for(**overrides)
    loader = build_in_batch_loader(cfg, demo_path("chat"))
    assert alignment_for_config(cfg).pad_seq_to_mult == expected
    assert loader.collate_fn.pad_seq_to_mult == expected
    for step, batch in enumerate(loader):
        validate_thd_batch(batch, pad_seq_to_mult=expected)
        if expected > 1:
            assert "cu_seqlens_q_padded" in batch or all(n % expected == 0 for n in batch["token_count"])
        if step == 5:
            break


def test_builder_uses_dp_size_rank_and_consumed_samples():
    cfg = cfg_for(**{"dist.world_size": 2})
    r1 = build_in_batch_loader(cfg, demo_path("prompt_completion"), dp_rank=1, consumed_samples=400)
    first = next(iter(r1))
    assert first["row_indices"] == [404, 405, 406, 407]
    assert len(r1) == (DEMO_ROWS - 400) // 8


def test_builder_fixed_width_from_the_config():
    cfg = cfg_for(**{"dataset.dataset_kwargs": {"pad_to_max_length": True}, "model.context_parallel_size": 2,
                     "dist.world_size": 2})
    loader = build_in_batch_loader(cfg, demo_path("prompt_completion"), width=4 * 4096)
    widths = set()
    for step, batch in enumerate(loader):
        widths.add(batch["tokens"].shape[1])
        validate_thd_batch(batch, pad_seq_to_mult=4)
        if step == 20:
            break
    assert widths == {16384}


def test_builder_with_a_row_scan_reads_only_usable_rows(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": "" if i % 4 == 1 else f"c{i}"} for i in range(11)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = SFTJsonlDataset(path, seq_length=64)
    loader_plain = build_in_batch_loader(cfg_for(**{"model.seq_length": 64}), ds)
    with pytest.raises(Exception, match="empty_completion"):
        list(loader_plain)  # default policy: the rejected row stops the loader
    scan = scan_rows(ds)
    loader = build_in_batch_loader(cfg_for(**{"model.seq_length": 64}), ds, row_scan=scan, drop_last=False)
    seen = [i for b in loader for i in b["row_indices"]]
    assert seen == [i for i in range(11) if i % 4 != 1]
    assert sorted(seen + [r.row for r in scan.rejected]) == list(range(11))
    other = SFTJsonlDataset(path, seq_length=64, truncation="reject")
    with pytest.raises(ArtifactError, match="truncation"):
        build_in_batch_loader(cfg_for(**{"model.seq_length": 64}), other, row_scan=scan)
    with pytest.raises(UsageError, match="tokenizer"):
        build_in_batch_loader(cfg_for(**{"model.seq_length": 64}), ds, tokenizer="byte")


# ---------------------------------------------------------------- every row exactly once through a DataLoader
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])  # workers: processes
@pytest.mark.parametrize("loader_type", ["single", "cyclic"])
def test_every_row_exactly_once_per_epoch(loader_type, workers):
    cfg = cfg_for(**{"dataset.dataloader_type": loader_type, "model.context_parallel_size": 2,
                     "dist.world_size": 2})
    loader = build_in_batch_loader(cfg, demo_path("chat"), num_workers=workers)
    seen, sizes = [], set()
    for batch in loader:
        assert batch["pack_info"].rows == tuple(batch["row_indices"])
        assert batch["tokens"].shape[1] % 4 == 0
        seen.extend(batch["row_indices"])
        sizes.add(len(batch["row_indices"]))
    assert sizes == {4}
    assert sorted(seen) == list(range(DEMO_ROWS))
    if loader_type == "single":
        assert seen == list(range(DEMO_ROWS))  # in order, workers included
    else:
        assert seen != list(range(DEMO_ROWS))


@pytest.mark.slow
def test_every_row_exactly_once_across_dp_ranks_with_an_incomplete_tail():
    cfg = cfg_for(**{"dataset.dataloader_type": "cyclic", "dist.world_size": 3, "train.micro_batch_size": 3})
    per_rank = [
        [i for b in build_in_batch_loader(cfg, demo_path("prompt_completion"), dp_rank=r, num_workers=2,
                                          drop_last=False) for i in b["row_indices"]]
        for r in range(3)
    ]
    assert sorted(i for rows in per_rank for i in rows) == list(range(DEMO_ROWS))  # 2000 = 222 steps of 9 + 2
    assert [len(r) for r in per_rank] == [668, 666, 666]


# ---------------------------------------------------------------- memory stays flat on a large file
def _rss_anon_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no RssAnon in /proc/self/status")


def _write_large_jsonl(path, target_bytes: int) -> int:
    rng = np.random.default_rng(0)
    words = ["river", "lamp", "garden", "packet", "kernel", "batch", "window", "sensor", "quiet", "bright"]
    pieces = [" ".join(rng.choice(words, size=n)) for n in (200, 350, 500, 650)]
    rows = 0
    written = 0
    with open(path, "w") as fh:
        while written < target_bytes:
            block = []
            for _ in range(1000):
                k = rows % 4
                line = json.dumps({"id": rows, "prompt": f"Question {rows}: " + pieces[k],
                                   "completion": pieces[3 - k] + f" ({rows})"}) + "\n"
                block.append(line)
                rows += 1
            text = "".join(block)
            fh.write(text)
            written += len(text)
    return rows


@pytest.mark.slow
def test_memory_stays_flat_while_iterating_a_large_jsonl(tmp_path):
    start = time.perf_counter()
    path = tmp_path / "large.jsonl"
    rows = _write_large_jsonl(path, 300 << 20)
    size = path.stat().st_size
    gc.collect()
    base = _rss_anon_bytes()
    ds = SFTJsonlDataset(path, seq_length=4096)
    assert len(ds) == rows
    sampler = CyclicMicroBatchSampler(len(ds), micro_batch_size=8, seed=0)
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, collate_fn=InBatchPackingCollator(pad_seq_to_mult=8, seq_length=4096),
        num_workers=0,
    )
    seen = []
    peak = base
    for step, batch in enumerate(loader):
        seen.extend(batch["row_indices"])
        if step % 25 == 0:
            peak = max(peak, _rss_anon_bytes())
        if step == 300:
            break
    gc.collect()
    peak = max(peak, _rss_anon_bytes())
    growth = peak - base
    assert size > 250 << 20
    assert min(seen) < 0.02 * rows and max(seen) > 0.98 * rows  # spread over the whole file
    assert growth < 50 << 20, f"anonymous memory grew by {growth / 2**20:.1f} MiB on a {size / 2**20:.0f} MiB file"
    assert time.perf_counter() - start < 60

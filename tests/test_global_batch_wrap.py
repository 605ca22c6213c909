"""Global-batch path in one process: the per-step wrap, the pack builder, the one-process simulation of
DP ranks, the payload encoding, and the reference train step / evaluation against unpacked runs."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from seqpack.data import ByteTokenizer
from seqpack.core.errors import InputError, UsageError
from seqpack.packing.global_batch.dataset import build_global_batch_loader
from seqpack.packing.global_batch.exchange import _decode, _encode, record_size
from seqpack.packing.global_batch.packs import build_pack_batch, filler_batch, simulate_step
from seqpack.packing.global_batch.samples import check_unpacked_sample, make_unpacked_sample
from seqpack.training.global_batch_step import evaluate, run_micro_batches, train_step
from seqpack.packing.global_batch.wrap import GlobalBatchPacker, wrap_data_iterator
from seqpack.packing.sft_dataset import SFTJsonlDataset
from seqpack.packing.thd import validate_thd_batch
from seqpack.training.model import TinyGPT, TinyGPTConfig
from tests.distributed.global_batch_data import packed_keys, sample_key, unpacked_reference, write_rows

EXACT = 1e-10


def config(scheduler="dp_balanced", gbs=8, cap=160):
    return {
        "model": {"seq_length": 128, "max_seqlen_per_dp_cp_rank": cap, "calculate_per_token_loss": True,
                  "sequence_packing_scheduler": scheduler},
        "dataset": {"seq_length": 128, "enable_global_batch_packing": True, "dataloader_type": "single",
                    "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": gbs},
    }


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return write_rows(tmp_path_factory.mktemp("gb") / "rows.jsonl", 24, seed=3)


@pytest.fixture(scope="module")
def model():
    return TinyGPT(TinyGPTConfig(vocab_size=ByteTokenizer().vocab_size, hidden_size=16, num_heads=2,
                                 ffn_hidden_size=32), seed=5)


def samples(n, multiple=1, start=1):
    out = []
    for i in range(n):
        length = start + 3 * i
        toks = torch.arange(length) % 50 + 1
        out.append(make_unpacked_sample(toks, toks + 1, torch.ones(length), pad_seq_to_mult=multiple, row_index=i))
    return out


def test_pack_batch_is_canonical_with_real_and_padded_boundaries():
    s = [check_unpacked_sample(x, pad_seq_to_mult=4) for x in samples(3, multiple=4, start=3)]  # 3, 6, 9 real
    b = build_pack_batch(s, pad_seq_to_mult=4, capacity=32, sample_ids=[7, 8, 9])
    validate_thd_batch(b, pad_seq_to_mult=4)
    assert b["cu_seqlens_q"].tolist() == [0, 3, 9, 18]
    assert b["cu_seqlens_q_padded"].tolist() == [0, 4, 12, 24]
    assert b["position_ids"][0].tolist() == list(range(4)) + list(range(8)) + list(range(12))
    assert b["max_seqlen_q"] == 12 and b["sample_ids"] == [7, 8, 9] and b["row_indices"] == [0, 1, 2]
    assert b["loss_mask"].sum() == 18


def test_filler_batch_supervises_nothing():
    b = filler_batch(pad_seq_to_mult=4, pad_token_id=258)
    validate_thd_batch(b, pad_seq_to_mult=4)
    assert b["tokens"].tolist() == [[258] * 4] and b["loss_mask"].sum() == 0
    assert b["cu_seqlens_q"].tolist() == [0, 0] and b["cu_seqlens_q_padded"].tolist() == [0, 4]
    assert b["sample_ids"] == [] and bool(b["padding_mask"].all())


def test_payload_record_round_trips_bit_for_bit():
    s = make_unpacked_sample([5, 6, 7], [6, 7, 8], [0.5, -0.0, 1.0], pad_seq_to_mult=4, row_index=12)
    rec = _encode(s)
    assert rec.dtype == torch.int64 and rec.numel() == record_size(4) == 19
    back = _decode(rec, 4)
    assert back.keys() == s.keys()
    for k in s:
        assert back[k].dtype == s[k].dtype and torch.equal(back[k], s[k])
    assert torch.equal(back["loss_mask"].view(torch.int32), s["loss_mask"].view(torch.int32))  # -0.0 kept


@pytest.mark.parametrize("scheduler", ["dp_balanced", "balanced"])
def test_simulated_ranks_see_every_sample_once(scheduler):
    per_rank = [samples(5, 4, start=2), samples(3, 4, start=20), samples(4, 4, start=9)]
    step = simulate_step(per_rank, max_seqlen_per_dp_cp_rank=32, cp_size=2, scheduler=scheduler, pad_seq_to_mult=4)
    assert [len(b) for b in step.batches] == [step.num_micro_batches] * 3
    expected = Counter(sample_key(s) for rank in per_rank for s in rank)
    seen = Counter(k for rank in step.batches for b in rank for k in packed_keys(b))
    assert seen == expected
    for rank in step.batches:
        for b in rank:
            validate_thd_batch(b, pad_seq_to_mult=4)
            assert b["tokens"].shape[1] <= 64
    assert step.to_dict()["widths"] == [[int(b["tokens"].shape[1]) for b in r] for r in step.batches]


def test_wrap_single_process(rows):
    loader = build_global_batch_loader(config(), rows)
    step = GlobalBatchPacker(config(), pad_token_id=258).wrap(iter(loader))
    lengths = step.schedule.lengths
    assert step.schedule.num_samples == 8 and step.num_micro_batches == len(step.batches)
    assert step.seqlen_sum == sum(lengths) and step.seqlen_squared_sum == sum(x * x for x in lengths)
    assert type(step.seqlen_sum) is int and type(step.seqlen_squared_sum) is int
    assert sorted(g for b in step.batches for g in b["sample_ids"]) == list(range(8))
    assert sorted(r for b in step.batches for r in b["row_indices"]) == list(range(8))
    it, n, total, squares = step.as_tuple()
    assert n == step.num_micro_batches and len(list(it)) == n and (total, squares) == (step.seqlen_sum,
                                                                                       step.seqlen_squared_sum)
    again = wrap_data_iterator(iter(build_global_batch_loader(config(), rows)), config(), 8)
    assert again.schedule == step.schedule


def test_wrap_refuses_bad_iterators(rows):
    packer = GlobalBatchPacker(config())
    loader = build_global_batch_loader(config(), rows)
    with pytest.raises(UsageError, match="must be an iterator"):
        packer.wrap(loader)
    short = iter(list(loader)[:3])
    with pytest.raises(InputError, match="ran out after 3 of 8 next"):
        packer.wrap(short)
    with pytest.raises(InputError, match="next\\(\\) call 0: expected a sample dict or a list"):
        packer.wrap(iter([torch.zeros(3)] * 8))
    with pytest.raises(UsageError, match="num_microbatches"):
        packer.wrap(iter(loader), 0)


def test_layout_must_match_the_config():
    cfg = config()
    cfg["dist"] = {"world_size": 2}
    with pytest.raises(UsageError, match="DP=2 but no process group"):
        GlobalBatchPacker(cfg)


@pytest.mark.parametrize("scheduler", ["dp_balanced", "balanced"])
def test_train_step_equals_the_unpacked_samples(rows, model, scheduler):
    cfg = config(scheduler)
    feed = iter(build_global_batch_loader(cfg, rows))
    packer = GlobalBatchPacker(cfg, pad_token_id=258)
    ds = SFTJsonlDataset(rows, seq_length=128)
    for step in range(2):
        result = train_step(model, packer, feed)
        ref_sum, ref_count, ref_grads = unpacked_reference(model, (ds[r] for r in range(8 * step, 8 * step + 8)))
        assert result.token_count == ref_count
        assert abs(result.loss - ref_sum / ref_count) < EXACT
        assert max(float((result.grads[k] - g / ref_count).abs().max()) for k, g in ref_grads.items()) < EXACT
        assert result.num_micro_batches == len(result.local_tokens) >= 2
        assert sum(result.local_tokens) == result.seqlen_sum  # CP=1: every token of every pack
        assert result.to_dict()["grad_norm"] > 0


def test_evaluate_is_forward_only_and_matches_unpacked(rows, model):
    cfg = config("balanced", gbs=4)
    model.zero_grad(set_to_none=True)
    res = evaluate(model, GlobalBatchPacker(cfg), iter(build_global_batch_loader(cfg, rows)), eval_iters=3)
    assert all(p.grad is None for p in model.parameters())
    ds = SFTJsonlDataset(rows, seq_length=128)
    ref_sum, ref_count, _ = unpacked_reference(model, (ds[r] for r in range(12)))
    assert res.steps == 3 and len(res.micro_batches) == 3 and res.token_count == ref_count
    assert abs(res.loss - ref_sum / ref_count) < EXACT
    with pytest.raises(UsageError):
        evaluate(model, GlobalBatchPacker(cfg), iter([]), eval_iters=0)


def test_run_micro_batches_without_backward_leaves_grads_alone(rows, model):
    cfg = config()
    step = GlobalBatchPacker(cfg).wrap(iter(build_global_batch_loader(cfg, rows)))
    model.zero_grad(set_to_none=True)
    res = run_micro_batches(model, step, backward=False)
    assert res.grads == {} and all(p.grad is None for p in model.parameters())
    assert res.token_count == sum(float(b["loss_mask"].sum()) for b in step.batches)

"""Global-batch path: the unpacked-sample contract, the per-sample collate, the dataset and loader, the
registry rules it enforces, and the validation-set check."""

from __future__ import annotations

import pytest
import torch

from seqpack.config import load_config
from seqpack.core.errors import AlignmentError, ConfigViolationError, InputError, UsageError
from seqpack.packing.global_batch.dataset import (
    EvaluationPlan,
    GlobalBatchSFTDataset,
    build_global_batch_loader,
    settings_from_config,
)
from seqpack.packing.global_batch.samples import (
    SAMPLE_KEYS,
    UnpackedSampleCollator,
    check_unpacked_sample,
    make_unpacked_sample,
)

PAD = 258  # the byte tokenizer's pad id


def gb_config(**over):
    cfg = {
        "model": {"seq_length": 64, "max_seqlen_per_dp_cp_rank": 64, "calculate_per_token_loss": True},
        "dataset": {"seq_length": 64, "enable_global_batch_packing": True, "dataloader_type": "single",
                    "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": 4},
    }
    for dotted, value in over.items():
        section, key = dotted.split("__")
        cfg.setdefault(section, {})[key] = value
    return cfg


def test_make_unpacked_sample_pads_to_the_alignment():
    s = make_unpacked_sample([97, 98, 32, 99, 100], [98, 32, 99, 100, 257], [0, 1, 1, 1, 1],
                             pad_seq_to_mult=4, pad_token_id=PAD, row_index=7)
    assert s["tokens"].tolist() == [97, 98, 32, 99, 100, PAD, PAD, PAD]
    assert s["labels"].tolist() == [98, 32, 99, 100, 257, -100, -100, -100]
    assert s["loss_mask"].tolist() == [0, 1, 1, 1, 1, 0, 0, 0]
    assert s["position_ids"].tolist() == list(range(8))
    assert s["original_seq_len"].tolist() == [5] and s["padded_seq_len"].tolist() == [8]
    assert [s[k].dtype for k in SAMPLE_KEYS] == [torch.int64] * 3 + [torch.float32] + [torch.int32] * 2
    assert s["row_index"].tolist() == [7]
    exact = make_unpacked_sample([1, 2, 3, 4], [2, 3, 4, 5], [1, 1, 1, 1], pad_seq_to_mult=4)
    assert exact["padded_seq_len"].tolist() == [4] and "row_index" not in exact


def test_collate_shifts_masks_and_pads_a_real_row(write_jsonl):
    path = write_jsonl([{"prompt": "ab", "completion": "cd"}, {"prompt": "hello", "completion": "world!"}])
    ds = GlobalBatchSFTDataset(path, seq_length=64)
    assert ds.yields_unpacked_samples is True
    batch = UnpackedSampleCollator(pad_seq_to_mult=4, pad_token_id=PAD)([ds[0], ds[1]])
    assert isinstance(batch, list) and len(batch) == 2
    first = batch[0]
    # ids: 'a' 'b' ' ' 'c' 'd' EOS, prompt unsupervised; shifted by one, padded to 8
    assert first["tokens"].tolist() == [97, 98, 32, 99, 100, PAD, PAD, PAD]
    assert first["labels"].tolist() == [98, 32, 99, 100, 257, -100, -100, -100]
    assert first["loss_mask"].tolist() == [0, 1, 1, 1, 1, 0, 0, 0]
    assert first["row_index"].tolist() == [0]
    second = batch[1]  # 5 + 1 + 6 + 1 = 13 ids -> 12 positions, already a multiple of 4
    assert second["original_seq_len"].tolist() == [12] and second["padded_seq_len"].tolist() == [12]
    assert second["loss_mask"].tolist() == [0] * 4 + [1] * 8


def test_check_accepts_and_squeezes_a_megatron_collated_sample():
    s = make_unpacked_sample([1, 2, 3], [2, 3, 4], [1, 1, 1], pad_seq_to_mult=4)
    batched = {k: v[None] if k in ("tokens", "labels", "loss_mask", "position_ids") else v for k, v in s.items()}
    out = check_unpacked_sample(batched, pad_seq_to_mult=4)
    assert out["tokens"].shape == (4,) and torch.equal(out["tokens"], s["tokens"])


def _broken(**change):
    s = make_unpacked_sample([1, 2, 3], [2, 3, 4], [1, 1, 1], pad_seq_to_mult=4, row_index=3)
    for key, value in change.items():
        if value is None:
            del s[key]
        else:
            s[key] = value
    return s


@pytest.mark.parametrize(
    "change, error, text",
    [
        ({"labels": None}, InputError, "missing key(s) ['labels']"),
        ({"attention_mask": torch.ones(4)}, InputError, "unknown key(s) ['attention_mask']"),
        ({"cu_seqlens": torch.tensor([0, 4])}, InputError, "pre-packed samples (with cu_seqlens)"),
        ({"loss_mask": torch.ones(4, dtype=torch.float64)}, InputError, "'loss_mask' must be torch.float32"),
        ({"tokens": torch.zeros(5, dtype=torch.int64)}, InputError, "'tokens' has 5 elements but padded_seq_len is 4"),
        ({"original_seq_len": torch.tensor([5], dtype=torch.int32)}, InputError, "original_seq_len 5 must lie"),
        ({"padded_seq_len": torch.tensor([4.0])}, InputError, "'padded_seq_len' must be a one-element integer"),
        ({"tokens": [1, 2, 3, 0]}, InputError, "'tokens' must be a torch tensor"),
    ],
)
def test_check_rejects_broken_samples_naming_the_field(change, error, text):
    with pytest.raises(error) as err:
        check_unpacked_sample(_broken(**change), pad_seq_to_mult=4, where="DP rank 1, sample 2")
    assert text in err.value.message and err.value.message.startswith("DP rank 1, sample 2")
    assert err.value.row == 3  # the sample's dataset row


def test_check_rejects_a_sample_not_aligned_for_cp():
    s = make_unpacked_sample([1, 2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 7], [1] * 6, pad_seq_to_mult=2)
    with pytest.raises(AlignmentError) as err:
        check_unpacked_sample(s, pad_seq_to_mult=4)
    assert "padded_seq_len 6 is not a multiple of the alignment 4" in err.value.message


def test_loader_yields_one_sample_lists_per_rank(write_jsonl):
    rows = [{"prompt": "p" * (i + 1), "completion": "c" * (i + 2)} for i in range(8)]
    path = write_jsonl(rows)
    cfg = gb_config(model__context_parallel_size=2, model__max_seqlen_per_dp_cp_rank=32, dist__world_size=4)
    for rank, expected in ((0, [0, 2, 4, 6]), (1, [1, 3, 5, 7])):
        items = list(build_global_batch_loader(cfg, path, dp_rank=rank))
        assert all(isinstance(it, list) and len(it) == 1 for it in items)
        assert [int(it[0]["row_index"][0]) for it in items] == expected
        for it in items:
            s = it[0]
            row = int(s["row_index"][0])
            assert int(s["original_seq_len"][0]) == (row + 1) + 1 + (row + 2)  # ids + sep + eos - shift
            assert int(s["padded_seq_len"][0]) % 4 == 0  # 2 * CP


def test_settings_resolve_the_topology():
    s = settings_from_config(gb_config(model__context_parallel_size=2, model__tensor_model_parallel_size=4,
                                       model__sequence_parallel=True, model__max_seqlen_per_dp_cp_rank=32,
                                       dist__world_size=16, train__global_batch_size=8))
    # Megatron-Bridge PR #6127's product 2*CP*TP under SP (16), not the other paths' lcm(2*CP, CP*TP) (8)
    assert (s.dp_size, s.cp_size, s.capacity, s.pad_seq_to_mult) == (2, 2, 64, 16)
    s2 = settings_from_config(gb_config(model__context_parallel_size=2, model__tensor_model_parallel_size=2,
                                        model__sequence_parallel=True, model__max_seqlen_per_dp_cp_rank=32,
                                        dist__world_size=16, train__global_batch_size=8))
    assert s2.pad_seq_to_mult == 8  # the lcm would be 4
    assert s.scheduler == "dp_balanced" and s.micro_batches_per_rank == 4
    assert s.to_dict()["micro_batches_per_rank"] == 4
    assert settings_from_config(gb_config(model__sequence_packing_scheduler="balanced")).scheduler == "balanced"


@pytest.mark.parametrize(
    "over, rule",
    [
        ({"dataset__enable_in_batch_packing": True, "train__micro_batch_size": 4}, "PACK-EXCLUSIVE-GLOBAL-BATCH"),
        ({"train__micro_batch_size": 2}, "PACK-GLOBAL-MBS1"),
        ({"model__calculate_per_token_loss": False}, "PACK-GLOBAL-PER-TOKEN-LOSS"),
        ({"ddp__average_in_collective": True}, "PACK-GLOBAL-AVG-COLLECTIVE"),
        ({"dataset__dataloader_type": "batch"}, "PACK-GLOBAL-DATALOADER"),
        ({"model__max_seqlen_per_dp_cp_rank": None}, "PACK-GLOBAL-MAX-SEQLEN-REQUIRED"),
        ({"model__max_seqlen_per_dp_cp_rank": 48}, "PACK-GLOBAL-CAPACITY"),
        ({"dataset__kind": "direct_hf"}, "PACK-GLOBAL-UNPACKED-SAMPLES"),
        ({"model__sequence_packing_scheduler": "default_dynamic_cp"}, "PACK-GLOBAL-SCHEDULER"),
        ({"model__pipeline_model_parallel_size": 2, "dist__world_size": 2}, "PACK-GLOBAL-NO-PP"),
    ],
)
def test_rules_are_enforced_through_the_registry(over, rule, write_jsonl):
    with pytest.raises(ConfigViolationError) as err:
        settings_from_config(gb_config(**over))
    assert err.value.rule_id == rule
    with pytest.raises(ConfigViolationError):
        build_global_batch_loader(gb_config(**over), write_jsonl([{"prompt": "a", "completion": "b"}]))


def test_config_without_global_batch_packing_is_refused():
    with pytest.raises(UsageError, match="does not enable global-batch packing"):
        settings_from_config(load_config({}))


def test_evaluation_plan_counts_like_megatron():
    plan = EvaluationPlan.for_run(train_iters=100, eval_interval=50, eval_iters=2, eval_global_batch_size=8)
    assert plan.num_evaluations == 3 and plan.samples_needed == 48
    plan.check(48)
    with pytest.raises(InputError) as err:
        plan.check(47, file="val.jsonl")
    e = err.value
    assert e.file == "val.jsonl" and "holds 47 usable sample(s) but the run needs 48" in e.message
    assert "only 2 evaluation(s) would get their samples" in e.message
    with pytest.raises(UsageError):
        EvaluationPlan(0, 8, 1)


def test_validation_loader_checks_the_plan_up_front(write_jsonl):
    path = write_jsonl([{"prompt": "a" * (i + 1), "completion": "b"} for i in range(10)])
    plan = EvaluationPlan(eval_iters=1, eval_global_batch_size=4, num_evaluations=3)
    with pytest.raises(InputError, match="holds 10 usable sample"):
        build_global_batch_loader(gb_config(), path, evaluation=plan)
    ok = EvaluationPlan(eval_iters=1, eval_global_batch_size=4, num_evaluations=2)
    assert len(list(build_global_batch_loader(gb_config(), path, evaluation=ok))) == 10

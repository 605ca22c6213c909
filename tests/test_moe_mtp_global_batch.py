"""Global-batch packing with the MoE and MTP options: auxiliary losses averaged over the micro-batches that ran."""

from __future__ import annotations

import math

import pytest
import torch

from seqpack.packing.global_batch.samples import make_unpacked_sample
from seqpack.packing.global_batch.wrap import GlobalBatchPacker
from seqpack.training.global_batch_step import micro_batch_terms, run_micro_batches, train_step
from seqpack.training.model import TinyGPT, TinyGPTConfig
from seqpack.training.moe import MoEConfig, load_balancing_loss
from seqpack.training.moe_mtp_step import AuxLog, average_aux_logs, options_step
from seqpack.training.mtp import MTPConfig, with_mtp_streams

MOE = MoEConfig(num_experts=4, topk=2, expert_hidden_size=8, aux_loss_coeff=0.01, z_loss_coeff=0.001)
MTP = MTPConfig(num_layers=1, loss_scaling_factor=0.3)


def config(gbs: int = 4) -> dict:
    # capacity 160 with 100-token samples: every sample is its own pack, so n samples -> n micro-batches
    return {
        "model": {"seq_length": 128, "max_seqlen_per_dp_cp_rank": 160, "calculate_per_token_loss": True,
                  "sequence_packing_scheduler": "dp_balanced"},
        "dataset": {"seq_length": 128, "enable_global_batch_packing": True, "dataloader_type": "single",
                    "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": gbs},
    }


def sample(seed: int, length: int = 100, prompt: int = 20) -> dict:
    gen = torch.Generator().manual_seed(seed)
    toks = torch.randint(1, 64, (length + 1,), generator=gen)
    mask = torch.cat([torch.zeros(prompt), torch.ones(length - prompt)])
    return make_unpacked_sample(toks[:-1], toks[1:], mask, pad_seq_to_mult=1, row_index=seed)


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    return TinyGPT(TinyGPTConfig(hidden_size=16, num_heads=2, moe=MOE, mtp=MTP), seed=8)


def test_average_by_hand() -> None:
    logs = [AuxLog(50, [1.0, 3.0], [0.2, 0.4], [2.0]), AuxLog(40, [2.0, 2.0], [0.3, 0.3], [4.0]),
            AuxLog(10, [0.5, 1.5], [0.1, 0.5], [3.0])]
    out = average_aux_logs(logs)
    # per micro-batch mean over layers: 2, 2, 1 -> (2 + 2 + 1) / 3
    assert out["load_balancing_loss"] == pytest.approx(5 / 3)
    assert out["z_loss"] == pytest.approx((0.3 + 0.3 + 0.3) / 3)
    assert out["mtp_loss"] == pytest.approx([3.0])
    assert out["micro_batches"] == 3
    # five micro-batches of the same content report the same number as three
    same = AuxLog(50, [1.0, 3.0], [0.2, 0.4], [2.0])
    assert average_aux_logs([same] * 3)["load_balancing_loss"] == average_aux_logs([same] * 5)["load_balancing_loss"]
    # a filler micro-batch (no real token) carries no statistics and is not averaged in
    with_filler = average_aux_logs([*logs, AuxLog(0, [0.0, 0.0], [0.0, 0.0], [0.0])])
    assert with_filler["load_balancing_loss"] == pytest.approx(5 / 3)
    assert with_filler["filler_micro_batches"] == 1
    assert average_aux_logs([]) == {}


def _step(model: TinyGPT, samples: list[dict]):
    packer = GlobalBatchPacker(config(), pad_token_id=0)
    return train_step(model, packer, iter(samples), len(samples))


def test_three_and_five_micro_batches_report_comparable_losses(model: TinyGPT) -> None:
    same = sample(1)
    three, five = _step(model, [same] * 3), _step(model, [same] * 5)
    assert (three.num_micro_batches, five.num_micro_batches) == (3, 5)
    for key in ("load_balancing_loss", "z_loss"):
        assert three.aux[key] == pytest.approx(five.aux[key], rel=1e-12)
    assert three.aux["mtp_loss"] == pytest.approx(five.aux["mtp_loss"], rel=1e-12)
    # dividing the sums by the configured count (GBS / DP = 4 here) instead would not be comparable
    configured = 4
    sums = {n: sum(sum(log.load_balancing_loss) / len(log.load_balancing_loss) for log in r.aux_logs)
            for n, r in ((3, three), (5, five))}
    assert sums[3] / configured != pytest.approx(sums[5] / configured, rel=1e-3)


def test_step_average_equals_a_hand_computation_from_each_pack(model: TinyGPT) -> None:
    samples = [sample(s, length=85 + 10 * s) for s in range(3)]
    result = _step(model, samples)
    assert result.num_micro_batches == 3
    aux_means, z_means, mtp = [], [], []
    for batch in result.step.batches:
        res = options_step(model, batch, grads=False)
        aux = [float(load_balancing_loss(s.score_sum, s.tokens_per_expert, MOE.topk, 1.0)) for s in res.router]
        z = [float(s.z_sum / s.num_tokens) for s in res.router]
        aux_means.append(sum(aux) / len(aux))
        z_means.append(sum(z) / len(z))
        mtp.append(res.mtp_loss_sums[0] / res.mtp_token_counts[0])
    assert len(result.aux_logs[0].load_balancing_loss) == 3  # two trunk layers and the MTP layer
    assert result.aux["load_balancing_loss"] == pytest.approx(sum(aux_means) / 3, rel=1e-12)
    assert result.aux["z_loss"] == pytest.approx(sum(z_means) / 3, rel=1e-12)
    assert result.aux["mtp_loss"] == pytest.approx([sum(mtp) / 3], rel=1e-12)
    counts = [[sum(col) for col in zip(*layer)] for layer in zip(*(log.expert_load for log in result.aux_logs))]
    assert result.aux["expert_load"] == counts
    assert sum(result.aux["expert_load"][0]) == MOE.topk * sum(85 + 10 * s for s in range(3))


def test_micro_batch_objective_scales_like_megatron_core(model: TinyGPT) -> None:
    step = GlobalBatchPacker(config(), pad_token_id=0).wrap(iter([sample(4)]), 1)
    batch = with_mtp_streams(step.batches[0], MTP.num_layers)
    lm_sum, count, extra, log = micro_batch_terms(model, batch, step.layout)
    res = options_step(model, batch, grads=False)
    expected = sum(float(s.aux_loss(MOE)) * float(s.num_tokens) + MOE.z_loss_coeff * float(s.z_sum)
                   for s in res.router)
    expected += MTP.loss_scaling_factor * res.mtp_loss_sums[0] * float(count) / res.mtp_token_counts[0]
    assert float(extra.detach()) == pytest.approx(expected, rel=1e-10)
    assert float(lm_sum) == pytest.approx(res.lm_loss_sum, rel=1e-12)
    assert log.real_tokens == 100


def test_dense_model_has_no_aux(model: TinyGPT) -> None:
    dense = TinyGPT(TinyGPTConfig(hidden_size=16, num_heads=2), seed=8)
    step = GlobalBatchPacker(config(), pad_token_id=0).wrap(iter([sample(1), sample(2)]), 2)
    result = run_micro_batches(dense, step, backward=False)
    assert result.aux == {} and result.aux_logs == []
    assert math.isfinite(result.loss)

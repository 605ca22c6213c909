"""Differential tests: the reference router and MTP roll against Megatron-Core's own functions (CPU).

The installed ``megatron-core`` (0.16.1 on Python 3.11) runs its routing, loss and roll functions
on CPU tensors; these tests feed them the same inputs as :mod:`seqpack.training.moe` and
:mod:`seqpack.training.mtp` and compare. Where Megatron-Core is wrong for padded packed
layouts (the MTP roll reads ``cu_seqlens_q`` as physical offsets; 0.16-0.19 broadcast the expert-bias
padding mask over the expert dimension) the tests pin that behaviour down, so a release that fixes
it shows up here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from seqpack.training.boundaries import thd_layout
from seqpack.training.model import TinyGPT, TinyGPTConfig
from seqpack.training.moe import MoEConfig, MoEMLP, expert_capacity
from seqpack.training.mtp import roll_packed
from seqpack.training.packed_seq_params import to_packed_seq_params
from seqpack.training.ranks import import_megatron_core
from tests.distributed.thd_helpers import make_thd_batch, random_sequences

pytestmark = pytest.mark.slow

moe_utils: Any = None
roll_tensor: Any = None


@pytest.fixture(autouse=True, scope="module")
def _megatron_core() -> None:
    """Import Megatron-Core when the first test here runs, not when the suite is collected (every run, the fast
    lane's too, would pay for it), through ``import_megatron_core``: its fused kernels stay uncompiled, as
    ``disable_jit_fuser()`` leaves them, whichever test module imported Megatron-Core first (so these functions
    run the same eager code in every run, and no test spends its time compiling them for the CPU)."""
    global moe_utils, roll_tensor
    pytest.importorskip("megatron.core")
    import_megatron_core()
    from megatron.core.transformer.moe import moe_utils
    from megatron.core.transformer.multi_token_prediction import roll_tensor

LENGTHS = [5, 11, 3, 7]
#: Megatron-Core computes router scores in float32 (``softmax(..., dtype=torch.float32)``)
RTOL = 1e-6


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a.double(), b.double(), rtol=RTOL, atol=1e-9)


class _OneRank:
    """A stand-in process group of size 1 (what ``get_tokens_per_expert_and_token_count`` reads)."""

    def size(self) -> int:
        return 1


def _layer(cfg: MoEConfig, seed: int = 0) -> MoEMLP:
    gen = torch.Generator().manual_seed(seed)
    return MoEMLP(cfg, 8, lambda *shape, around_one=False: torch.nn.Parameter(
        torch.randn(*shape, generator=gen, dtype=torch.float64)))


def _logits_and_padding(tokens: int = 24, experts: int = 4, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen, dtype=torch.float64)
    padding = torch.zeros(tokens, dtype=torch.bool)
    padding[5:8] = True
    padding[-4:] = True
    return logits, padding


def _mcore_aux(logits: torch.Tensor, padding: torch.Tensor, cfg: MoEConfig) -> torch.Tensor:
    """The load-balancing loss as TopKRouter._apply_aux_loss computes it with a padding mask."""
    routing_map, scores = moe_utils.compute_routing_scores_for_aux_loss(
        logits, cfg.topk, cfg.score_function, padding_mask=padding)
    tokens_per_expert = routing_map.sum(dim=0)
    total = tokens_per_expert.sum() / cfg.topk
    return moe_utils.switch_load_balancing_loss_func(
        scores, tokens_per_expert, total, cfg.topk, cfg.num_experts, cfg.aux_loss_coeff)


@pytest.mark.parametrize("score_function", ["softmax", "sigmoid"])
def test_load_balancing_and_z_loss_match_megatron_core(score_function: str) -> None:
    cfg = MoEConfig(score_function=score_function, aux_loss_coeff=0.01, z_loss_coeff=0.001)
    logits, padding = _logits_and_padding()
    _, _, stats = _layer(cfg).route(logits, padding)
    assert _close(stats.aux_loss(cfg), _mcore_aux(logits, padding, cfg))
    upstream_z = moe_utils.z_loss_func(logits, cfg.z_loss_coeff, padding_mask=padding)
    assert _close(stats.z_loss(cfg), upstream_z)
    # counting padding (no mask) is what upstream does without a padding mask: a different number
    _, _, counted = _layer(cfg).route(logits, padding, torch.ones_like(padding))
    assert _close(counted.z_loss(cfg), moe_utils.z_loss_func(logits, cfg.z_loss_coeff))
    assert not _close(counted.aux_loss(cfg), stats.aux_loss(cfg))


@pytest.mark.parametrize(("score_function", "bias"), [("softmax", False), ("sigmoid", False), ("sigmoid", True)])
def test_routing_matches_megatron_core(score_function: str, bias: bool) -> None:
    cfg = MoEConfig(score_function=score_function, expert_bias=bias)
    layer = _layer(cfg)
    if bias:
        layer.expert_bias.copy_(torch.tensor([0.4, -0.3, 0.1, 0.0], dtype=torch.float64))
    logits, padding = _logits_and_padding()
    probs, routing_map, _ = layer.route(logits, padding)
    up_probs, up_map = moe_utils.topk_routing_with_score_function(
        logits, cfg.topk, score_function=score_function, expert_bias=layer.expert_bias if bias else None)
    assert torch.equal(routing_map, up_map)
    assert _close(probs, up_probs)


@pytest.mark.parametrize("policy", ["probs", "position"])
def test_token_dropping_matches_megatron_core(policy: str) -> None:
    cfg = MoEConfig(topk=2, capacity_factor=0.75, drop_policy=policy)
    logits, padding = _logits_and_padding(tokens=32)
    probs, routing_map, stats = _layer(cfg).route(logits, padding)
    assert moe_utils.get_capacity(32 * 2, 4, 0.75) == expert_capacity(32, 2, 4, 0.75) == 12
    full_probs, full_map = moe_utils.topk_routing_with_score_function(logits, 2)
    up_probs, up_map = moe_utils.apply_router_token_dropping(full_probs, full_map, 2, 0.75, drop_policy=policy)
    if policy == "probs":  # "position" ties are broken by torch.topk, identically only by chance
        assert torch.equal(routing_map, up_map)
        assert _close(probs, up_probs)
    assert stats.dropped == int(full_map.sum() - up_map.sum()) > 0


def test_expert_bias_statistics_with_a_padding_mask_break_in_megatron_core_0_16() -> None:
    """core_v0.16.x-0.19.0 AND a [T] mask into a [T, E] map (router.py _apply_expert_bias); main fixed it
    (NVIDIA/Megatron-LM#6114) and Megatron-Bridge patches it (gpt_step.py _patch_mcore_expert_bias_padding_mask)."""
    from megatron.core.transformer.moe.router import TopKRouter

    def upstream_counts(logits: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        _, routing_map = moe_utils.topk_routing_with_score_function(logits, 2)
        state = type("State", (), {"enable_expert_bias": True, "local_tokens_per_expert": torch.zeros(4)})()
        TopKRouter._apply_expert_bias(state, routing_map, padding_mask=padding)
        return state.local_tokens_per_expert.double()

    logits, padding = _logits_and_padding()
    reference = _layer(MoEConfig()).route(logits, padding)[2].expert_load
    try:
        counts = upstream_counts(logits, padding)
    except RuntimeError as exc:  # the installed release: shapes [24, 4] and [24] do not broadcast
        assert "24" in str(exc)
        # with as many tokens as experts it broadcasts, masking expert j by token j's padding flag
        square, square_padding = logits[:4], torch.tensor([False, False, False, True])
        wrong = upstream_counts(square, square_padding)
        assert not torch.equal(wrong, _layer(MoEConfig()).route(square, square_padding)[2].expert_load)
        assert float(wrong[3]) == 0.0
    else:  # a fixed release: the counts leave padding out, as the reference does
        assert torch.equal(counts, reference)


# --- MTP roll ----------------------------------------------------------------------------------------


def _batch(multiple: int) -> dict:
    return make_thd_batch(random_sequences(LENGTHS, seed=9), multiple, trailing_pad=3)


@pytest.mark.parametrize("key", ["tokens", "labels", "loss_mask", "position_ids"])
def test_roll_matches_megatron_core_without_alignment_padding(key: str) -> None:
    batch = make_thd_batch(random_sequences(LENGTHS, seed=9), 1)
    params = to_packed_seq_params(batch)
    assert params.cu_seqlens_q_padded is None
    upstream, _ = roll_tensor(batch[key], shifts=-1, dims=-1, packed_seq_params=params)
    assert torch.equal(upstream[0], roll_packed(batch[key][0], thd_layout(batch)))


@pytest.mark.parametrize("key", ["tokens", "labels", "loss_mask", "position_ids"])
def test_megatron_core_rolls_padded_layouts_at_real_offsets(key: str) -> None:
    batch = _batch(4)
    params = to_packed_seq_params(batch)
    assert params.cu_seqlens_q_padded is not None
    upstream, _ = roll_tensor(batch[key], shifts=-1, dims=-1, packed_seq_params=params)
    layout = thd_layout(batch)
    assert torch.equal(upstream[0], roll_packed(batch[key][0], layout, "mcore_real_offsets"))
    assert not torch.equal(upstream[0], roll_packed(batch[key][0], layout))


def test_megatron_core_with_padded_boundaries_agrees_with_the_reference() -> None:
    """The fix proposed upstream (read cu_seqlens_q_padded): same MTP targets and mask on every real position."""
    batch = _batch(4)
    params = to_packed_seq_params(batch)
    fixed = dataclasses.replace(params, cu_seqlens_q=params.cu_seqlens_q_padded)
    layout = thd_layout(batch)
    _, real = layout.token_segments()
    mask_up, _ = roll_tensor(batch["loss_mask"], packed_seq_params=fixed)
    labels_up, _ = roll_tensor(batch["labels"], packed_seq_params=fixed)
    mask_ref = roll_packed(batch["loss_mask"][0], layout)
    labels_ref = roll_packed(batch["labels"][0], layout)
    assert torch.equal(mask_up[0][real], mask_ref[real])
    supervised = mask_ref != 0
    assert supervised.any() and torch.equal(labels_up[0][supervised], labels_ref[supervised])


def test_reference_mtp_model_runs_with_megatron_core_params() -> None:
    # the MoE + MTP model consumes the batch whose boundaries came through PackedSeqParams
    model = TinyGPT(TinyGPTConfig(moe=MoEConfig(), vocab_size=64), seed=2)
    batch = _batch(2)
    params = to_packed_seq_params(batch)
    view = {**batch, "cu_seqlens_q": params.cu_seqlens_q, "cu_seqlens_q_padded": params.cu_seqlens_q_padded}
    assert thd_layout(view).to_dict() == thd_layout(batch).to_dict()
    assert model.config.moe is not None


def test_megatron_core_load_balancing_loss_of_an_all_padding_micro_batch_is_nan() -> None:
    """No token counted: Megatron-Core divides by 0 squared; the reference reports 0 and the global-batch
    step leaves such (filler) micro-batches out of the averages."""
    cfg = MoEConfig()
    logits, _ = _logits_and_padding()
    padding = torch.ones(logits.shape[0], dtype=torch.bool)
    assert torch.isnan(_mcore_aux(logits, padding, cfg))
    _, _, stats = _layer(cfg).route(logits, padding)
    assert float(stats.aux_loss(cfg)) == 0.0 and float(stats.z_loss(cfg)) == 0.0

"""MoE and MTP options of the reference model: packed == unpacked, and negative controls that diverge."""

from __future__ import annotations

import math

import pytest
import torch

from seqpack.core.errors import UsageError
from seqpack.packing.thd import build_thd_batch
from seqpack.training.boundaries import thd_layout
from seqpack.training.model import TinyGPT, TinyGPTConfig
from seqpack.training.moe import (
    MoEConfig,
    RouterStats,
    Routing,
    expert_capacity,
    load_balancing_loss,
    updated_expert_bias,
    z_loss,
)
from seqpack.training.moe_mtp_step import options_step, sum_router_stats, unpacked_options
from seqpack.training.mtp import MTPConfig, mtp_streams, roll_packed
from seqpack.training.step import packed_forward
from tests.distributed.thd_helpers import make_thd_batch, random_sequences

LENGTHS = [5, 11, 3, 7]
TOL = 1e-10
MOE = MoEConfig(num_experts=4, topk=2, expert_hidden_size=8)


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    return TinyGPT(TinyGPTConfig(moe=MOE, mtp=MTPConfig()), seed=11)


def _rows(prompt: list[int] | None = None) -> list[dict]:
    return random_sequences(LENGTHS, seed=5, prompt=prompt)


def _batches() -> dict[str, dict]:
    rows = _rows()
    return {
        "aligned4_tail": make_thd_batch(rows, 4, trailing_pad=6),
        "fixed_width": build_thd_batch(rows, pad_seq_to_mult=2, max_length=40, pad_to_max_length=True),
        "variable_width": build_thd_batch(rows, pad_seq_to_mult=1),
    }


BATCHES = _batches()


def _max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# --- the roll -----------------------------------------------------------------------------------


def test_roll_stays_inside_each_sequence() -> None:
    layout = thd_layout({"cu_seqlens_q": [0, 3, 5], "cu_seqlens_q_padded": [0, 4, 8]}, total_tokens=10)
    values = torch.arange(1, 11)
    # sequence 0: real 1 2 3 (slot 4 is alignment); sequence 1: real 5 6; tail 9 10
    assert roll_packed(values, layout).tolist() == [2, 3, 0, 0, 6, 0, 0, 0, 0, 0]
    assert roll_packed(values, layout, "row").tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 10, 0]
    # Megatron-Core reads cu_seqlens_q as physical offsets: windows [0,3) and [3,5), the rest untouched
    assert roll_packed(values, layout, "mcore_real_offsets").tolist() == [2, 3, 0, 5, 0, 6, 7, 8, 9, 10]


def test_roll_modes_agree_without_alignment_padding() -> None:
    layout = thd_layout({"cu_seqlens_q": [0, 3, 7, 9]})
    values = torch.arange(1, 10)
    assert torch.equal(roll_packed(values, layout), roll_packed(values, layout, "mcore_real_offsets"))
    assert not torch.equal(roll_packed(values, layout), roll_packed(values, layout, "row"))


def test_roll_rejects_unknown_mode_and_wrong_length() -> None:
    layout = thd_layout({"cu_seqlens_q": [0, 3]})
    with pytest.raises(UsageError):
        roll_packed(torch.arange(3), layout, "sideways")
    with pytest.raises(Exception, match="cannot roll"):
        roll_packed(torch.arange(4), layout)


def test_mtp_streams_roll_once_per_depth() -> None:
    batch = make_thd_batch(_rows(), 4)
    streams = mtp_streams(batch, 2)
    layout = thd_layout(batch)
    once = roll_packed(batch["labels"][0], layout)
    assert torch.equal(streams["mtp_labels"][0, :, 0], once)
    assert torch.equal(streams["mtp_labels"][0, :, 1], roll_packed(once, layout))
    assert streams["mtp_tokens"].shape == (1, batch["tokens"].shape[1], 2)
    # the last real position of every sequence is unsupervised at every depth
    for start, n in zip(layout.physical[:-1].tolist(), layout.real_lengths().tolist()):
        assert float(streams["mtp_loss_mask"][0, start + n - 1].abs().sum()) == 0.0


# --- packed == unpacked -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_packed_equals_unpacked_lm_mtp_and_router(model: TinyGPT, name: str) -> None:
    batch = BATCHES[name]
    packed = options_step(model, batch)
    alone = unpacked_options(model, batch)
    assert len(alone) == len(LENGTHS)
    assert abs(packed.lm_loss_sum - sum(a.lm_loss_sum for a in alone)) < TOL
    assert abs(packed.mtp_loss_sums[0] - sum(a.mtp_loss_sums[0] for a in alone)) < TOL
    assert packed.mtp_token_counts[0] == sum(a.mtp_token_counts[0] for a in alone) == sum(n - 1 for n in LENGTHS)
    for seq, a in zip(packed.mtp_sequences[0], alone):
        assert abs(seq - a.mtp_loss_sums[0]) < TOL
    total = {k: sum(a.grads[k] for a in alone) for k in packed.grads}
    assert _max_grad_diff(packed.grads, total) < TOL
    # 2 trunk layers + 1 MTP layer route tokens; their statistics add over sequences
    summed = sum_router_stats(alone)
    assert len(packed.router) == len(summed) == 3
    for p, u in zip(packed.router, summed):
        assert float(p.num_tokens) == sum(LENGTHS)
        assert torch.equal(p.tokens_per_expert, u.tokens_per_expert)
        assert torch.equal(p.expert_load, u.expert_load)
        assert abs(float(p.aux_loss(MOE) - u.aux_loss(MOE))) < TOL
        assert abs(float(p.z_loss(MOE) - u.z_loss(MOE))) < TOL


@pytest.mark.parametrize("name", ["aligned4_tail", "fixed_width"])
def test_router_counting_padding_diverges(model: TinyGPT, name: str) -> None:
    batch = BATCHES[name]
    honest = options_step(model, batch, grads=False)
    counted = options_step(model, batch, count_padding=True, grads=False)
    padding = int(batch["padding_mask"].sum())
    assert padding > 0
    for h, c in zip(honest.router, counted.router):
        assert float(c.num_tokens) == float(h.num_tokens) + padding
        assert abs(float(c.aux_loss(MOE) - h.aux_loss(MOE))) > 1e-6
        assert abs(float(c.z_loss(MOE) - h.z_loss(MOE))) > 1e-6
        assert not torch.equal(c.expert_load, h.expert_load)
    # the LM loss cannot see the difference: only the statistics can
    assert abs(honest.lm_loss_sum - counted.lm_loss_sum) < TOL


def test_padding_is_dispatched_but_not_counted(model: TinyGPT) -> None:
    batch = BATCHES["fixed_width"]
    res = options_step(model, batch, grads=False)
    padding = int(batch["padding_mask"].sum())
    for stats in res.router:
        assert stats.dispatched == MOE.topk * batch["tokens"].shape[1]
        assert stats.dispatched_padding == MOE.topk * padding
        assert float(stats.expert_load.sum()) == MOE.topk * sum(LENGTHS)


def test_mtp_rolled_across_boundaries_diverges(model: TinyGPT) -> None:
    # every label supervised, so the cross-boundary target of each sequence's last position counts
    batch = make_thd_batch(_rows(), 1)
    honest = options_step(model, batch, grads=False)
    crossed = options_step(model, batch, mtp_roll="row", grads=False)
    assert crossed.mtp_token_counts[0] == honest.mtp_token_counts[0] + len(LENGTHS) - 1
    assert abs(crossed.mtp_loss_sums[0] - honest.mtp_loss_sums[0]) > 1e-6
    assert abs(crossed.lm_loss_sum - honest.lm_loss_sum) < TOL


def test_mcore_real_offsets_roll_breaks_padded_layouts(model: TinyGPT) -> None:
    padded = make_thd_batch(_rows(), 4)
    assert "cu_seqlens_q_padded" in padded
    honest = options_step(model, padded, grads=False)
    mcore = options_step(model, padded, mtp_roll="mcore_real_offsets", grads=False)
    assert abs(mcore.mtp_loss_sums[0] - honest.mtp_loss_sums[0]) > 1e-6
    plain = make_thd_batch(_rows(), 1)
    assert "cu_seqlens_q_padded" not in plain
    same = options_step(model, plain, mtp_roll="mcore_real_offsets", grads=False)
    assert same.mtp_loss_sums == options_step(model, plain, grads=False).mtp_loss_sums


# --- the router's formulas by hand ----------------------------------------------------------------


def test_load_balancing_and_z_loss_by_hand() -> None:
    # two tokens, two experts, top-1: token 0 -> expert 0 (p .75/.25), token 1 -> expert 1 (p .4/.6)
    score_sum = torch.tensor([0.75 + 0.4, 0.25 + 0.6], dtype=torch.float64)
    tpe = torch.tensor([1.0, 1.0], dtype=torch.float64)
    # E * coeff / (k * T^2) * sum P_i f_i = 2 * 0.1 / 4 * (1.15 + 0.85)
    assert math.isclose(float(load_balancing_loss(score_sum, tpe, 1, 0.1)), 0.1)
    assert float(load_balancing_loss(score_sum, torch.zeros(2, dtype=torch.float64), 1, 0.1)) == 0.0
    assert math.isclose(float(z_loss(torch.tensor(6.0), 3, 0.5)), 1.0)
    bias = updated_expert_bias(torch.tensor([5.0, 1.0, 3.0]), torch.zeros(3), 0.01)
    assert bias.tolist() == pytest.approx([-0.01, 0.01, 0.0])


def test_router_stats_vector_round_trip() -> None:
    stats = RouterStats(torch.tensor(3.0), torch.tensor([1.0, 5.0]), torch.tensor([0.5, 2.5]), torch.tensor(7.0),
                        torch.tensor([2.0, 4.0]))
    back = RouterStats.from_vector(stats.vector(), 2)
    assert torch.equal(back.vector(), stats.vector())
    assert torch.equal((stats + stats).vector(), 2 * stats.vector())


def test_expert_bias_update_equal_packed_and_unpacked() -> None:
    cfg = MoEConfig(num_experts=4, topk=2, score_function="sigmoid", expert_bias=True)
    model = TinyGPT(TinyGPTConfig(moe=cfg), seed=3)
    with torch.no_grad():
        for layer in model.layers:
            layer.moe.expert_bias.copy_(torch.tensor([0.3, -0.2, 0.0, 0.1]))
    batch = BATCHES["fixed_width"]
    packed = options_step(model, batch, grads=False)
    summed = sum_router_stats(unpacked_options(model, batch, grads=False))
    for layer, p, u in zip(model.layers, packed.router, summed):
        bias = layer.moe.expert_bias
        after = updated_expert_bias(p.expert_load, bias, 1e-3)
        assert torch.equal(after, updated_expert_bias(u.expert_load, bias, 1e-3))
    counted = options_step(model, batch, count_padding=True, grads=False)
    assert any(not torch.equal(c.expert_load, p.expert_load) for c, p in zip(counted.router, packed.router))


def test_token_dropping_depends_on_what_shares_the_micro_batch() -> None:
    cfg = MoEConfig(num_experts=4, topk=1, capacity_factor=1.0)
    model = TinyGPT(TinyGPTConfig(moe=cfg), seed=3)
    batch = BATCHES["fixed_width"]
    # capacity counts every row, padding included (Megatron-Core's apply_router_token_dropping)
    assert expert_capacity(batch["tokens"].shape[1], 1, 4, 1.0) == 10
    packed = options_step(model, batch, grads=False)
    alone = unpacked_options(model, batch, grads=False)
    assert sum(s.dropped for s in packed.router) > 0
    assert abs(packed.lm_loss_sum - sum(a.lm_loss_sum for a in alone)) > 1e-6


def test_aux_loss_gradient_equals_the_same_tokens_unpacked(model: TinyGPT) -> None:
    batch = BATCHES["aligned4_tail"]
    layout = thd_layout(batch)
    everything = torch.arange(layout.total_tokens)
    from seqpack.training.attention import attention_mask
    from seqpack.training.step import split_sequences

    def aux_grads(stats: list[RouterStats]) -> dict[str, torch.Tensor]:
        total = sum(s.aux_loss(MOE) + s.z_loss(MOE) for s in stats)
        names, params = zip(*model.named_parameters())
        grads = torch.autograd.grad(total, params, allow_unused=True)
        return {n: torch.zeros_like(p) if g is None else g for n, p, g in zip(names, params, grads)}

    routing = Routing(padding_mask=batch["padding_mask"][0])
    model.trunk(batch["tokens"][0], batch["position_ids"][0], attention_mask(layout, everything, everything),
                routing=routing)
    packed = aux_grads(routing.stats)
    parts = []
    for piece in split_sequences(batch):
        if piece["tokens"].shape[1]:
            r = Routing(padding_mask=piece["padding_mask"][0])
            n = piece["tokens"].shape[1]
            mask = attention_mask(thd_layout(piece), torch.arange(n), torch.arange(n))
            model.trunk(piece["tokens"][0], piece["position_ids"][0], mask, routing=r)
            parts.append(r.stats)
    summed = [sum(layer[1:], layer[0]) for layer in zip(*parts)]
    assert _max_grad_diff(packed, aux_grads(summed)) < TOL


# --- composition and configuration -----------------------------------------------------------------


def test_dense_trunk_is_unchanged_by_an_mtp_head() -> None:
    batch = BATCHES["variable_width"]
    dense = TinyGPT(seed=4)
    with_mtp = TinyGPT(TinyGPTConfig(mtp=MTPConfig(num_layers=2)), seed=4)
    assert torch.equal(packed_forward(dense, batch), packed_forward(with_mtp, batch))
    res = options_step(with_mtp, batch, grads=False)
    assert len(res.mtp_loss_sums) == 2 and res.router == []
    assert res.mtp_token_counts[1] == sum(n - 2 for n in LENGTHS)


def test_config_round_trips_through_its_dict() -> None:
    cfg = TinyGPTConfig(moe=MOE, mtp=MTPConfig(num_layers=2))
    assert TinyGPTConfig(**cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "kwargs",
    [{"topk": 5}, {"score_function": "relu"}, {"expert_bias": True}, {"capacity_factor": 0.0},
     {"aux_loss_coeff": -1.0}, {"drop_policy": "random"}],
)
def test_bad_moe_config_is_refused(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        MoEConfig(**kwargs)


def test_mtp_needs_streams_of_the_right_shape(model: TinyGPT) -> None:
    batch = BATCHES["variable_width"]
    layout = thd_layout(batch)
    everything = torch.arange(layout.total_tokens)
    from seqpack.training.attention import attention_mask

    mask = attention_mask(layout, everything, everything)
    hidden = model.trunk(batch["tokens"][0], batch["position_ids"][0], mask)
    streams = mtp_streams(batch, 2)
    with pytest.raises(Exception, match="MTP streams"):
        model.mtp_logits(hidden, streams, mask)
    with pytest.raises(UsageError):
        TinyGPT(seed=1).mtp_logits(hidden, streams, mask)


def test_moe_layer_on_a_stack_equals_each_row_alone() -> None:
    from seqpack.training.moe import MoEMLP

    cfg = MoEConfig(num_experts=4, topk=2, capacity_factor=1.0)
    gen = torch.Generator().manual_seed(2)
    layer = MoEMLP(cfg, 8, lambda *shape, around_one=False: torch.nn.Parameter(
        torch.randn(*shape, generator=gen, dtype=torch.float64)))
    x = torch.randn(3, 10, 8, generator=gen, dtype=torch.float64)
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[0, 7:] = True
    padding[2, 4:6] = True
    stacked = Routing(padding_mask=padding)
    out = layer(x, stacked)
    rows = []
    for b in range(3):
        alone = Routing(padding_mask=padding[b])
        assert torch.allclose(layer(x[b], alone), out[b], rtol=0, atol=1e-14)
        rows.append(alone.stats[0])
        assert torch.equal(stacked.stats[0].select(b).expert_load, alone.stats[0].expert_load)
    total = stacked.stats[0].sum_rows([0, 2])
    assert torch.allclose(total.aux_loss(cfg), (rows[0] + rows[2]).aux_loss(cfg), rtol=1e-14)


def test_roll_in_segments_on_a_stack() -> None:
    from seqpack.training.mtp import roll_in_segments

    values = torch.arange(1, 13).reshape(2, 6)
    segments = torch.tensor([[0, 0, 0, -1, 1, 1], [0, 0, 1, 1, 1, -1]])
    assert roll_in_segments(values, segments).tolist() == [[2, 3, 0, 0, 6, 0], [8, 0, 10, 11, 0, 0]]


def _pairs(batch: dict) -> list:
    from seqpack.training.step import split_sequences

    pieces = split_sequences(batch)
    return [(batch, [(k, p) for k, p in enumerate(pieces) if p["tokens"].shape[1]])]


@pytest.mark.parametrize("name", ["aligned4_tail", "fixed_width"])
def test_compare_options_passes_and_its_negative_controls_fail(model: TinyGPT, name: str) -> None:
    from seqpack.training.moe_mtp_step import compare_options

    batch = BATCHES[name]
    good = compare_options(model, _pairs(batch))
    assert good.router_ok(TOL) and good.mtp_ok(TOL), good
    assert good.sequences == len(LENGTHS) and good.router_layers == 3 and good.dispatched_padding > 0
    counted = compare_options(model, _pairs(batch), count_padding=True)
    assert not counted.router_ok(TOL) and counted.mtp_ok(TOL)
    # the first label of every sequence is unsupervised: the loss cannot see the crossed roll, the logits can
    prompted = make_thd_batch(_rows(prompt=[2, 2, 1, 3]), 4)
    assert compare_options(model, _pairs(prompted)).mtp_ok(TOL)
    crossed = compare_options(model, _pairs(prompted), mtp_roll="row")
    assert not crossed.mtp_ok(TOL)  # (the MTP layer's router sees the crossed inputs too)
    assert crossed.max_mtp_logit_diff > 1e-6 and crossed.max_mtp_count_diff == 0

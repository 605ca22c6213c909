"""Token losses and Megatron-Core's loss reductions; why CP fine-tuning needs per-token loss."""

from __future__ import annotations

import math

import pytest
import torch

from seqpack.core.alignment import derive_alignment
from seqpack.core.errors import InputError, UsageError
from seqpack.training.loss import (
    backward_loss,
    finalize_gradients,
    masked_loss_pieces,
    reduce_loss_pieces,
    reduction_weights,
    token_cross_entropy,
)
from seqpack.training.model import TinyGPT
from seqpack.training.step import cp_rank_pieces, packed_forward, reference_step
from tests.distributed.thd_helpers import make_thd_batch, random_sequences

# --- token losses ----------------------------------------------------------------------------


def test_cross_entropy_uniform_logits_and_masked_labels_never_read() -> None:
    logits = torch.zeros(4, 8, dtype=torch.float64)
    labels = torch.tensor([3, -100, 7, 99])  # -100 and 99 sit on unsupervised positions
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0])
    losses = token_cross_entropy(logits, labels, mask)
    assert losses.tolist() == pytest.approx([math.log(8), 0.0, math.log(8), 0.0], abs=1e-15)
    total, count = masked_loss_pieces(losses, mask)
    assert float(total) == pytest.approx(2 * math.log(8), abs=1e-14)
    assert float(count) == 2.0


def test_cross_entropy_known_value() -> None:
    logits = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    loss = token_cross_entropy(logits, torch.tensor([1]), torch.tensor([1.0]))
    assert float(loss[0]) == pytest.approx(math.log(1 + math.exp(2.0)), abs=1e-15)


def test_masked_pieces_weight_by_mask_value() -> None:
    total, count = masked_loss_pieces(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 0.5, 0.0]))
    assert (float(total), float(count)) == (2.0, 1.5)


def test_supervised_label_outside_vocab_is_named() -> None:
    with pytest.raises(InputError, match=r"label 9 at position \[1\]"):
        token_cross_entropy(torch.zeros(2, 4), torch.tensor([0, 9]), torch.tensor([1.0, 1.0]))


def test_shape_mismatch() -> None:
    with pytest.raises(InputError, match="do not line up"):
        token_cross_entropy(torch.zeros(3, 4), torch.tensor([0, 1]), torch.tensor([1.0, 1.0]))


# --- pure reductions over (sum, count) pairs -------------------------------------------------

TWO_RANKS = [(6.0, 3), (4.0, 1)]  # per-rank means 2 and 4; global 10 / 4


@pytest.mark.parametrize(
    ("per_token", "avg", "weights", "objective"),
    [
        (True, False, [0.25, 0.25], 2.5),  # global sum / global count
        (True, True, [0.125, 0.125], 1.25),  # divided by R=2 once more (MCore refuses this combination)
        (False, False, [1 / 6, 0.5], 3.0),  # mean of per-rank means
        (False, True, [1 / 6, 0.5], 3.0),  # averaging inside the collective changes nothing here
    ],
)
def test_two_rank_reductions(per_token: bool, avg: bool, weights: list[float], objective: float) -> None:
    red = reduce_loss_pieces(TWO_RANKS, calculate_per_token_loss=per_token, average_in_collective=avg)
    assert [row[0] for row in red.weights] == pytest.approx(weights, abs=1e-15)
    assert red.objective == pytest.approx(objective, abs=1e-15)
    assert red.token_mean == 2.5 and red.global_token_count == 4 and red.global_loss_sum == 10
    assert red.token_counts == ((3.0,), (1.0,))
    assert red.to_dict()["objective"] == red.objective


def test_micro_batches_and_empty_micro_batch() -> None:
    pieces = [[(6.0, 3), (0.0, 0)], [(4.0, 1), (2.0, 2)]]
    per_token = reduce_loss_pieces(pieces, calculate_per_token_loss=True, average_in_collective=False)
    assert per_token.objective == pytest.approx(12 / 6, abs=1e-15)
    mean = reduce_loss_pieces(pieces, calculate_per_token_loss=False, average_in_collective=False)
    # w = 1 / (max(n,1) * M * R) with M = R = 2: 6/12 + 0/4 + 4/4 + 2/8
    assert mean.objective == pytest.approx(1.75, abs=1e-15)
    assert mean.num_microbatches == 2 and mean.num_ranks == 2


def test_equal_counts_make_mean_and_per_token_agree() -> None:
    pieces = [(6.0, 2), (2.0, 2)]
    a = reduce_loss_pieces(pieces, calculate_per_token_loss=True, average_in_collective=False)
    b = reduce_loss_pieces(pieces, calculate_per_token_loss=False, average_in_collective=False)
    assert a.objective == pytest.approx(b.objective, abs=1e-15) == 2.0


def test_nothing_supervised() -> None:
    red = reduce_loss_pieces([(0.0, 0), (0.0, 0)], calculate_per_token_loss=True, average_in_collective=False)
    assert red.objective == 0.0 and math.isnan(red.token_mean) and red.to_dict()["token_mean"] is None
    assert reduction_weights([[0], [0]], calculate_per_token_loss=True, average_in_collective=False) == [[1.0], [1.0]]


@pytest.mark.parametrize(
    "pieces",
    [[], [[(1.0, 1)], [(1.0, 1), (1.0, 1)]], [(1.0, -1)], [(float("nan"), 1)], [(1.0, 2, 3)]],
)
def test_bad_pieces(pieces: list) -> None:
    with pytest.raises(UsageError):
        reduce_loss_pieces(pieces, calculate_per_token_loss=True, average_in_collective=False)


# --- single-process torch helpers ------------------------------------------------------------


def test_backward_loss_scalars() -> None:
    s = torch.tensor(6.0)
    assert float(backward_loss(s, 3, calculate_per_token_loss=True)) == 6.0
    assert float(backward_loss(s, 3, calculate_per_token_loss=False, num_microbatches=2)) == 1.0
    assert float(backward_loss(s, 0, calculate_per_token_loss=False)) == 6.0  # count clamped to 1


@pytest.mark.parametrize(("per_token", "expected"), [(True, [1.0, 2.0]), (False, [2.0, 4.0])])
def test_finalize_gradients_single_process(per_token: bool, expected: list[float]) -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([2.0, 4.0])
    total = finalize_gradients(
        [p], local_token_count=2, calculate_per_token_loss=per_token, average_in_collective=False
    )
    assert total == 2.0 and p.grad.tolist() == expected


# --- why CP fine-tuning needs per-token loss (model, simulated CP ranks) ---------------------


def _grads_of(model: TinyGPT, objective: torch.Tensor) -> dict[str, torch.Tensor]:
    names, params = zip(*model.named_parameters())
    return dict(zip(names, torch.autograd.grad(objective, params)))


def _simulated_cp_grads(model: TinyGPT, batch: dict, cp: int, per_token: bool, avg: bool) -> tuple:
    logits = packed_forward(model, batch)
    mask = batch["loss_mask"][0]
    losses = token_cross_entropy(logits, batch["labels"][0], mask)
    pieces = cp_rank_pieces(losses, mask, batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]), cp)
    counts = [[float(n)] for _, n in pieces]
    weights = reduction_weights(counts, calculate_per_token_loss=per_token, average_in_collective=avg)
    objective = sum(w[0] * s for w, (s, _) in zip(weights, pieces))
    return _grads_of(model, objective), float(objective), [float(n) for _, n in pieces]


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def unequal_cp2() -> tuple[TinyGPT, dict, dict, float]:
    seqs = random_sequences([5, 11, 3, 7], seed=11, prompt=[2, 6, 0, 3])
    batch = make_thd_batch(seqs, derive_alignment(cp=2).pad_seq_to_mult)
    model = TinyGPT(seed=5)
    ref = reference_step(model, batch)
    return model, batch, {k: g / ref.token_count for k, g in ref.grads.items()}, ref.loss


def test_per_token_reduction_reproduces_cp1(unequal_cp2: tuple) -> None:
    model, batch, ref_grads, ref_loss = unequal_cp2
    grads, objective, counts = _simulated_cp_grads(model, batch, 2, True, False)
    assert counts[0] != counts[1]  # the point: CP ranks hold different numbers of supervised tokens
    assert objective == pytest.approx(ref_loss, abs=1e-12)
    assert _max_diff(grads, ref_grads) < 1e-12


def test_mean_reduction_differs_from_cp1(unequal_cp2: tuple) -> None:
    model, batch, ref_grads, ref_loss = unequal_cp2
    for avg in (False, True):
        grads, objective, _ = _simulated_cp_grads(model, batch, 2, False, avg)
        assert abs(objective - ref_loss) > 1e-3
        assert _max_diff(grads, ref_grads) > 1e-3


def test_per_token_with_average_in_collective_halves_gradient(unequal_cp2: tuple) -> None:
    model, batch, ref_grads, ref_loss = unequal_cp2
    grads, objective, _ = _simulated_cp_grads(model, batch, 2, True, True)
    assert objective == pytest.approx(ref_loss / 2, abs=1e-12)
    assert _max_diff(grads, {k: g / 2 for k, g in ref_grads.items()}) < 1e-12
    assert _max_diff(grads, ref_grads) > 1e-3


def test_mean_reduction_is_exact_only_with_equal_counts() -> None:
    # Positive control: every sequence fully supervised and a multiple of 2*CP long, so both ranks
    # hold the same number of supervised tokens and the mean of means equals the token mean.
    seqs = random_sequences([8, 4, 12], seed=12)
    batch = make_thd_batch(seqs, 4)
    model = TinyGPT(seed=6)
    ref = reference_step(model, batch)
    ref_grads = {k: g / ref.token_count for k, g in ref.grads.items()}
    grads, objective, counts = _simulated_cp_grads(model, batch, 2, False, False)
    assert counts[0] == counts[1]
    assert objective == pytest.approx(ref.loss, abs=1e-12)
    assert _max_diff(grads, ref_grads) < 1e-12

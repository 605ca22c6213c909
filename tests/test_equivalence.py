"""Batched packed-vs-unpacked comparison: what it proves, that it can fail, and how a model option plugs in."""

from __future__ import annotations

import pytest
import torch

from seqpack.training.equivalence import (
    TokenLoss,
    compare_packed_unpacked,
    packed_row,
    perturbation_leak,
    stack_rows,
    unpacked_row,
)
from seqpack.training.model import TinyGPT, TinyGPTConfig
from tests.distributed.thd_helpers import make_thd_batch, random_sequences

TOL = 1e-12
LENGTHS = [[5, 11, 3], [7, 9], [13]]


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    return TinyGPT(TinyGPTConfig(num_heads=2), seed=3)


@pytest.fixture(scope="module")
def data() -> tuple[list[dict], list[dict]]:
    """Three packed rows (aligned to 4, a trailing pad sequence) and their samples, in packing order."""
    seqs, batches = [], []
    for n, lengths in enumerate(LENGTHS):
        group = random_sequences(lengths, seed=10 + n, prompt=[min(2, x - 1) for x in lengths])
        seqs += group
        batches.append(make_thd_batch(group, 4, trailing_pad=4))
    return batches, seqs


def _rows(batches: list[dict], mode: str = "thd") -> list:
    rows, first = [], 0
    for b in batches:
        rows.append(packed_row(b, mode=mode, first_segment=first))
        first += len(rows[-1].sequences)
    return rows


def _compare(model, batches, seqs, *, mode="thd", match=None, budget=1 << 20):
    unpacked = [unpacked_row(s, j) for j, s in enumerate(seqs)]
    return compare_packed_unpacked(model, _rows(batches, mode), unpacked,
                                   list(range(len(seqs))) if match is None else match, seed=5, budget=budget)


def test_a_stack_of_rows_computes_every_row_as_if_alone(model, data):
    batches, seqs = data
    rows = [unpacked_row(s, j) for j, s in enumerate(seqs)] + _rows(batches)
    stack = stack_rows(rows)
    with torch.no_grad():
        logits = model.token_outputs(stack)["logits"]
    for i, r in enumerate(rows):
        with torch.no_grad():
            alone = model(r.tokens, r.position_ids, r.attention)
        assert float((logits[i, : r.length] - alone).abs().max()) < TOL


def test_packed_rows_equal_their_samples_and_chunking_changes_nothing(model, data):
    batches, seqs = data
    one = _compare(model, batches, seqs)
    assert one.ok(1e-9) and one.sequences == len(seqs) and one.losses == ("lm",) and one.outputs == ("logits",)
    assert max(one.max_loss_diff, one.max_output_diff, one.max_grad_diff) < TOL and one.max_count_diff == 0
    many = _compare(model, batches, seqs, budget=1)  # every row a chunk of its own
    assert many.chunks == {"packed": 3, "unpacked": len(seqs)} and one.chunks == {"packed": 1, "unpacked": 1}
    assert many.ok(1e-9) and abs(many.max_grad_diff - one.max_grad_diff) < TOL


def test_attention_across_boundaries_is_caught(model, data):
    batches, seqs = data
    res = _compare(model, batches, seqs, mode="causal")
    assert not res.ok(1e-9)
    assert res.max_output_diff > 1e-3 and res.max_loss_diff > 1e-3 and res.max_grad_diff > 1e-6


def test_a_shifted_loss_mask_is_caught_by_counts_and_losses(model, data):
    batches, seqs = data
    shifted = [{**b, "loss_mask": torch.roll(b["loss_mask"], 1, dims=1), "labels": b["labels"].clamp(min=0)}
               for b in batches]
    res = _compare(model, shifted, seqs)
    assert not res.ok(1e-9) and res.max_count_diff >= 1 and res.max_loss_diff > 1e-3
    assert res.max_output_diff < TOL  # the logits are right; only the loss is wrong


def test_a_supervised_padding_token_is_caught(model, data):
    batches, seqs = data
    last = batches[-1]
    mask = last["loss_mask"].clone()
    mask[0, -1] = 1.0  # the trailing pad sequence: no real token
    res = _compare(model, [*batches[:-1], {**last, "loss_mask": mask, "labels": last["labels"].clamp(min=0)}], seqs)
    assert not res.ok(1e-9) and res.outside_loss_tokens == 1


def test_a_sequence_compared_with_the_wrong_sample_or_none_fails(model, data):
    batches, seqs = data
    match = list(range(len(seqs)))
    match[0], match[1] = 1, 0  # lengths 5 and 11
    assert not _compare(model, batches, seqs, match=match).ok(1e-9)
    match = list(range(len(seqs)))
    match[2] = -1
    res = _compare(model, batches, seqs, match=match)
    assert res.unmatched == 1 and not res.ok(1e-9)


def test_gradients_are_compared_per_sequence_not_only_in_sum(model, data):
    """Errors that cancel in the plain sum of gradients (and leave every loss value unchanged) still fail:
    each sequence gets its own random weight."""
    batches, seqs = data

    class Cancelling(TinyGPT):
        def token_losses(self, rows, outputs):
            losses = super().token_losses(rows, outputs)
            if not any(len(set(r[r >= 0].tolist())) > 1 for r in rows.segments):
                return losses  # unpacked rows hold one sequence each
            f = (self.lm_head ** 2).sum()
            zero_valued = 1e-3 * (f - f.detach())  # value 0, gradient 1e-3 * grad f
            values = losses["lm"].values.clone()
            for seq, sign in ((0, 1.0), (1, -1.0)):
                b, t = torch.nonzero(rows.segments == seq)[-1].tolist()  # its last (supervised) token
                values[b, t] = values[b, t] + sign * zero_valued
            return {"lm": TokenLoss(values, losses["lm"].weight)}

    res = _compare(Cancelling(TinyGPTConfig(num_heads=2), seed=3), batches, seqs)
    assert res.max_loss_diff < TOL and res.max_output_diff < TOL  # nothing but the gradients differ
    assert res.max_grad_diff > 1e-6 and not res.ok(1e-9)


class WithAux(TinyGPT):
    """A model option adding one output and one loss, like an MTP head: the logits of the next token of the
    same sequence. ``respect_boundaries=False`` is the packing bug such an option can have (reading the
    next sequence's first token at a boundary)."""

    def __init__(self, *args, respect_boundaries: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.respect_boundaries = respect_boundaries

    def _same(self, rows):
        same = (torch.roll(rows.segments, -1, dims=1) == rows.segments) & (rows.segments >= 0)
        same[:, -1] = False  # the roll wraps around: the last position has no next token
        return same if self.respect_boundaries else torch.ones_like(same)

    def token_outputs(self, rows):
        out = super().token_outputs(rows)
        out["next_logits"] = torch.roll(out["logits"], -1, dims=1) * self._same(rows)[..., None]
        return out

    def token_losses(self, rows, outputs):
        weight = rows.loss_mask * self._same(rows)
        aux = TokenLoss(torch.logsumexp(outputs["next_logits"], dim=-1) * weight, weight)
        return {**super().token_losses(rows, outputs), "aux": aux}


def test_a_model_option_plugs_in_an_output_and_a_loss(data):
    batches, seqs = data
    good = _compare(WithAux(TinyGPTConfig(num_heads=2), seed=3), batches, seqs)
    assert good.losses == ("lm", "aux") and good.outputs == ("logits", "next_logits")
    assert good.ok(1e-9) and good.max_grad_diff < TOL
    bad = _compare(WithAux(TinyGPTConfig(num_heads=2), seed=3, respect_boundaries=False), batches, seqs)
    assert not bad.ok(1e-9) and bad.max_output_diff > 1e-3


def test_perturbation_leak(model, data):
    batches, _ = data
    rows = [r for r in _rows(batches) if len(r.sequences) >= 2]
    clean = perturbation_leak(model, rows, model.config.vocab_size)
    assert clean.rows == 2 and clean.max_other_change == 0.0 and clean.min_own_change > 1e-3
    leaky = perturbation_leak(model, [r for r in _rows(batches, "causal") if len(r.sequences) >= 2],
                              model.config.vocab_size)
    assert leaky.max_other_change > 1e-3

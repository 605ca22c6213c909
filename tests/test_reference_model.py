"""The tiny reference GPT: packed == unpacked per sequence, no cross-sequence leak, negative controls."""

from __future__ import annotations

import pytest
import torch

from seqpack.core.alignment import derive_alignment
from seqpack.core.errors import AlignmentError, UsageError
from seqpack.training.attention import attention_mask
from seqpack.training.boundaries import thd_layout
from seqpack.training.loss import token_cross_entropy
from seqpack.training.model import TinyGPT, TinyGPTConfig
from seqpack.training.step import (
    cp_rank_pieces,
    packed_forward,
    reference_step,
    split_sequences,
    unpacked_reference,
)
from tests.distributed.thd_helpers import make_thd_batch, random_sequences

LENGTHS = [5, 11, 3, 7]
PROMPTS = [2, 4, 0, 3]
TOL = 1e-12


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    return TinyGPT(seed=7)


@pytest.fixture(scope="module")
def batch() -> dict:
    # aligned for CP=2 (alignment gaps inside sequences) plus a zero-length trailing pad sequence
    seqs = random_sequences(LENGTHS, seed=21, prompt=PROMPTS)
    return make_thd_batch(seqs, derive_alignment(cp=2).pad_seq_to_mult, trailing_pad=4)


def _max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _compare(model: TinyGPT, batch: dict, mode: str) -> tuple[float, float]:
    packed = reference_step(model, batch, mode=mode, per_sequence_grads=True)
    alone = unpacked_reference(model, batch)
    assert len(alone) == len(packed.sequences) == len(LENGTHS) + 1
    loss_diff = max(abs(p.loss_sum - u.loss_sum) for p, u in zip(packed.sequences, alone))
    grad_diff = max(_max_grad_diff(g, u.grads) for g, u in zip(packed.sequence_grads, alone))
    assert [p.token_count for p in packed.sequences] == [u.token_count for u in alone]
    return loss_diff, grad_diff


def test_packed_equals_unpacked_per_sequence(model: TinyGPT, batch: dict) -> None:
    loss_diff, grad_diff = _compare(model, batch, "thd")
    assert loss_diff < TOL and grad_diff < TOL


def test_packed_totals_are_sums_of_sequences(model: TinyGPT, batch: dict) -> None:
    packed = reference_step(model, batch)
    alone = unpacked_reference(model, batch)
    assert packed.token_count == sum(LENGTHS) - sum(PROMPTS)
    assert packed.loss_sum == pytest.approx(sum(u.loss_sum for u in alone), abs=TOL)
    summed = {k: sum(u.grads[k] for u in alone) for k in packed.grads}
    assert _max_grad_diff(packed.grads, summed) < TOL
    assert packed.sequences[-1].token_count == 0 and packed.unassigned_token_count == 0


def test_causal_mode_fails_packed_equals_unpacked(model: TinyGPT, batch: dict) -> None:
    loss_diff, grad_diff = _compare(model, batch, "causal")
    assert loss_diff > 1e-3 and grad_diff > 1e-3


def _perturb(batch: dict, seq: int) -> dict:
    out = dict(batch)
    start = int(batch["cu_seqlens_q_padded"][seq])
    length = int(batch["cu_seqlens_q"][seq + 1] - batch["cu_seqlens_q"][seq])
    tokens = batch["tokens"].clone()
    tokens[0, start : start + length] = (tokens[0, start : start + length] + 17) % 63 + 1
    out["tokens"] = tokens
    return out


def _real_positions_by_sequence(batch: dict) -> list[torch.Tensor]:
    seq_id, is_real = thd_layout(batch).token_segments()
    return [torch.nonzero((seq_id == i) & is_real).flatten() for i in range(len(LENGTHS))]


@pytest.mark.parametrize("changed", [0, 1])
def test_perturbing_one_sequence_leaves_others_unchanged(model: TinyGPT, batch: dict, changed: int) -> None:
    with torch.no_grad():
        before = packed_forward(model, batch)
        after = packed_forward(model, _perturb(batch, changed))
    for i, pos in enumerate(_real_positions_by_sequence(batch)):
        diff = float((before[pos] - after[pos]).abs().max())
        if i == changed:
            assert diff > 1e-3  # positive control: the perturbation is visible where it should be
        else:
            assert diff < TOL


def test_causal_mode_leaks_into_later_sequences(model: TinyGPT, batch: dict) -> None:
    with torch.no_grad():
        before = packed_forward(model, batch, mode="causal")
        after = packed_forward(model, _perturb(batch, 0), mode="causal")
    later = _real_positions_by_sequence(batch)[1]
    assert float((before[later] - after[later]).abs().max()) > 1e-3


def test_rope_sees_relative_positions_within_a_sequence(model: TinyGPT, batch: dict) -> None:
    # RoPE scores depend on position differences only, and attention never crosses a boundary, so
    # row-global position ids (no restart) give the same losses; reversing the positions inside
    # a sequence does not (negative control: position_ids really drive the model).
    alone = unpacked_reference(model, batch)
    shifted = dict(batch)
    shifted["position_ids"] = torch.arange(batch["tokens"].shape[1])[None]
    packed = reference_step(model, shifted)
    assert max(abs(p.loss_sum - u.loss_sum) for p, u in zip(packed.sequences, alone)) < TOL
    reversed_ids = batch["position_ids"].clone()
    start = int(batch["cu_seqlens_q_padded"][1])
    reversed_ids[0, start : start + LENGTHS[1]] = torch.arange(LENGTHS[1] - 1, -1, -1)
    scrambled = dict(batch)
    scrambled["position_ids"] = reversed_ids
    packed = reference_step(model, scrambled)
    assert abs(packed.sequences[1].loss_sum - alone[1].loss_sum) > 1e-3
    assert abs(packed.sequences[0].loss_sum - alone[0].loss_sum) < TOL


def test_padding_tokens_get_no_gradient(model: TinyGPT, batch: dict) -> None:
    # pad id 0 never occurs as a real token, so its embedding row must not receive any gradient
    assert not bool((batch["tokens"][~batch["padding_mask"]] == 0).any())
    packed = reference_step(model, batch)
    assert float(packed.grads["embedding"][0].abs().max()) == 0.0
    assert float(packed.grads["embedding"].abs().max()) > 0.0


def test_thd_mask_rules() -> None:
    layout = thd_layout({"cu_seqlens_q": [0, 2, 3], "cu_seqlens_q_padded": [0, 4, 6]}, total_tokens=7)
    pos = torch.arange(7)
    mask = attention_mask(layout, pos, pos, "thd").int().tolist()
    assert mask == [
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0],  # alignment gap: itself only
        [0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0],  # second sequence starts fresh
        [0, 0, 0, 0, 0, 1, 0],  # its gap
        [0, 0, 0, 0, 0, 0, 1],  # tail past the last boundary
    ]
    causal = attention_mask(layout, pos, pos, "causal")
    assert torch.equal(causal, torch.ones(7, 7, dtype=torch.bool).tril())
    with pytest.raises(UsageError):
        attention_mask(layout, pos, pos, "bshd")


def test_cp_mask_uses_global_positions() -> None:
    layout = thd_layout({"cu_seqlens_q": [0, 3, 7], "cu_seqlens_q_padded": [0, 4, 8]})
    keys = torch.tensor([0, 3, 4, 7, 1, 2, 5, 6])  # CP=2: rank 0's positions, then rank 1's
    rank1 = attention_mask(layout, torch.tensor([1, 2, 5, 6]), keys, "thd").int().tolist()
    assert rank1 == [
        [1, 0, 0, 0, 1, 0, 0, 0],  # position 1 sees 0 (held by rank 0) and itself
        [1, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 1, 0, 0, 0, 1, 0],  # position 5 sees 4 (rank 0) and itself, not sequence 0
        [0, 0, 1, 0, 0, 0, 1, 1],
    ]
    rank0 = attention_mask(layout, torch.tensor([0, 3, 4, 7]), keys, "thd").int().tolist()
    assert rank0 == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0, 0, 0],  # position 3 is an alignment gap: itself only
        [0, 0, 1, 0, 0, 0, 0, 0],
        [0, 0, 1, 1, 0, 0, 1, 1],  # position 7 (last real token) sees 4..7, two of them on rank 1
    ]


def test_legacy_and_offline_forms_give_the_same_step(model: TinyGPT, batch: dict) -> None:
    canonical = reference_step(model, batch)
    tokens_keys = {k: batch[k] for k in ("tokens", "labels", "loss_mask", "position_ids")}
    offline = {
        **tokens_keys,
        "cu_seqlens_q": batch["cu_seqlens_q"][None],
        "cu_seqlens_q_padded": batch["cu_seqlens_q_padded"][None],
        "max_seqlen_q": torch.tensor([[batch["max_seqlen_q"]]]),
    }
    minus = torch.tensor([-1, -1], dtype=torch.int32)
    legacy = {
        **tokens_keys,
        "cu_seqlens": torch.cat([batch["cu_seqlens_q_padded"], minus]),
        "cu_seqlens_unpadded": torch.cat([batch["cu_seqlens_q"], minus]),
    }
    for other in (offline, legacy):
        result = reference_step(model, other)
        assert result.loss_sum == canonical.loss_sum
        assert _max_grad_diff(result.grads, canonical.grads) == 0.0


def test_supervised_tail_is_reported_not_dropped(model: TinyGPT) -> None:
    batch = make_thd_batch(random_sequences([4], seed=3), 1)
    for key, extra in (("tokens", 5), ("labels", 6), ("loss_mask", 1.0), ("position_ids", 0)):
        batch[key] = torch.cat([batch[key], torch.full((1, 2), extra, dtype=batch[key].dtype)], dim=1)
    result = reference_step(model, batch)
    assert result.unassigned_token_count == 2.0
    assert result.token_count == 6.0
    assert result.to_dict()["unassigned_token_count"] == 2.0


def test_split_sequences_accounts_for_every_sequence(batch: dict) -> None:
    pieces = split_sequences(batch)
    assert [p["tokens"].shape[1] for p in pieces] == LENGTHS + [0]
    assert [p["sequence_index"] for p in pieces] == list(range(len(LENGTHS) + 1))
    assert all(p["position_ids"][0].tolist() == list(range(n)) for p, n in zip(pieces, LENGTHS))


def test_wrong_alignment_for_cp_is_rejected(model: TinyGPT) -> None:
    cp1 = make_thd_batch(random_sequences(LENGTHS, seed=21, prompt=PROMPTS), derive_alignment(cp=1).pad_seq_to_mult)
    logits = packed_forward(model, cp1)
    losses = token_cross_entropy(logits, cp1["labels"][0], cp1["loss_mask"][0])
    with pytest.raises(AlignmentError, match="sequence 0 has physical length 5, not a multiple of 2\\*CP=4"):
        cp_rank_pieces(losses, cp1["loss_mask"][0], cp1["cu_seqlens_q"], 2)


def test_seeded_init_and_float32_option(batch: dict) -> None:
    a, b, c = TinyGPT(seed=1), TinyGPT(seed=1), TinyGPT(seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embedding, c.embedding)
    f32 = TinyGPT(seed=1, dtype=torch.float32)
    assert f32.embedding.dtype == torch.float32
    assert reference_step(f32, batch).loss == pytest.approx(reference_step(a, batch).loss, rel=1e-5)


def test_config_and_input_checks() -> None:
    with pytest.raises(UsageError):
        TinyGPTConfig(hidden_size=30, num_heads=4)
    with pytest.raises(UsageError):
        TinyGPTConfig(num_layers=0)
    model = TinyGPT(TinyGPTConfig(vocab_size=8, hidden_size=8, num_heads=2, ffn_hidden_size=8), seed=0)
    with pytest.raises(UsageError, match="token ids"):
        model(torch.tensor([9]), torch.tensor([0]), torch.ones(1, 1, dtype=torch.bool))


# --- optional GPU backend (Megatron-Core + Transformer Engine) ---------------------------------


def test_te_status_reports_what_is_missing() -> None:
    from seqpack.training.te_backend import te_status

    status = te_status()
    assert status.ready == (not status.missing)
    assert status.ready == (torch.cuda.is_available() and status.transformer_engine is not None)
    if not torch.cuda.is_available():
        assert "a CUDA device" in status.missing
    assert status.to_dict()["torch"] == torch.__version__


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_te_partition_kernel_matches_ours() -> None:
    pytest.importorskip("transformer_engine_torch")
    from seqpack.training.te_backend import compare_partition_indices

    rows = compare_partition_indices([([0, 8, 12, 16], 2), ([0, 4, 12, 24], 2), ([0, 8, 24], 4)])
    assert len(rows) == 8 and all(r["equal"] for r in rows)

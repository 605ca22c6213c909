"""Two padding layouts Megatron-Bridge users reach for, built by the THD builder and run through the CPU oracle.

* ``fold_alignment_padding`` (Megatron-Bridge PR #6127's option, for heads of 256 and wider: FlashAttention
  rejects THD bins with padding between sequences): the logical boundaries become the physical ones, the
  padding stays loss-masked and in ``padding_mask``, and the real tokens compute exactly what they compute
  alone (the padding follows each sequence's last token, so causal attention never reads it).
* tail-only padding (Megatron-Bridge #5630, TransformerEngine #3331): every sequence aligned, the row longer
  than their sum, so logical and physical boundaries differ only in the last entry; the batch must say
  ``pad_between_seqs`` explicitly, and packed still equals unpacked.

Negative controls: attention over the whole row (the boundaries ignored) fails the oracle in both layouts,
and a ``pad_between_seqs`` inferred from all but the last entry misses the tail-only case.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from seqpack.packing.thd import build_thd_batch
from seqpack.training.equivalence import compare_packed_unpacked, packed_row, unpacked_row
from seqpack.training.model import TinyGPT, TinyGPTConfig
from seqpack.training.packed_seq_params import pad_between_seqs, packed_seq_params_kwargs
from tests.distributed.thd_helpers import random_sequences

TOL = 1e-9


@pytest.fixture(scope="module")
def model() -> TinyGPT:
    return TinyGPT(TinyGPTConfig(num_heads=2), seed=7)


def _rows(seqs):
    return [{k: torch.tensor(v) for k, v in s.items()} for s in seqs]


def _oracle(model, batch, seqs, *, mode: str = "thd"):
    """Packed (boundaries as the batch gives them; compared tokens: those padding_mask calls real) vs alone."""
    row = packed_row(batch, mode=mode)
    real = ~batch["padding_mask"][0]
    # number the compared sequences by the real tokens, whatever the batch calls a sequence
    seg = torch.full_like(row.segments, -1)
    starts = batch["cu_seqlens_q_padded" if "cu_seqlens_q_padded" in batch else "cu_seqlens_q"].tolist()
    for k, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        if k < len(seqs):
            seg[a:b] = torch.where(real[a:b], torch.full_like(seg[a:b], k), seg[a:b])
    row = dataclasses.replace(row, segments=seg)
    unpacked = [unpacked_row(s, j) for j, s in enumerate(seqs)]
    return compare_packed_unpacked(model, [row], unpacked, list(range(len(seqs))), seed=1)


def test_fold_reports_physical_lengths_and_keeps_the_padding_masked():
    seqs = random_sequences([5, 11, 3], seed=1, prompt=[1, 2, 1])
    plain = build_thd_batch(_rows(seqs), pad_seq_to_mult=4)
    folded = build_thd_batch(_rows(seqs), pad_seq_to_mult=4, fold_alignment_padding=True)
    assert plain["cu_seqlens_q"].tolist() == [0, 5, 16, 19] and plain["cu_seqlens_q_padded"].tolist() == [0, 8, 20, 24]
    assert folded["cu_seqlens_q"].tolist() == [0, 8, 20, 24] and "cu_seqlens_q_padded" not in folded
    for key in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
        assert torch.equal(plain[key], folded[key]), key
    assert int(folded["padding_mask"].sum()) == 5 and float(folded["loss_mask"][folded["padding_mask"]].sum()) == 0
    assert packed_seq_params_kwargs(folded)["cu_seqlens_q_padded"] is None and not pad_between_seqs(folded)
    # fixed width: the trailing padding becomes a (padding-only) sequence of its own length
    wide = build_thd_batch(_rows(seqs), pad_seq_to_mult=4, max_length=32, pad_to_max_length=True,
                           slack="pad_sequence", fold_alignment_padding=True)
    assert wide["cu_seqlens_q"].tolist() == [0, 8, 20, 24, 32] and bool(wide["padding_mask"][0, 24:].all())


def test_folded_batches_train_like_unpacked_and_a_leak_is_caught(model):
    seqs = random_sequences([5, 11, 3, 7], seed=2, prompt=[1, 2, 1, 3])
    folded = build_thd_batch(_rows(seqs), pad_seq_to_mult=8, fold_alignment_padding=True)
    res = _oracle(model, folded, seqs)
    assert res.ok(TOL) and res.sequences == 4 and res.max_output_diff < 1e-12, res
    leaky = _oracle(model, folded, seqs, mode="causal")  # negative control: one causal mask over the whole row
    assert not leaky.ok(TOL) and leaky.max_output_diff > 1e-3


def test_tail_only_padding_says_pad_between_seqs_and_trains_like_unpacked(model):
    seqs = random_sequences([4, 8, 12], seed=3, prompt=[1, 1, 2])  # all multiples of 4
    for slack in ("pad_sequence", "last_segment"):
        batch = build_thd_batch(_rows(seqs), pad_seq_to_mult=4, max_length=32, pad_to_max_length=True, slack=slack)
        logical, physical = batch["cu_seqlens_q"].tolist(), batch["cu_seqlens_q_padded"].tolist()
        # the two boundary arrays differ only in their last entry
        assert logical[:-1] == physical[:-1] and logical[-1] != physical[-1], (slack, logical, physical)
        assert pad_between_seqs(batch) is True
        # negative control: an inference that ignores the last entry (the TE #3331 failure) says False
        inferred = any(a != b for a, b in zip(logical[:-1], physical[:-1]))
        assert inferred is False
        explicit = {**batch, "pad_between_seqs": pad_between_seqs(batch)}
        assert packed_seq_params_kwargs(explicit)["pad_between_seqs"] is True
        res = _oracle(model, batch, seqs)
        assert res.ok(TOL) and res.sequences == 3, (slack, res)
        assert not _oracle(model, batch, seqs, mode="causal").ok(TOL)
    # a row without any padding needs no flag; a batch key of the wrong type is refused
    exact = build_thd_batch(_rows(seqs), pad_seq_to_mult=4)
    assert pad_between_seqs(exact) is False and packed_seq_params_kwargs(exact)["pad_between_seqs"] is None
    from seqpack.core.errors import InputError

    with pytest.raises(InputError, match="pad_between_seqs"):
        packed_seq_params_kwargs({**exact, "pad_between_seqs": "yes"})


def test_in_batch_and_global_batch_fold_through_the_builder():
    from seqpack.packing.global_batch.packs import build_pack_batch
    from seqpack.packing.global_batch.samples import make_unpacked_sample
    from seqpack.packing.in_batch import InBatchPackingCollator

    seqs = random_sequences([5, 11, 3], seed=4, prompt=[1, 2, 1])
    items = [{**r, "row_index": i} for i, r in enumerate(_rows(seqs))]
    plain = InBatchPackingCollator(4, seq_length=32)(items)
    folded = InBatchPackingCollator(4, seq_length=32, fold_alignment_padding=True)(items)
    assert folded["cu_seqlens_q"].tolist() == plain["cu_seqlens_q_padded"].tolist() == [0, 8, 20, 24]
    assert torch.equal(folded["padding_mask"], plain["padding_mask"]) and "cu_seqlens_q_padded" not in folded
    samples = [make_unpacked_sample(torch.tensor(s["tokens"]), torch.tensor(s["labels"]),
                                     torch.tensor(s["loss_mask"]), pad_seq_to_mult=4) for s in seqs]
    g_plain = build_pack_batch(samples, pad_seq_to_mult=4, capacity=32)
    g_fold = build_pack_batch(samples, pad_seq_to_mult=4, capacity=32, fold_alignment_padding=True)
    assert g_fold["cu_seqlens_q"].tolist() == g_plain["cu_seqlens_q_padded"].tolist()
    assert torch.equal(g_fold["loss_mask"], g_plain["loss_mask"]) and bool(g_fold["padding_mask"].any())


def test_the_rules_of_the_option():
    from seqpack.config import validate_config

    base = ["dataset.enable_in_batch_packing=true", "dataset.kind=direct_hf", "train.micro_batch_size=2",
            "dataset.fold_alignment_padding=true"]
    release = validate_config(None, base)
    assert "PACK-FOLD-ALIGNMENT-BRIDGE-VERSION" in {f.rule_id for f in release.violations}
    main = validate_config(None, base, bridge_version="main")
    assert "PACK-FOLD-ALIGNMENT-MCORE" in {f.rule_id for f in main.warnings} and not main.violations
    offline = validate_config(None, ["dataset.enable_offline_packing=true", "model.seq_length=2048",
                                     "dataset.offline_packing_specs.packed_sequence_size=2048",
                                     "dataset.fold_alignment_padding=true"], bridge_version="main")
    assert "PACK-FOLD-ALIGNMENT-PATH" in {f.rule_id for f in offline.warnings}

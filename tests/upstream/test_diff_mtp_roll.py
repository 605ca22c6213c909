"""Megatron-Core's MTP roll over packed rows, in the lane (megatron-core 0.19.2) and in the product environment
(the installed release the smoke test runs, ``seqpack.training.mtp.upstream_roll_source``): the same map on
every batch, equal to the in-sequence roll without alignment padding and wrong with it
(MTP-PACKED-ALIGNMENT-ROLL: windows of ``cu_seqlens_q`` over a row laid out by the padded boundaries)."""

from __future__ import annotations

import pytest
import torch

from seqpack.training.boundaries import thd_layout
from seqpack.training.mtp import segment_source, segments_of, upstream_roll_source
from seqpack.training.packed_seq_params import packed_seq_params_kwargs
from tests.distributed.thd_helpers import make_thd_batch, random_sequences
from tests.upstream.thd_lane import ask, same_tensor

pytestmark = pytest.mark.slow

LENGTHS = [5, 11, 3, 7]


def _batches() -> list[tuple[int, dict]]:
    return [(m, make_thd_batch(random_sequences(LENGTHS, seed=9), m, trailing_pad=3)) for m in (1, 2, 4, 8)]


def test_the_lanes_roll_is_the_installed_roll_and_wrong_only_with_alignment_padding(upstream) -> None:
    pytest.importorskip("megatron.core")
    batches = _batches()
    cases = [{"numbers": torch.arange(1, b["tokens"].shape[1] + 1, dtype=torch.int64)[None],
              "kwargs": packed_seq_params_kwargs(b)} for _, b in batches]
    answers = ask(upstream, "packed_seq.mtp_roll", cases)
    for (multiple, batch), answer in zip(batches, answers):
        assert "raises" not in answer, answer
        lane = answer["rolled"][0]
        installed = upstream_roll_source(batch)
        assert same_tensor(lane, installed) == "", multiple  # 0.19.2 rolls as the installed release does
        inside = segment_source(segments_of(thd_layout(batch)))
        real = segments_of(thd_layout(batch)) >= 0
        # without padding between sequences the upstream roll stays inside each sequence (on real tokens)
        if multiple == 1:
            assert torch.equal(lane[real], inside[real])
        else:  # the negative side: sequences after the first take inputs and targets from the wrong positions
            assert not torch.equal(lane[real], inside[real]), multiple

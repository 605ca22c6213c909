"""Batch -> PackedSeqParams mapping (Bridge contract section 3.3, oracle items 65-80 that apply)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from seqpack.core.errors import InputError, UsageError
from seqpack.training.boundaries import thd_layout
from seqpack.training.packed_seq_params import packed_seq_params_kwargs, to_packed_seq_params
from seqpack.training.ranks import import_megatron_core
from seqpack.training.step import split_sequences
from tests.distributed.thd_helpers import make_thd_batch, random_sequences

_, PackedSeqParams = import_megatron_core()  # the real dataclass (its fused kernels left uncompiled)

I32 = torch.int32


def t(values: Any) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def assert_cu(actual: torch.Tensor | None, expected: list[int] | None) -> None:
    if expected is None:
        assert actual is None
        return
    assert actual is not None
    assert actual.dtype == I32 and actual.dim() == 1
    assert actual.tolist() == expected


# --- current keys ---------------------------------------------------------------------------


def test_item70_current_keys_with_padded_and_0d_max() -> None:
    batch = {
        "cu_seqlens_q": t([0, 120, 245]),
        "cu_seqlens_kv": t([0, 120, 245]),
        "cu_seqlens_q_padded": t([0, 128, 256]),
        "cu_seqlens_kv_padded": t([0, 128, 256]),
        "max_seqlen_q": torch.tensor(128, dtype=I32),
        "max_seqlen_kv": torch.tensor(128, dtype=I32),
    }
    params = to_packed_seq_params(batch)
    assert isinstance(params, PackedSeqParams)
    assert params.qkv_format == "thd"
    assert_cu(params.cu_seqlens_q, [0, 120, 245])
    assert_cu(params.cu_seqlens_kv, [0, 120, 245])
    assert_cu(params.cu_seqlens_q_padded, [0, 128, 256])
    assert_cu(params.cu_seqlens_kv_padded, [0, 128, 256])
    assert params.max_seqlen_q == 128 and type(params.max_seqlen_q) is int
    assert params.max_seqlen_kv == 128 and type(params.max_seqlen_kv) is int


def test_bridge_offline_form_e1() -> None:
    # Bridge offline collate E1: [1, N] int32 boundaries with a zero-length trailing sequence, [1, 1] max.
    batch = {
        "cu_seqlens_q": t([[0, 5, 8, 8]]),
        "cu_seqlens_kv": t([[0, 5, 8, 8]]),
        "cu_seqlens_q_padded": t([[0, 8, 12, 16]]),
        "cu_seqlens_kv_padded": t([[0, 8, 12, 16]]),
        "max_seqlen_q": t([[8]]),
        "max_seqlen_kv": t([[8]]),
    }
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 5, 8, 8])  # repeated trailing boundary passed through
    assert_cu(params.cu_seqlens_q_padded, [0, 8, 12, 16])
    assert params.max_seqlen_q == 8 and params.max_seqlen_kv == 8


def test_canonical_batch_without_padded_keys() -> None:
    batch = make_thd_batch(random_sequences([3, 5], seed=0), 1)
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 3, 8])
    assert_cu(params.cu_seqlens_kv, [0, 3, 8])
    assert_cu(params.cu_seqlens_q_padded, None)
    assert_cu(params.cu_seqlens_kv_padded, None)
    assert params.max_seqlen_q == 5


def test_canonical_batch_with_alignment() -> None:
    batch = make_thd_batch(random_sequences([3, 5], seed=0), 4)
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 3, 8])
    assert_cu(params.cu_seqlens_q_padded, [0, 4, 12])
    assert_cu(params.cu_seqlens_kv_padded, [0, 4, 12])
    assert params.max_seqlen_q == params.max_seqlen_kv == 8


def test_kv_falls_back_to_q_and_missing_max_is_none() -> None:
    params = to_packed_seq_params({"cu_seqlens_q": [0, 4, 9], "cu_seqlens_q_padded": [0, 4, 12]})
    assert_cu(params.cu_seqlens_kv, [0, 4, 9])
    assert_cu(params.cu_seqlens_kv_padded, [0, 4, 12])
    assert params.max_seqlen_q is None and params.max_seqlen_kv is None


def test_max_seqlen_kv_falls_back_to_q() -> None:
    params = to_packed_seq_params({"cu_seqlens_q": t([0, 3, 8]), "max_seqlen_q": torch.tensor([5])})
    assert params.max_seqlen_kv == 5


def test_item71_two_max_values_rejected() -> None:
    batch = {"cu_seqlens_q": t([0, 64, 128]), "max_seqlen_q": t([64, 64])}
    with pytest.raises(InputError, match="max_seqlen_q must contain exactly one value"):
        to_packed_seq_params(batch)


def test_item78_two_rows_rejected_with_mbs1_message() -> None:
    batch = {"cu_seqlens_q": t([[0, 3, 8], [0, 4, 8]])}
    with pytest.raises(InputError, match="micro-batch size 1") as info:
        to_packed_seq_params(batch)
    assert info.value.field == "cu_seqlens_q"
    assert "[2, 3]" in str(info.value)


@pytest.mark.parametrize(
    ("batch", "field", "needle"),
    [
        ({"cu_seqlens_q": t([1, 3, 8])}, "cu_seqlens_q", "start at 0"),
        ({"cu_seqlens_q": t([0, 5, 3])}, "cu_seqlens_q", "entry 2 is 3 after 5"),
        ({"cu_seqlens_q": torch.tensor([0.0, 3.0])}, "cu_seqlens_q", "integers"),
        ({"cu_seqlens_q": t([0, 3, 8]), "cu_seqlens_q_padded": t([0, 4])}, "cu_seqlens_q_padded", "3 entries"),
        (
            {"cu_seqlens_q": t([0, 3, 8]), "cu_seqlens_q_padded": t([0, 4, 8])},
            "cu_seqlens_q_padded",
            "sequence 1 has 5",
        ),
        ({"cu_seqlens_q": t([0, 3, 8]), "max_seqlen_q": 4}, "max_seqlen_q", "longest physical sequence has 5"),
        ({"tokens": torch.zeros(1, 4)}, "cu_seqlens_q", "no sequence boundaries"),
    ],
)
def test_stricter_checks(batch: dict, field: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as info:
        to_packed_seq_params(batch)
    assert info.value.field == field


def test_not_a_mapping_is_usage_error() -> None:
    with pytest.raises(UsageError):
        to_packed_seq_params([0, 3, 8])  # type: ignore[arg-type]


# --- legacy keys ----------------------------------------------------------------------------


def test_item72_legacy_with_argmin() -> None:
    batch = {"cu_seqlens": t([0, 128, 256, 384, -1, -1]), "cu_seqlens_argmin": torch.tensor(4), "max_seqlen": 128}
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 128, 256, 384])
    assert_cu(params.cu_seqlens_kv, [0, 128, 256, 384])
    assert_cu(params.cu_seqlens_q_padded, None)
    assert_cu(params.cu_seqlens_kv_padded, None)
    assert params.max_seqlen_q == params.max_seqlen_kv == 128


def test_item73_legacy_with_unpadded() -> None:
    batch = {
        "cu_seqlens": t([0, 128, 256, 384, -1, -1]),
        "cu_seqlens_argmin": torch.tensor(4),
        "cu_seqlens_unpadded": t([0, 120, 245, 370, -1, -1]),
        "cu_seqlens_unpadded_argmin": torch.tensor(4),
        "max_seqlen": torch.tensor(128),
    }
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 120, 245, 370])
    assert_cu(params.cu_seqlens_kv, [0, 120, 245, 370])
    assert_cu(params.cu_seqlens_q_padded, [0, 128, 256, 384])
    assert_cu(params.cu_seqlens_kv_padded, [0, 128, 256, 384])


def test_item74_legacy_without_argmin_cuts_at_first_sentinel() -> None:
    batch = {"cu_seqlens": t([0, 128, 256, -1, -1]), "cu_seqlens_unpadded": t([0, 100, 220, -1, -1])}
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 100, 220])
    assert_cu(params.cu_seqlens_q_padded, [0, 128, 256])


def test_item75_legacy_batch_dims() -> None:
    batch = {"cu_seqlens": t([[0, 64, 128, -1]]), "cu_seqlens_argmin": t([[3]]), "max_seqlen": t([[64]])}
    params = to_packed_seq_params(batch)
    assert_cu(params.cu_seqlens_q, [0, 64, 128])
    assert params.max_seqlen_q == 64
    del batch["max_seqlen"]
    assert to_packed_seq_params(batch).max_seqlen_q is None


def test_item76_legacy_single_sequence() -> None:
    params = to_packed_seq_params({"cu_seqlens": t([0, 512, -1])})
    assert_cu(params.cu_seqlens_q, [0, 512])
    assert_cu(params.cu_seqlens_q_padded, None)


def test_legacy_without_sentinels_is_kept_whole() -> None:
    # Bridge would cut at torch.argmin (index 0) and lose every boundary; we keep the array.
    params = to_packed_seq_params({"cu_seqlens": t([0, 4, 8])})
    assert_cu(params.cu_seqlens_q, [0, 4, 8])


def test_legacy_argmin_out_of_range() -> None:
    with pytest.raises(InputError, match="outside the boundary array"):
        to_packed_seq_params({"cu_seqlens": t([0, 4, -1]), "cu_seqlens_argmin": 7})


# --- Megatron-Core version differences --------------------------------------------------------


@dataclasses.dataclass
class FakeParams019:
    """Field set of PackedSeqParams in Megatron-Core 0.19 (plus dev's cp_partition_mode)."""

    qkv_format: str | None = None
    cu_seqlens_q: Any = None
    cu_seqlens_kv: Any = None
    cu_seqlens_q_padded: Any = None
    cu_seqlens_kv_padded: Any = None
    max_seqlen_q: Any = None
    max_seqlen_kv: Any = None
    local_cp_size: Any = None
    cp_group: Any = None
    total_tokens: Any = None
    seq_idx: Any = None
    tokens_per_sample: Any = None
    pad_between_seqs: Any = None
    cp_partition_mode: Any = None


def test_installed_class_gets_only_its_fields() -> None:
    names = {f.name for f in dataclasses.fields(PackedSeqParams)}
    batch = {"cu_seqlens_q": t([0, 5, 7, 11]), "total_tokens": 16, "cp_partition_mode": "zigzag"}
    params = to_packed_seq_params(batch)  # must not raise on 0.16.1, which lacks total_tokens
    assert getattr(params, "total_tokens", None) == (16 if "total_tokens" in names else None)


def test_newer_field_set_receives_total_tokens_and_partition_mode() -> None:
    batch = {"cu_seqlens_q": t([0, 5, 7, 11]), "total_tokens": torch.tensor(16)}
    params = to_packed_seq_params(batch, params_cls=FakeParams019)
    assert params.total_tokens == 16 and type(params.total_tokens) is int
    assert params.cp_partition_mode == "zigzag"  # Bridge's default when the field exists
    batch["cp_partition_mode"] = "contiguous"
    assert to_packed_seq_params(batch, params_cls=FakeParams019).cp_partition_mode == "contiguous"


def test_kwargs_are_bridge_mapping() -> None:
    kwargs = packed_seq_params_kwargs({"cu_seqlens": t([0, 4, 8, -1]), "max_seqlen": 4})
    assert kwargs["qkv_format"] == "thd"
    assert kwargs["total_tokens"] is None
    assert kwargs["cu_seqlens_q"].tolist() == [0, 4, 8]


def test_params_cls_must_be_dataclass() -> None:
    with pytest.raises(UsageError):
        to_packed_seq_params({"cu_seqlens_q": [0, 3]}, params_cls=dict)


# --- boundary reading shared with the rest of the training layer -----------------------------


def test_item65_layout_real_and_physical() -> None:
    with_padded = thd_layout({"cu_seqlens_q": t([0, 3, 8]), "cu_seqlens_q_padded": t([0, 4, 12])})
    assert with_padded.real.tolist() == [0, 3, 8] and with_padded.physical.tolist() == [0, 4, 12]
    without = thd_layout({"cu_seqlens_q": t([0, 3, 8])})
    assert without.real.tolist() == without.physical.tolist() == [0, 3, 8]


def test_item69_split_sequences_takes_real_tokens() -> None:
    batch = {
        "tokens": torch.tensor([[10, 11, 0, 0, 20, 21, 22, 0]]),
        "labels": torch.tensor([[11, 12, 0, 0, 21, 22, 23, 0]]),
        "loss_mask": torch.tensor([[1.0, 1, 0, 0, 1, 1, 1, 0]]),
        "position_ids": torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]]),
        "cu_seqlens_q": t([0, 2, 5]),
        "cu_seqlens_q_padded": t([0, 4, 8]),
    }
    pieces = split_sequences(batch)
    assert [p["tokens"].tolist() for p in pieces] == [[[10, 11]], [[20, 21, 22]]]
    assert [p["labels"].tolist() for p in pieces] == [[[11, 12]], [[21, 22, 23]]]
    assert [p["position_ids"].tolist() for p in pieces] == [[[0, 1]], [[0, 1, 2]]]
    assert [p["cu_seqlens_q"].tolist() for p in pieces] == [[0, 2], [0, 3]]
    seq_id, is_real = thd_layout(batch).token_segments()
    assert seq_id.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert (~is_real).tolist() == [False, False, True, True, False, False, False, True]

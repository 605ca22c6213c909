"""Lane ops: ``PackedSeqParams`` and the context-parallel partition glue of Bridge and Megatron-Core.

Each op reads a JSON list of cases from ``path`` and writes one answer per case to ``out``
(``_thd_codec``; an upstream exception is the answer ``{"raises": true, ...}``).

* ``packed_seq.fields``: the init fields of ``megatron.core.packed_seq_params.PackedSeqParams``;
* ``packed_seq.params``: ``megatron.bridge.training.utils.packed_seq_utils.get_packed_seq_params(batch)``,
  and ``PackedSeqParams(**kwargs)`` built from the keyword arguments seqpack chose for the same
  batch (so ``__post_init__`` fills ``seq_idx`` as it does for Bridge's);
* ``packed_seq.cp_indices``: ``get_packed_seq_cp_partition_indices`` on Bridge's params for the batch;
* ``packed_seq.cp_partition``: ``megatron.bridge.training.gpt_step._partition_packed_batch_for_cp``
  (the GPT step's packed CP split of a whole batch);
* ``packed_seq.cp_mcore``: ``megatron.core.utils.get_batch_on_this_cp_rank(batch, is_hybrid_cp=False)``;
* ``packed_seq.mtp_roll``: Megatron-Core's MTP ``roll_tensor`` over a packed row (positions in, sources out).

The CP ops run under torch's fake process group of the case's size and rank, with
Transformer Engine's partition kernel replaced by the contract stand-in of ``_te_reference``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import torch
from _te_reference import fake_cp_group, te_stand_in
from _thd_codec import decode, encode, raised, run_cases


def op_fields() -> list[str]:
    """Init fields of Megatron-Core's ``PackedSeqParams``, in declaration order."""
    from megatron.core.packed_seq_params import PackedSeqParams

    return [f.name for f in dataclasses.fields(PackedSeqParams) if f.init]


def op_params(path: str, out: str) -> int:
    """For every case ``{"batch", "seqpack_kwargs"}``: ``{"bridge": fields or raises, "seqpack": fields or raises}``."""
    from megatron.bridge.training.utils.packed_seq_utils import get_packed_seq_params
    from megatron.core.packed_seq_params import PackedSeqParams

    def attempt(fn):
        try:
            return encode(fn())
        except Exception as exc:  # noqa: BLE001 - upstream failures are data
            return raised(exc)

    def one(case: dict) -> dict:
        answer = {"bridge": attempt(lambda: get_packed_seq_params(decode(case["batch"])))}
        if case.get("seqpack_kwargs") is not None:
            answer["seqpack"] = attempt(lambda: PackedSeqParams(**decode(case["seqpack_kwargs"])))
        return answer

    return run_cases(path, out, one)


def _grouped(path: str, out: str, one) -> int:
    """Answer cases grouped by ``(cp_size, cp_rank)``, each group under its own fake process group."""
    cases = json.loads(Path(path).read_text(encoding="utf-8"))
    answers: list = [None] * len(cases)

    def key(i: int) -> tuple[int, int]:
        return cases[i]["group_size"], cases[i]["group_rank"]

    with te_stand_in():
        for (size, rank), members in itertools.groupby(sorted(range(len(cases)), key=key), key=key):
            with fake_cp_group(size, rank) as group:
                for i in members:
                    try:
                        answers[i] = one(cases[i], group)
                    except Exception as exc:  # noqa: BLE001 - upstream failures are data
                        answers[i] = raised(exc)
    Path(out).write_text(json.dumps(answers), encoding="utf-8")
    return len(answers)


def op_cp_indices(path: str, out: str) -> int:
    """``get_packed_seq_cp_partition_indices(get_packed_seq_params(batch), total_tokens=, cp_size=, cp_rank=,
    device=cpu, cp_group=group)`` for every case ``{"batch", "total_tokens", "cp_size", "cp_rank",
    "group_size", "group_rank"}``."""
    from megatron.bridge.training.utils.packed_seq_utils import (
        get_packed_seq_cp_partition_indices,
        get_packed_seq_params,
    )

    def one(case: dict, group) -> dict:
        params = get_packed_seq_params(decode(case["batch"]))
        index = get_packed_seq_cp_partition_indices(
            params, total_tokens=case["total_tokens"], cp_size=case["cp_size"], cp_rank=case["cp_rank"],
            device=torch.device("cpu"), cp_group=group)
        return {"index": encode(index)}

    return _grouped(path, out, one)


def op_cp_partition(path: str, out: str) -> int:
    """``gpt_step._partition_packed_batch_for_cp(batch, group)`` for every case ``{"batch", "group_size",
    "group_rank"}``; the answer is the partitioned batch."""
    from megatron.bridge.training.gpt_step import _partition_packed_batch_for_cp

    def one(case: dict, group) -> dict:
        return {"batch": encode(_partition_packed_batch_for_cp(decode(case["batch"]), group))}

    return _grouped(path, out, one)


def op_cp_mcore(path: str, out: str) -> int:
    """``megatron.core.utils.get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=group)`` for every
    case ``{"batch", "group_size", "group_rank"}``."""
    from megatron.core.utils import get_batch_on_this_cp_rank

    def one(case: dict, group) -> dict:
        return {"batch": encode(get_batch_on_this_cp_rank(decode(case["batch"]), is_hybrid_cp=False, cp_group=group))}

    return _grouped(path, out, one)


def op_mtp_roll(path: str, out: str) -> int:
    """``megatron.core.transformer.multi_token_prediction.roll_tensor(numbers, shifts=-1, dims=-1,
    packed_seq_params=PackedSeqParams(**kwargs))`` for every case ``{"numbers", "kwargs"}``: how this
    Megatron-Core rolls MTP inputs and targets over a packed row (the numbers are the positions 1..T)."""
    from megatron.core.packed_seq_params import PackedSeqParams
    from megatron.core.transformer.multi_token_prediction import roll_tensor

    fields = {f.name for f in dataclasses.fields(PackedSeqParams) if f.init}

    def one(case: dict) -> dict:
        kwargs = {k: v for k, v in decode(case["kwargs"]).items() if k in fields}
        rolled, _ = roll_tensor(decode(case["numbers"]), shifts=-1, dims=-1, cp_group=None,
                                packed_seq_params=PackedSeqParams(**kwargs))
        return {"rolled": encode(rolled)}

    return run_cases(path, out, one)

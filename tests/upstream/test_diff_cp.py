"""seqpack's context-parallel split against Megatron-Bridge 0.6.2's and Megatron-Core 0.19.2's CP glue,
running in the lane.

Compared, for CP 1, 2 and 4 and every rank:

* ``get_packed_seq_cp_partition_indices(get_packed_seq_params(batch), ...)`` (Bridge) vs the
  positions ``slice_thd_batch_for_cp`` keeps of an index row (``tokens = arange(T)``, the way Bridge
  computes its indices), group checks included;
* ``gpt_step._partition_packed_batch_for_cp(batch, group)`` (Bridge's GPT step) vs
  ``slice_thd_batch_for_cp(batch, cp, rank)`` on whole batches (canonical, offline ``[1, N]`` and
  legacy keys, padding mask and extra per-token keys);
* ``megatron.core.utils.get_batch_on_this_cp_rank(batch, is_hybrid_cp=False)`` (per-document split
  with ``cu_seqlens``/``cu_seqlens_padded``; the per-sequence zigzag without them) vs
  ``slice_thd_batch_for_cp`` on the canonical batch.

With CP > 1 the upstream code calls Transformer Engine's CUDA kernel ``thd_get_partitioned_indices``;
the lane puts a stand-in written from TE's documented contract in its place
(``lanes/upstream/seqpack_lane/ops/_te_reference.py``) and uses torch's single-process fake process
group of the requested size and rank. What is compared is the glue: which boundaries reach the
kernel, with which token count, which keys are split, and the group checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import SeqpackError
from seqpack.packing.thd import build_thd_batch
from seqpack.packing.thd_compat import to_bridge_offline_batch, to_legacy_batch
from seqpack.training.context_parallel import slice_thd_batch_for_cp
from seqpack_lane.differences import BRIDGE_CP_INDICES, BRIDGE_CP_PARTITION, MCORE_CP_BATCH
from tests.upstream.thd_lane import ask, same_tensor, upstream_raised

pytestmark = pytest.mark.slow

SETTINGS = dict(derandomize=True, database=None, deadline=None)
UNDEFINED = "OutsideTEContract"  # the stand-in's answer where TE's result is not defined


class Group:
    """What seqpack reads from a process group: rank() and size()."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def packed_batch(lengths: list[int], m: int, seed: int, *, extra: bool = False) -> dict:
    """A canonical batch with random token values (sequences of ``lengths`` aligned to ``m``)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in lengths:
        row = {"tokens": rng.integers(0, 100, u), "labels": rng.integers(0, 100, u),
               "loss_mask": rng.integers(0, 2, u).astype(np.float32)}
        if extra:
            row["token_type_ids"] = rng.integers(0, 3, u)
        rows.append(row)
    return build_thd_batch(rows, pad_seq_to_mult=m, extra_pad_values={"token_type_ids": 0} if extra else None)


def boundary_keys(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k.startswith(("cu_seqlens", "max_seqlen"))}


def in_form(batch: dict, form: str, m: int) -> dict:
    """``batch`` with its boundaries in the canonical, Bridge-offline or legacy form (row tensors kept)."""
    if form == "canonical":
        return dict(batch)
    if form == "offline":
        out = to_bridge_offline_batch([batch], emit_padded_keys=m > 1)
        return {k: v for k, v in out.items() if v is not None and k != "token_count"}
    legacy = to_legacy_batch(batch, capacity=batch["cu_seqlens_q"].numel() + 2)
    if form == "legacy_no_argmin":
        legacy = {k: v for k, v in legacy.items() if not k.endswith("_argmin")}
    return legacy


def ranks_of(cp: int) -> list[int]:
    return list(range(cp))


# ------------------------------------------------------------------------------------------------
# get_packed_seq_cp_partition_indices


@st.composite
def index_cases(draw) -> dict:
    cp = draw(st.sampled_from([1, 2, 2, 4, 4]))
    n = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    m = draw(st.sampled_from([2 * cp] * 3 + [4 * cp] * 2 + [max(1, cp), 3]))  # mostly aligned for this CP
    odd = draw(st.integers(0, 15))  # now and then a token count or a group that does not match
    return {"cp": cp, "lengths": lengths, "m": m, "seed": draw(st.integers(0, 2**31)),
            "form": draw(st.sampled_from(["canonical", "offline", "legacy"])),
            "total_shift": {0: 2 * cp, 1: -2 * cp}.get(odd, 0),
            "group": {2: "other_rank", 3: "other_size"}.get(odd, "same")}


def index_requests(case: dict) -> list[dict]:
    """One request per rank of the case's CP size."""
    batch = in_form(packed_batch(case["lengths"], case["m"], case["seed"]), case["form"], case["m"])
    width = int(batch["tokens"].shape[1])
    total = max(1, width + case["total_shift"])
    out = []
    for rank in ranks_of(case["cp"]):
        size, g_rank = case["cp"], rank
        if case["group"] == "other_rank" and case["cp"] > 1:
            g_rank = (rank + 1) % case["cp"]
        elif case["group"] == "other_size":
            size, g_rank = case["cp"] * 2, rank
        out.append({"batch": boundary_keys(batch), "total_tokens": total, "cp_size": case["cp"], "cp_rank": rank,
                    "group_size": size, "group_rank": g_rank})
    return out


def seqpack_indices(request: dict):
    index_batch = {"tokens": torch.arange(request["total_tokens"]).unsqueeze(0), **request["batch"]}
    try:
        out = slice_thd_batch_for_cp(index_batch, request["cp_size"], request["cp_rank"],
                                     cp_group=Group(request["group_rank"], request["group_size"]))
    except SeqpackError as err:
        return None, err
    return out["tokens"][0], None


def compare_indices(compat, request: dict, answer: dict) -> None:
    ours, err = seqpack_indices(request)
    if upstream_raised(answer) or err is not None:
        if upstream_raised(answer) and err is not None:
            if answer["type"] == UNDEFINED:
                compat.by_design(BRIDGE_CP_INDICES, "cp-total-tokens-past-last-boundary")
            else:
                compat.equal(BRIDGE_CP_INDICES)
            return
        compat.check(BRIDGE_CP_INDICES, False, detail=f"{request}: Bridge {answer}; seqpack {err!r}")
        return
    why = same_tensor(answer["index"], ours)
    compat.check(BRIDGE_CP_INDICES, not why, detail=f"{request['cp_size']}/{request['cp_rank']}: {why}")


@settings(max_examples=8, **SETTINGS)
@given(st.lists(index_cases(), min_size=12, max_size=12))
def test_cp_partition_indices_equal_bridges(upstream, compat, cases):
    requests = [r for c in cases for r in index_requests(c)]
    for request, answer in zip(requests, ask(upstream, "packed_seq.cp_indices", requests)):
        compare_indices(compat, request, answer)


def test_cp_partition_indices_fixed_cases(upstream, compat):
    """TE's worked examples (contract §4.2) through Bridge's glue, CP 2 and 4, every rank, and its refusals."""
    worked = {"cu_seqlens_q": torch.tensor([0, 3, 8, 19], dtype=torch.int32),
              "cu_seqlens_q_padded": torch.tensor([0, 4, 12, 24], dtype=torch.int32),
              "max_seqlen_q": 12}
    two = {"cu_seqlens_q": torch.tensor([0, 8, 24], dtype=torch.int32), "max_seqlen_q": 16}
    requests = [{"batch": worked, "total_tokens": 24, "cp_size": 2, "cp_rank": r, "group_size": 2, "group_rank": r}
                for r in range(2)]
    requests += [{"batch": two, "total_tokens": 24, "cp_size": 4, "cp_rank": r, "group_size": 4, "group_rank": r}
                 for r in range(4)]
    misaligned = {"cu_seqlens_q": torch.tensor([0, 6, 12], dtype=torch.int32), "max_seqlen_q": 6}
    requests.append({"batch": misaligned, "total_tokens": 12, "cp_size": 2, "cp_rank": 0, "group_size": 2,
                     "group_rank": 0})
    int64 = {"cu_seqlens_q": torch.tensor([0, 8, 24], dtype=torch.int64), "max_seqlen_q": 16}
    requests.append({"batch": int64, "total_tokens": 24, "cp_size": 2, "cp_rank": 1, "group_size": 2, "group_rank": 1})
    answers = ask(upstream, "packed_seq.cp_indices", requests)
    assert answers[0]["index"].tolist() == [0, 3, 4, 5, 10, 11, 12, 13, 14, 21, 22, 23]
    assert answers[1]["index"].tolist() == [1, 2, 6, 7, 8, 9, 15, 16, 17, 18, 19, 20]
    assert answers[2]["index"].tolist() == [0, 7, 8, 9, 22, 23]
    assert answers[5]["index"].tolist() == [3, 4, 14, 15, 16, 17]
    assert upstream_raised(answers[6]) and "device-side assert" in answers[6]["message"]
    assert upstream_raised(answers[7]) and "int32" in answers[7]["message"]
    for request, answer in zip(requests, answers):
        compare_indices(compat, request, answer)


# ------------------------------------------------------------------------------------------------
# gpt_step._partition_packed_batch_for_cp


@st.composite
def partition_cases(draw) -> dict:
    cp = draw(st.sampled_from([2, 4]))
    n = draw(st.integers(1, 5))
    return {"cp": cp, "lengths": draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)),
            "m": draw(st.sampled_from([2 * cp, 4 * cp])), "seed": draw(st.integers(0, 2**31)),
            "form": draw(st.sampled_from(["canonical", "offline", "legacy", "legacy_no_argmin"])),
            "extra": draw(st.booleans()), "wider": draw(st.integers(0, 9)) == 0}


def partition_batch(case: dict) -> dict:
    batch = in_form(packed_batch(case["lengths"], case["m"], case["seed"], extra=case["extra"]), case["form"], case["m"])
    if case["wider"]:  # a row wider than its last boundary
        pad = 2 * case["cp"]
        for key in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask", "token_type_ids"):
            if key in batch:
                batch[key] = torch.cat([batch[key], batch[key][:, :pad]], dim=1)
    return batch


def compare_partition(compat, request: dict, answer: dict) -> None:
    cp, rank = request["group_size"], request["group_rank"]
    try:
        ours, err = slice_thd_batch_for_cp(request["batch"], cp, rank), None
    except SeqpackError as e:
        ours, err = None, e
    if upstream_raised(answer) or err is not None:
        both = upstream_raised(answer) and err is not None
        if both and answer["type"] == UNDEFINED:
            compat.by_design(BRIDGE_CP_PARTITION, "cp-partition-total-tokens-past-last-boundary")
        else:
            compat.check(BRIDGE_CP_PARTITION, both, detail=f"Bridge {answer}; seqpack {err!r}")
        return
    theirs = answer["batch"]
    diffs = [f"{k}: {same_tensor(theirs[k], ours[k])}" for k in request["batch"]
             if isinstance(request["batch"][k], torch.Tensor) and same_tensor(theirs[k], ours[k])]
    diffs += [f"{k} missing" for k in request["batch"] if k not in theirs or k not in ours]
    compat.check(BRIDGE_CP_PARTITION, not diffs, detail=f"CP{cp} rank {rank}: {diffs}")


@settings(max_examples=6, **SETTINGS)
@given(st.lists(partition_cases(), min_size=10, max_size=10))
def test_cp_batch_partition_equals_bridges_gpt_step(upstream, compat, cases):
    requests = [{"batch": partition_batch(c), "group_size": c["cp"], "group_rank": r} for c in cases
                for r in ranks_of(c["cp"])]
    for request, answer in zip(requests, ask(upstream, "packed_seq.cp_partition", requests)):
        compare_partition(compat, request, answer)


def test_cp_batch_partition_fixed_cases(upstream, compat):
    good = packed_batch([3, 5, 11], 4, 0)
    bad_start = dict(good, cu_seqlens_q_padded=torch.tensor([2, 4, 12, 24], dtype=torch.int32),
                     cu_seqlens_kv_padded=torch.tensor([2, 4, 12, 24], dtype=torch.int32))
    short = dict(good, cu_seqlens_q_padded=torch.tensor([0, 4, 8, 24], dtype=torch.int32),
                 cu_seqlens_kv_padded=torch.tensor([0, 4, 8, 24], dtype=torch.int32))  # sequence 1: 5 real, 4 slots
    two_rows = dict(good, cu_seqlens_q=torch.stack([good["cu_seqlens_q"]] * 2),
                    cu_seqlens_q_padded=torch.stack([good["cu_seqlens_q_padded"]] * 2))
    requests = [{"batch": good, "group_size": 2, "group_rank": r} for r in range(2)]
    requests += [{"batch": b, "group_size": 2, "group_rank": 0} for b in (bad_start, short, two_rows)]
    answers = ask(upstream, "packed_seq.cp_partition", requests)
    assert upstream_raised(answers[2]) and "device-side assert" in answers[2]["message"]  # 2 % (2*CP) != 0
    assert upstream_raised(answers[4]) and "micro-batch size 1" in answers[4]["message"]
    before = dict(compat.counts[BRIDGE_CP_PARTITION])
    for i in (0, 1, 2, 4):  # two equal splits; two batches both sides refuse
        compare_partition(compat, requests[i], answers[i])
    assert compat.counts[BRIDGE_CP_PARTITION]["equal"] == before.get("equal", 0) + 4
    # a sequence with more real tokens than physical slots: Bridge splits by the padded array alone
    assert not upstream_raised(answers[3])
    with pytest.raises(SeqpackError, match="physical slots"):
        slice_thd_batch_for_cp(short, 2, 0)
    compat.by_design(BRIDGE_CP_PARTITION, "cp-partition-stricter-boundaries")


# ------------------------------------------------------------------------------------------------
# megatron.core.utils.get_batch_on_this_cp_rank


@st.composite
def mcore_cases(draw) -> dict:
    cp = draw(st.sampled_from([2, 4]))
    n = draw(st.integers(1, 5))
    return {"cp": cp, "lengths": draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)),
            "m": draw(st.sampled_from([2 * cp, 4 * cp])), "seed": draw(st.integers(0, 2**31)),
            "mode": draw(st.sampled_from(["per_document", "per_document", "per_sequence"]))}


SEQUENCE_KEYS = ("tokens", "labels", "loss_mask", "position_ids")


def mcore_requests(case: dict) -> list[tuple[dict, dict]]:
    """(seqpack's canonical batch, Megatron-Core's batch) per rank."""
    batch = packed_batch(case["lengths"], case["m"], case["seed"])
    mine = {k: batch[k] for k in SEQUENCE_KEYS}
    if case["mode"] == "per_sequence":  # no boundaries: one zigzag over the whole row
        width = int(batch["tokens"].shape[1])
        mine.update(cu_seqlens_q=torch.tensor([0, width], dtype=torch.int32),
                    cu_seqlens_kv=torch.tensor([0, width], dtype=torch.int32), max_seqlen_q=width, max_seqlen_kv=width)
        theirs = {**{k: batch[k] for k in SEQUENCE_KEYS}, "cu_seqlens": None, "cu_seqlens_padded": None,
                  "max_seqlen": None}
    else:
        mine.update(boundary_keys(batch))
        padded = batch.get("cu_seqlens_q_padded")
        theirs = {**{k: batch[k] for k in SEQUENCE_KEYS}, "cu_seqlens": batch["cu_seqlens_q"].unsqueeze(0),
                  "cu_seqlens_padded": None if padded is None else padded.unsqueeze(0),
                  "max_seqlen": torch.tensor([batch["max_seqlen_q"]], dtype=torch.int32)}
    return [(mine, {"batch": theirs, "group_size": case["cp"], "group_rank": r}) for r in ranks_of(case["cp"])]


@settings(max_examples=6, **SETTINGS)
@given(st.lists(mcore_cases(), min_size=10, max_size=10))
def test_cp_split_equals_mcores_get_batch_on_this_cp_rank(upstream, compat, cases):
    pairs = [p for c in cases for p in mcore_requests(c)]
    answers = ask(upstream, "packed_seq.cp_mcore", [r for _, r in pairs])
    for (mine, request), answer in zip(pairs, answers):
        assert not upstream_raised(answer), answer
        ours = slice_thd_batch_for_cp(mine, request["group_size"], request["group_rank"])
        theirs = answer["batch"]
        diffs = [f"{k}: {same_tensor(theirs[k], ours[k])}" for k in SEQUENCE_KEYS if same_tensor(theirs[k], ours[k])]
        for key in ("cu_seqlens", "cu_seqlens_padded", "max_seqlen"):  # metadata stays global
            given_value = request["batch"][key]
            if given_value is not None and same_tensor(theirs[key], given_value):
                diffs.append(f"Megatron-Core changed {key}")
        compat.check(MCORE_CP_BATCH, not diffs, detail=f"CP{request['group_size']} rank {request['group_rank']}: {diffs}")


def test_comparison_catches_a_difference(upstream):
    """Negative control: another rank's, another CP size's or the real boundaries' split differs from Bridge's."""
    batch = boundary_keys(packed_batch([3, 5, 11], 4, 0))
    request = {"batch": batch, "total_tokens": 24, "cp_size": 2, "cp_rank": 0, "group_size": 2, "group_rank": 0}
    (answer,) = ask(upstream, "packed_seq.cp_indices", [request])
    assert same_tensor(answer["index"], seqpack_indices(request)[0]) == ""
    assert same_tensor(answer["index"], seqpack_indices(dict(request, cp_rank=1, group_rank=1))[0])
    real = {k: v for k, v in batch.items() if "padded" not in k}
    assert same_tensor(answer["index"], seqpack_indices(dict(request, batch=real, total_tokens=19))[0])

"""seqpack's ``to_packed_seq_params`` against Megatron-Bridge 0.6.2's ``get_packed_seq_params``, running in
the lane with Megatron-Core 0.19.2's ``PackedSeqParams``.

For each batch, seqpack chooses the keyword arguments exactly as ``to_packed_seq_params`` does for a
class with the lane's ``PackedSeqParams`` fields; the lane builds the real Megatron-Core 0.19.2
object from them (so ``__post_init__`` fills ``seq_idx``) and Bridge's own object for the same batch.
Every field is compared (qkv format, the four boundary arrays with their dtypes, both max lengths,
``total_tokens``, ``seq_idx``, ``local_cp_size``, ``cp_group``, ``tokens_per_sample``,
``pad_between_seqs``). Batches: the canonical batch, Bridge's in-batch form (0-d max lengths,
``total_tokens``), Bridge's offline ``[1, N]`` form with and without ``pad_cu_seqlens`` static
shapes, and the legacy ``cu_seqlens`` / ``cu_seqlens_unpadded`` keys with and without sentinels and
``*_argmin``; then missing kv keys, int64 boundaries, ``total_tokens`` forms, and corrupted batches.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import SeqpackError
from seqpack.packing.thd import build_thd_batch
from seqpack.packing.thd_compat import to_bridge_offline_batch, to_legacy_batch
from seqpack.training.packed_seq_params import to_packed_seq_params
from seqpack_lane.differences import BRIDGE_PSP
from tests.upstream.thd_lane import ask, same_tensor, upstream_raised

pytestmark = pytest.mark.slow

SETTINGS = dict(derandomize=True, database=None, deadline=None)
FORMS = ("canonical", "in_batch", "offline", "offline_static", "legacy", "legacy_no_argmin", "legacy_no_sentinel")
VARIANTS = ("none", "none", "none", "drop_kv", "drop_kv_padded", "drop_max_kv", "int64", "total_int",
            "total_int_more", "total_int_less", "total_tensor0d", "total_tensor1", "decreasing", "max_below",
            "two_rows")
#: Variant -> the documented difference it shows (when it shows one).
EXPECTED = {"drop_kv_padded": "psp-kv-padded-fallback", "int64": "psp-int32-boundaries",
            "total_tensor0d": "psp-total-tokens-int", "total_tensor1": "psp-total-tokens-int",
            "decreasing": "psp-stricter-boundaries", "max_below": "psp-stricter-boundaries",
            "two_rows": "psp-stricter-boundaries"}


@pytest.fixture(scope="module")
def lane_params_class(upstream):
    """A stand-in class with exactly the init fields of the lane's PackedSeqParams (for seqpack's field filter)."""
    names = upstream.call("packed_seq.fields")
    assert {"total_tokens", "seq_idx", "pad_between_seqs", "cu_seqlens_q_padded"} <= set(names)
    return dataclasses.make_dataclass("PackedSeqParams", [(n, Any, dataclasses.field(default=None)) for n in names])


def canonical_batch(lengths: list[int], m: int, *, fixed: int | None = None, static: int | None = None) -> dict:
    """A canonical THD batch of sequences of ``lengths`` (zeros), aligned to ``m``."""
    rows = [{"tokens": torch.zeros(u, dtype=torch.int64), "labels": torch.zeros(u, dtype=torch.int64),
             "loss_mask": torch.ones(u)} for u in lengths]
    return build_thd_batch(rows, pad_seq_to_mult=m, max_length=fixed, pad_to_max_length=fixed is not None,
                           slack="pad_sequence", static_num_seqs=static)


def metadata(batch: dict) -> dict:
    """The keys get_packed_seq_params reads."""
    return {k: v for k, v in batch.items() if k.startswith(("cu_seqlens", "max_seqlen", "total_tokens"))}


def batch_in_form(batch: dict, form: str, m: int) -> dict:
    if form == "canonical":
        return metadata(batch)
    if form == "in_batch":
        out = metadata(batch)
        for key in ("max_seqlen_q", "max_seqlen_kv"):
            out[key] = torch.tensor(batch[key], dtype=torch.int32)
        out["total_tokens"] = int(batch["tokens"].shape[1])
        return out
    if form in ("offline", "offline_static"):
        return metadata(to_bridge_offline_batch([batch], emit_padded_keys=m > 1, pad_cu_seqlens=form == "offline_static"))
    n = batch["cu_seqlens_q"].numel()
    legacy = metadata(to_legacy_batch(batch, capacity=n if form == "legacy_no_sentinel" else n + 3))
    if form != "legacy":
        legacy = {k: v for k, v in legacy.items() if not k.endswith("_argmin")}
    return legacy


def apply_variant(batch: dict, variant: str, width: int) -> dict:
    out = dict(batch)
    cu_keys = [k for k in out if k.startswith("cu_seqlens") and not k.endswith("_argmin")]
    if variant == "drop_kv":
        out.pop("cu_seqlens_kv", None)
    elif variant == "drop_kv_padded":
        out.pop("cu_seqlens_kv_padded", None)
    elif variant == "drop_max_kv":
        out.pop("max_seqlen_kv", None)
    elif variant == "int64":
        out.update({k: out[k].to(torch.int64) for k in cu_keys})
    elif variant.startswith("total_"):
        value = {"total_int": width, "total_int_more": width + 5, "total_int_less": max(1, width - 3),
                 "total_tensor0d": width, "total_tensor1": width}[variant]
        out["total_tokens"] = (torch.tensor(value) if variant == "total_tensor0d" else
                               torch.tensor([value]) if variant == "total_tensor1" else value)
    elif variant == "decreasing":
        key = "cu_seqlens_q_padded" if "cu_seqlens_q_padded" in out else "cu_seqlens_q" if "cu_seqlens_q" in out \
            else "cu_seqlens"
        cu = out[key].clone()
        flat = cu.reshape(-1)
        real = int((flat >= 0).cumprod(0).sum())  # entries before the first sentinel
        if real > 2:
            flat[1] = flat[2] + 1  # sequence 1 gets a negative length
        else:
            flat[0] = 1  # the boundaries no longer start at 0
        out[key] = cu
        if key.endswith("_q_padded") or key == "cu_seqlens_q":
            out[key.replace("_q", "_kv")] = cu
    elif variant == "max_below":
        for key in ("max_seqlen_q", "max_seqlen_kv", "max_seqlen"):
            if key in out:
                out[key] = torch.zeros_like(out[key]) if isinstance(out[key], torch.Tensor) else 0
    elif variant == "two_rows":
        out.update({k: torch.cat([out[k].reshape(1, -1)] * 2) for k in cu_keys})
    return out


@st.composite
def psp_cases(draw) -> dict:
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    m = draw(st.sampled_from([1, 1, 2, 4, 8]))
    form = draw(st.sampled_from(FORMS))
    content = sum(-(-u // m) * m for u in lengths)
    fixed = draw(st.sampled_from([None, None, content, content + 2 * m])) if form.startswith("offline") else None
    static = n + 3 if form == "offline_static" else None
    if form == "offline_static" and fixed is None:
        fixed = content + m
    return {"lengths": lengths, "m": m, "form": form, "fixed": fixed, "static": static,
            "variant": draw(st.sampled_from(VARIANTS))}


def build_case(case: dict) -> tuple[dict, int]:
    batch = canonical_batch(case["lengths"], case["m"], fixed=case["fixed"], static=case["static"])
    width = int(batch["tokens"].shape[1])
    return apply_variant(batch_in_form(batch, case["form"], case["m"]), case["variant"], width), width


def seqpack_kwargs(batch: dict, params_cls: type) -> tuple[dict | None, SeqpackError | None]:
    try:
        params = to_packed_seq_params(batch, params_cls=params_cls)
    except SeqpackError as err:
        return None, err
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params) if getattr(params, f.name) is not None}, None


def field_differences(bridge: dict, ours: dict) -> dict[str, str]:
    """Field -> what differs, over every field of either object."""
    out = {}
    for name in sorted(set(bridge) | set(ours)):
        a, b = bridge.get(name), ours.get(name)
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            why = same_tensor(a, b)
            if why:
                out[name] = why
        elif a != b:
            out[name] = f"{a!r} != {b!r}"
    return out


def explained(variant: str, form: str, diffs: dict[str, str], bridge: dict, ours: dict) -> str | None:
    """The documented difference that accounts for exactly ``diffs``, or None."""
    if form == "legacy_no_sentinel" and bridge["cu_seqlens_q"].numel() == 0 and ours["cu_seqlens_q"].numel() > 1:
        return "psp-legacy-without-sentinel"
    expected = EXPECTED.get(variant)
    if expected == "psp-kv-padded-fallback" and set(diffs) == {"cu_seqlens_kv_padded"} and \
            bridge["cu_seqlens_kv_padded"] is None and torch.equal(ours["cu_seqlens_kv_padded"], ours["cu_seqlens_q_padded"]):
        return expected
    if expected == "psp-int32-boundaries" and all(v.startswith("dtype torch.int64 != torch.int32") for v in diffs.values()) \
            and all(same_tensor(bridge[k], ours[k], dtype=False) == "" for k in diffs):
        return expected
    if expected == "psp-total-tokens-int" and set(diffs) == {"total_tokens"} and \
            int(bridge["total_tokens"].reshape(-1)[0]) == ours["total_tokens"]:
        return expected
    return None


def compare(compat, case: dict, answer: dict, err: SeqpackError | None) -> None:
    bridge, ours = answer["bridge"], answer.get("seqpack")
    if upstream_raised(bridge) or err is not None:
        if upstream_raised(bridge) and err is not None:
            compat.equal(BRIDGE_PSP)
        elif err is not None and EXPECTED.get(case["variant"]) == "psp-stricter-boundaries":
            compat.by_design(BRIDGE_PSP, "psp-stricter-boundaries")
        else:
            compat.check(BRIDGE_PSP, False, detail=f"{case}: Bridge {bridge}; seqpack {err!r}")
        return
    assert ours is not None and not upstream_raised(ours), ours  # seqpack's kwargs build the real class
    diffs = field_differences(bridge, ours)
    if not diffs:
        compat.equal(BRIDGE_PSP)
        return
    compat.check(BRIDGE_PSP, False, difference=explained(case["variant"], case["form"], diffs, bridge, ours),
                 detail=f"{case}: {diffs}")


@settings(max_examples=12, **SETTINGS)
@given(st.lists(psp_cases(), min_size=25, max_size=25))
def test_packed_seq_params_equal_bridges(upstream, compat, lane_params_class, cases):
    built = [build_case(c) for c in cases]
    mine = [seqpack_kwargs(b, lane_params_class) for b, _ in built]
    answers = ask(upstream, "packed_seq.params", [{"batch": b, "seqpack_kwargs": k} for (b, _), (k, _) in zip(built, mine)])
    for case, (kwargs, err), answer in zip(cases, mine, answers):
        compare(compat, case, answer, err)


def test_packed_seq_params_fixed_cases(upstream, compat, lane_params_class):
    """The documented differences, each shown on one batch, and the fields Bridge 0.6.2 never sets."""
    aligned = metadata(canonical_batch([4, 8], 4))  # no padding: no padded keys
    padded = metadata(canonical_batch([3, 5, 11], 4))
    cases = [
        ("legacy_no_sentinel", "none", batch_in_form(canonical_batch([3, 5], 4), "legacy_no_sentinel", 4)),
        ("canonical", "drop_kv_padded", apply_variant(padded, "drop_kv_padded", 24)),
        ("canonical", "int64", apply_variant(padded, "int64", 24)),
        ("canonical", "total_tensor0d", apply_variant(padded, "total_tensor0d", 24)),
        ("canonical", "decreasing", apply_variant(padded, "decreasing", 24)),
        ("canonical", "max_below", apply_variant(aligned, "max_below", 12)),
        ("canonical", "two_rows", apply_variant(aligned, "two_rows", 12)),
        ("canonical", "total_int", apply_variant(padded, "total_int", 24)),
    ]
    mine = [seqpack_kwargs(b, lane_params_class) for _, _, b in cases]
    answers = ask(upstream, "packed_seq.params", [{"batch": b, "seqpack_kwargs": k} for (_, _, b), (k, _) in zip(cases, mine)])
    before = dict(compat.counts[BRIDGE_PSP])
    for (form, variant, _), (_, err), answer in zip(cases, mine, answers):
        compare(compat, {"form": form, "variant": variant}, answer, err)
    got = {k: v - before.get(k, 0) for k, v in compat.counts[BRIDGE_PSP].items() if v != before.get(k, 0)}
    assert got == {"psp-legacy-without-sentinel": 1, "psp-kv-padded-fallback": 1, "psp-int32-boundaries": 1,
                   "psp-total-tokens-int": 1, "psp-stricter-boundaries": 3, "equal": 1}, got
    full = answers[-1]["bridge"]
    # Bridge 0.6.2 sets no pad_between_seqs (Bridge main's PR #5610 adds it), and seqpack sets none either
    assert full["pad_between_seqs"] is None and full["tokens_per_sample"] is None and full["local_cp_size"] is None
    assert full["seq_idx"].tolist() == [[0] * 4 + [1] * 8 + [2] * 12]
    assert answers[-1]["seqpack"]["seq_idx"].tolist() == full["seq_idx"].tolist()


def test_comparison_catches_a_difference(upstream, lane_params_class):
    """Negative control: a changed field is reported, and no documented difference explains it."""
    batch = metadata(canonical_batch([3, 5, 11], 4))
    kwargs, err = seqpack_kwargs(batch, lane_params_class)
    wrong = dict(kwargs, max_seqlen_q=kwargs["max_seqlen_q"] + 1,
                 cu_seqlens_q_padded=torch.tensor([0, 4, 12, 28], dtype=torch.int32), total_tokens=24)
    (answer,) = ask(upstream, "packed_seq.params", [{"batch": batch, "seqpack_kwargs": wrong}])
    diffs = field_differences(answer["bridge"], answer["seqpack"])
    assert {"max_seqlen_q", "cu_seqlens_q_padded", "total_tokens", "seq_idx"} <= set(diffs), diffs
    assert explained("none", "canonical", diffs, answer["bridge"], answer["seqpack"]) is None
    assert explained("int64", "canonical", diffs, answer["bridge"], answer["seqpack"]) is None

"""derive_alignment, token slots and equal-slot candidates."""

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqpack.core.alignment import derive_alignment, equal_slot_candidates, round_up, token_slots_per_step
from seqpack.core.errors import UsageError


@pytest.mark.parametrize(
    "tp, cp, sp, eval_cp, expected",
    [
        (1, 1, False, None, 1),
        (4, 1, True, None, 4),
        (4, 2, True, None, 8),
        (2, 2, True, 4, 8),
        (1, 3, False, None, 6),
        (4, 1, False, None, 1),  # SP off: TP does not matter
        (1, 4, True, None, 8),  # SP with TP=1 adds nothing
        (3, 2, True, None, 12),  # lcm(4, 6)
    ],
)
def test_documented_examples(tp, cp, sp, eval_cp, expected):
    al = derive_alignment(tp, cp, sp, eval_cp)
    assert al.pad_seq_to_mult == expected
    assert al.seq_length_multiple == expected
    assert str(expected) in al.explanation


def test_multiples_describe_the_training_topology():
    al = derive_alignment(tp=4, cp=2, sp=True, eval_cp=4)
    assert (al.cp_multiple, al.sp_multiple) == (4, 8)
    assert al.pad_seq_to_mult == 16  # eval CP4: 2*4=8 and 4*4=16


@given(tp=st.integers(1, 8), cp=st.integers(1, 8), sp=st.booleans(), eval_cp=st.one_of(st.none(), st.integers(1, 8)))
def test_pad_seq_to_mult_divisible_for_all_small_topologies(tp, cp, sp, eval_cp):
    m = derive_alignment(tp, cp, sp, eval_cp).pad_seq_to_mult
    for c in {cp, eval_cp or cp}:
        if c > 1:
            assert m % (2 * c) == 0
        if sp and tp > 1:
            assert m % (c * tp) == 0
    # and it is the smallest such multiple
    needs = [2 * c if c > 1 else 1 for c in {cp, eval_cp or cp}] + [c * tp if sp and tp > 1 else 1 for c in {cp, eval_cp or cp}]
    assert m == math.lcm(*needs)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_rejects_non_positive_or_non_int(bad):
    with pytest.raises(UsageError, match="positive integer"):
        derive_alignment(tp=bad)


def test_token_slots_and_equal_slot_table():
    assert token_slots_per_step(8192, 8) == 65536
    rows = equal_slot_candidates(65536)
    assert [(r.pack_size, r.global_batch_size, r.token_slots, r.valid) for r in rows] == [
        (2048, 32, 65536, True),
        (4096, 16, 65536, True),
        (8192, 8, 65536, True),
    ]


def test_equal_slot_candidates_flag_dp_problems():
    rows = {r.pack_size: r for r in equal_slot_candidates(65536, dp=16)}
    assert rows[8192].valid is False and "smaller than DP=16" in rows[8192].reason
    assert rows[4096].valid is True
    rows = {r.pack_size: r for r in equal_slot_candidates(65536, (3000, 4096), dp=3)}
    assert rows[3000].valid is False and "not a multiple" in rows[3000].reason
    assert rows[4096].valid is False and "not divisible by DP=3" in rows[4096].reason


def test_round_up():
    assert [round_up(v, 4) for v in (0, 1, 4, 5)] == [0, 4, 4, 8]


def test_alignment_module_imports_no_heavy_dependency():
    code = "import sys, seqpack.core.alignment, seqpack.config; print(sorted(m for m in ('torch','numpy','pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# required minimum vs recommended value, per path and Megatron-Bridge version


from seqpack.core.alignment import (  # noqa: E402
    ALIGNMENT_PATHS,
    alignment_requirement,
    alignment_table,
    global_batch_multiple,
)


def test_offline_requires_only_the_cp_term_and_recommends_the_lcm():
    for version in ("0.6.2", "main"):
        r = alignment_requirement("offline", tp=4, cp=2, sp=True, bridge_version=version)
        assert (r.required, r.required_width, r.recommended) == (4, 8, 8)
        assert r.enforced == "runtime" and r.available and not r.provisional
        # TP8/CP1/SP: nothing per sequence (the Nemotron-3 Super recipe packs with 1), the width needs 8
        r = alignment_requirement("offline", tp=8, cp=1, sp=True, bridge_version=version)
        assert (r.required, r.required_width, r.recommended) == (1, 8, 8)
    # eval CP joins the CP term
    assert alignment_requirement("offline", tp=1, cp=2, eval_cp=4).required == 8


def test_in_batch_requires_what_bridge_derives():
    for version in ("0.6.2", "main"):
        r = alignment_requirement("in_batch", tp=4, cp=2, sp=True, bridge_version=version)
        assert r.required == r.recommended == r.required_width == 8 and r.enforced == "bridge"
    assert any(c.checkable and "collate_padding_multiple" == c.anchor
               for c in alignment_requirement("in_batch", cp=2).citations)


@pytest.mark.parametrize("tp, cp, sp, dp, dynamic, expected", [
    (2, 2, True, None, False, 8),    # seqpack's old lcm gave 4
    (4, 2, True, None, False, 16),   # lcm gave 8
    (8, 1, True, None, False, 8),
    (1, 4, False, None, False, 8),
    (1, 4, False, 2, False, 8),
    (1, 4, False, 2, True, 16),      # dynamic CP: 2*DP*CP
    (2, 4, True, 2, True, 32),
])
def test_global_batch_on_main_follows_pr_6127s_product(tp, cp, sp, dp, dynamic, expected):
    assert global_batch_multiple(tp, cp, sp, dp=dp, dynamic_cp=dynamic) == expected
    r = alignment_requirement("global_batch", tp, cp, sp, bridge_version="main", dp=dp, dynamic_cp=dynamic)
    assert r.required == r.recommended == expected
    assert r.provisional is dynamic
    if dynamic:
        assert "#6127" in r.required_reason and "#7045" in r.required_reason and "DCP V2" in r.required_reason
    assert r.alignment().pad_seq_to_mult == expected


def test_paths_a_version_lacks_are_unavailable():
    for path in ("global_batch", "energon"):
        r = alignment_requirement(path, tp=2, cp=2, sp=True, bridge_version="0.6.2")
        assert not r.available and r.required is None and r.enforced == "unavailable"
        assert "0.6.2" in r.summary()
    with pytest.raises(UsageError, match="DP"):
        alignment_requirement("global_batch", cp=2, bridge_version="main", dynamic_cp=True)
    with pytest.raises(UsageError, match="packing path"):
        alignment_requirement("packed", cp=2)
    with pytest.raises(UsageError, match="Megatron-Bridge version"):
        alignment_requirement("offline", cp=2, bridge_version="0.5")


def test_the_table_covers_every_topology_path_and_version():
    table = alignment_table()
    assert len(table) == 8 * 8 * 2 * len(ALIGNMENT_PATHS) * 2
    for r in table:
        if not r.available:
            continue
        # required never exceeds what is recommended, and divides it
        assert r.recommended % r.required == 0 and r.required_width % r.required == 0, r
        if r.path != "global_batch":
            assert r.recommended == derive_alignment(r.tp, r.cp, r.sp).pad_seq_to_mult
        if r.cp > 1:
            assert r.required % (2 * r.cp) == 0
        # the row width always satisfies the SP scatter: width / CP divisible by TP
        if r.sp:
            assert r.required_width % (r.cp * r.tp) == 0


def test_validate_main_global_batch_cp2_tp2_sp_derives_8():
    from seqpack.config import validate_config

    overrides = [("dataset.enable_global_batch_packing", True), ("model.max_seqlen_per_dp_cp_rank", 4096),
                 ("model.tensor_model_parallel_size", 2), ("model.context_parallel_size", 2),
                 ("model.sequence_parallel", True), ("dist.world_size", 16), ("model.seq_length", 8192)]
    main = validate_config(None, overrides, bridge_version="main").resolved
    assert main["pad_seq_to_mult"] == 8 and main["pad_seq_to_mult_required"] == 8
    assert main["alignment_requirement"]["path"] == "global_batch"
    release = validate_config(None, overrides, bridge_version="0.6.2").resolved
    assert release["alignment_requirement"]["available"] is False
    dynamic = validate_config(None, overrides + [("model.dynamic_context_parallel", True)], bridge_version="main")
    assert dynamic.resolved["pad_seq_to_mult"] == 32  # 2*DP*CP*TP with DP 4
    finding = next(f for f in dynamic.warnings if f.rule_id == "PACK-GLOBAL-DYNAMIC-CP")
    assert "32" in finding.message and "#7045" in finding.message

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

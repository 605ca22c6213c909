"""Reading answers: the final block, free-text fallbacks, the tool's own output formats, contradiction and negation."""

from __future__ import annotations

import pytest

from seqpack_evals.answers import forbidden_hits, grade_answer, split_block
from seqpack_evals.claims import mbs_above_one, offline_plus_in_batch
from seqpack_evals.fields import answer_block, int_field, percent_field, prompt_footer, set_field
from seqpack_evals.vocab import KEY_ALIASES, config_field, rule_ids_field

PAD = int_field("pad_seq_to_mult", 8, *KEY_ALIASES["dataset.offline_packing_specs.pad_seq_to_mult"])
MBS = config_field("train.micro_batch_size", 1)
LOSS = config_field("model.calculate_per_token_loss", True)
EFF = percent_field("packing_efficiency", 92.92, r"(?:packing )?efficiency")
SLOTS = int_field("token_slots_per_step", 65536, r"token slots(?: per step)?")


def _right(field, text):
    (result,) = grade_answer([field], text)
    return result.correct


@pytest.mark.parametrize("text", [
    "```answer\npad_seq_to_mult: 8\n```",
    "Final answer:\npad_seq_to_mult = 8",
    "pad_seq_to_mult = lcm(4, 8) = 8 [2*CP=4; SP with TP=4: CP*TP=8]",  # seqpack align's own line
    "pad_seq_to_mult      8  lcm over train/eval CP of both multiples",  # its table row
    '{"pad_seq_to_mult": 8, "seq_length_multiple": 8}',  # its --json output
    "Set **dataset.offline_packing_specs.pad_seq_to_mult** to `8`.",
    "Pad every sample to a multiple of eight tokens.",
    "The pad_seq_to_mult for TP4/CP2/SP is 8.",
])
def test_right_value_in_the_forms_people_and_tools_write(text):
    assert _right(PAD, text), text


@pytest.mark.parametrize("text", [
    "Set the micro batch size to 1.",
    "Use MBS1.",
    "Drop the micro-batch size to one.",
    "train.micro_batch_size: 1",
    "[PACK-OFFLINE-MBS1] offline packing needs train.micro_batch_size=1 (got 4). Fix: Set train.micro_batch_size=1",
    "Change micro_batch_size from 4 to 1.",
    "micro_batch_size: 4 -> 1",
    "Bridge rejects micro_batch_size=4: set train.micro_batch_size=1.",
])
def test_micro_batch_size_spellings_and_quoted_inputs(text):
    assert _right(MBS, text), text


@pytest.mark.parametrize("text, why", [
    ("Keep micro_batch_size 4.", "a wrong value"),
    ("Set micro_batch_size to 1. Actually micro_batch_size = 2 is better.", "two values"),
    ("Do not set micro_batch_size to 1.", "negated"),
    ("micro_batch_size: 1, 2, 4 or 8", "a list of every value"),
    ("```answer\ntrain.micro_batch_size: 1, 2\n```", "two values in the block"),
    ("The micro batch size can be anything.", "no value"),
])
def test_wrong_contradicted_negated_or_missing(text, why):
    assert not _right(MBS, text), why


@pytest.mark.parametrize("text", [
    # the block is the answer; prose that mentions other values (the old value, rejected alternatives, a before and
    # after, the log's value) is explanation, not a second answer
    "Your config has micro_batch_size 4, which Bridge rejects; 2 would fail too.\n```answer\ntrain.micro_batch_size: 1\n```",
    "Earlier I said 4.\n```answer\ntrain.micro_batch_size: 4\n```\n\nCorrected:\n```answer\ntrain.micro_batch_size: 1\n```",
])
def test_the_final_block_is_the_answer(text):
    assert _right(MBS, text), text


def test_advice_beside_a_right_block_is_a_forbidden_claim_not_a_contradiction():
    text = "```answer\ntrain.micro_batch_size: 1\n```\nYou can also set micro_batch_size to 4."
    assert _right(MBS, text)
    assert forbidden_hits([mbs_above_one("offline packing").check], text)  # the dangerous advice still costs


@pytest.mark.parametrize("text, prompt", [
    # an echo of the question answers nothing: its numbers are the question's, its block the template
    ("We use micro batch size 1? Finish with:\n```answer\ntrain.micro_batch_size: <integer>\n```",
     "We use micro batch size 1? Finish with:\n```answer\ntrain.micro_batch_size: <integer>\n```"),
    ("Our job runs micro_batch_size 1 on eight GPUs, is that right?", "Our job runs micro_batch_size 1 on eight GPUs, is that right?"),
])
def test_an_echo_of_the_question_scores_nothing(text, prompt):
    (result,) = grade_answer([MBS], text, prompt)
    assert not result.correct, result.reason
    (control,) = grade_answer([MBS], text + "\n\nSet micro_batch_size to 1.", prompt)  # the same echo, then an answer
    assert control.correct, control.reason


def test_booleans_numbers_and_units():
    assert _right(LOSS, "Turn the per-token loss on (model.calculate_per_token_loss: true).")
    assert not _right(LOSS, "model.calculate_per_token_loss is not needed; leave it false.")
    assert _right(EFF, "packing efficiency 92.9 %") and _right(EFF, "efficiency: 92.92")
    assert not _right(EFF, "efficiency: 0.929")  # a fraction is never read as a percentage
    assert _right(EFF, "about 93 percent efficiency")  # a value right before the name counts too
    assert not _right(EFF, "packing efficiency 85%")
    assert _right(SLOTS, "64K token slots per step") and _right(SLOTS, "token slots per step: 65,536")
    assert not _right(SLOTS, "token slots per step: 65,535")
    assert _right(SLOTS, "64Ki token slots per step")
    assert _right(PAD, "Every sample is padded to a multiple of eight.")
    assert not _right(PAD, "Pad each sample to a multiple of 8 bytes.")  # a unit the field cannot have


def test_sets_must_be_exact():
    rules = rule_ids_field(["PACK-OFFLINE-MBS1", "CP-FT-PER-TOKEN-LOSS"])
    assert _right(rules, "It breaks PACK-OFFLINE-MBS1 and CP-FT-PER-TOKEN-LOSS.")
    assert not _right(rules, "It breaks PACK-OFFLINE-MBS1.")  # incomplete
    assert not _right(rules, "PACK-OFFLINE-MBS1, CP-FT-PER-TOKEN-LOSS and PACK-IN-BATCH-MBS fire.")  # extra
    assert _right(rules, "PACK-OFFLINE-MBS1 and CP-FT-PER-TOKEN-LOSS fire; PACK-IN-BATCH-MBS does not apply.")
    rows = set_field("rows", ["2", "5"], {str(i): (rf"(?<![\w.]){i}(?![\w.])",) for i in range(8)}, r"\brows?\b",
                     anywhere=False)
    assert _right(rows, "```answer\nrows: 2, 5\n```") and not _right(rows, "```answer\nrows: 2, 5, 7\n```")


def test_the_block_and_the_prompt_footer_agree():
    fields = [PAD, MBS, LOSS]
    footer = prompt_footer(fields)
    assert "```answer\npad_seq_to_mult: <integer>\ntrain.micro_batch_size: <integer>" in footer
    block = answer_block(fields)
    lines, rest = split_block("Some reasoning.\n\n" + block)
    assert [name for name, _ in lines] == ["pad_seq_to_mult", "train.micro_batch_size", "model.calculate_per_token_loss"]
    assert rest.strip() == "Some reasoning."
    assert all(r.correct for r in grade_answer(fields, block))


def test_forbidden_claims_are_advice_not_quotes_or_warnings():
    checks = [mbs_above_one("offline packing").check, offline_plus_in_batch().check]
    assert forbidden_hits(checks, "You can also set train.micro_batch_size to 4 to use the GPUs better.")
    assert forbidden_hits(checks, "Also turn on enable_in_batch_packing: true next to the offline packs.")
    assert not forbidden_hits(checks, "Never set micro_batch_size to 4 with offline packing.")
    assert not forbidden_hits(checks, "Your config sets micro_batch_size to 4, which is rejected.")
    assert not forbidden_hits(checks, "You want to set train.micro_batch_size to 4, but offline packing needs 1.")

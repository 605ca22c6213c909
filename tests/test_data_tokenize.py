"""Row tokenization with the byte tokenizer: budgets, truncation, loss masks, rejections, the shift."""

from __future__ import annotations

import numpy as np
import pytest

from seqpack.data.jsonl import JsonlFile
from seqpack.data.location import RowLocation
from seqpack.data.rejections import REASONS, SampleRejected
from seqpack.data.schemas import ChatSchema, PromptCompletionSchema
from seqpack.data.tokenize import to_training_example, tokenize_row
from seqpack.data.tokenizers import ByteTokenizer
from seqpack.core.errors import InputError, UsageError

TOK = ByteTokenizer()
BOS, EOS, END = ByteTokenizer.BOS, ByteTokenizer.EOS, ByteTokenizer.END_OF_TURN
SYS, USER, ASST = (ByteTokenizer.ROLE_IDS[r] for r in ("system", "user", "assistant"))


def b(text: str) -> list[int]:
    return list(text.encode())


def pc(prompt, completion, max_length=64, truncation="right", **schema):
    row = {"prompt": prompt, "completion": completion}
    return tokenize_row(row, PromptCompletionSchema(**schema), TOK, max_length=max_length, truncation=truncation)


# ----------------------------------------------------------------------------- prompt/completion
def test_completion_mode_masks_prompt_and_trains_separator_completion_and_eos():
    s = pc(" ab ", "cd")
    assert s.input_ids.tolist() == b("ab cd") + [EOS]
    assert s.loss_mask.tolist() == [0, 0, 1, 1, 1, 1]
    assert (s.prompt_length, s.original_length, s.truncated, s.num_supervised) == (2, 6, False, 4)
    assert s.input_ids.dtype == np.int64 and s.loss_mask.dtype == np.int8


def test_full_mode_bos_template_and_no_eos():
    s = pc("hi", "yo", loss_mode="full", add_bos=True, add_eos=False, prompt_template="Q:{prompt}", separator="|")
    assert s.input_ids.tolist() == [BOS] + b("Q:hi|yo")
    assert s.loss_mask.tolist() == [1] * 8
    assert s.prompt_length == 5


# prompt "abcdef" (6) + completion " xyz" (4) + EOS = 11 tokens
@pytest.mark.parametrize(
    "max_length, truncation, ids, mask",
    [
        (11, "right", b("abcdef xyz") + [EOS], [0] * 6 + [1] * 5),
        (8, "right", b("abc xyz") + [EOS], [0, 0, 0, 1, 1, 1, 1, 1]),  # prompt cut first, head kept
        (8, "left", b("def xyz") + [EOS], [0, 0, 0, 1, 1, 1, 1, 1]),  # tail kept
        (4, "right", b(" xy") + [EOS], [1, 1, 1, 1]),  # prompt emptied, then completion head kept
        (4, "left", b("xyz") + [EOS], [1, 1, 1, 1]),  # completion tail kept (separator dropped)
    ],
)
def test_truncation_budget_prompt_first_then_completion(max_length, truncation, ids, mask):
    s = pc("abcdef", "xyz", max_length=max_length, truncation=truncation)
    assert s.input_ids.tolist() == ids and s.loss_mask.tolist() == mask
    assert s.num_tokens == min(11, max_length) and s.original_length == 11
    assert s.truncated == (max_length < 11) and s.num_truncated == 11 - s.num_tokens


def test_budget_counts_bos_and_eos():
    s = pc("abcdef", "xyz", max_length=5, add_bos=True)
    assert s.input_ids.tolist() == [BOS] + b(" xy") + [EOS]
    assert s.loss_mask.tolist() == [0, 1, 1, 1, 1]


def test_reject_policy_and_bad_arguments():
    with pytest.raises(SampleRejected) as info:
        pc("abcdef", "xyz", max_length=10, truncation="reject")
    assert info.value.reason == "too_long" and "11 tokens > max_length 10" in str(info.value)
    assert pc("abcdef", "xyz", max_length=11, truncation="reject").num_tokens == 11
    with pytest.raises(UsageError, match="no room"):
        pc("a", "b", max_length=2, add_bos=True)
    with pytest.raises(UsageError, match=">= 2"):
        pc("a", "b", max_length=1)
    with pytest.raises(UsageError, match="unknown truncation"):
        pc("a", "b", truncation="middle")


def test_separator_space_dropped_for_tokenizers_that_are_not_space_sensitive():
    class NoSpace(ByteTokenizer):
        space_sensitive = False

    s = tokenize_row({"prompt": "ab", "completion": "cd"}, PromptCompletionSchema(), NoSpace(), max_length=16)
    assert s.input_ids.tolist() == b("abcd") + [EOS]


@pytest.mark.parametrize(
    "row, schema, reason",
    [
        ({"prompt": "q", "completion": "   "}, PromptCompletionSchema(), "empty_completion"),
        ({"prompt": "", "completion": "x"}, PromptCompletionSchema(separator="", add_eos=False), "too_short"),
        ({"messages": []}, ChatSchema(), "empty_conversation"),
        ({"messages": [{"role": "user", "content": "hi"}]}, ChatSchema(), "no_assistant_turn"),
        ({"messages": [{"role": "user", "content": "hi"}]}, ChatSchema(loss_mode="last_turn"), "no_assistant_turn"),
    ],
)
def test_rejections_have_reason_codes_and_location(row, schema, reason):
    where = RowLocation(file="f.jsonl", line=7, row=3)
    with pytest.raises(SampleRejected) as info:
        tokenize_row(row, schema, TOK, max_length=32, location=where)
    err = info.value
    assert isinstance(err, InputError) and err.reason == reason and reason in REASONS
    assert (err.file, err.line, err.row) == ("f.jsonl", 7, 3)
    assert str(err).startswith("f.jsonl:7, row 3") and err.to_dict()["reason"] == reason


def test_empty_completion_can_be_allowed():
    s = pc("q", "", allow_empty_completion=True)
    assert s.input_ids.tolist() == b("q ") + [EOS] and s.loss_mask.tolist() == [0, 1, 1]


def test_user_only_chat_is_fine_under_full_loss():
    s = tokenize_row({"messages": [{"role": "user", "content": "hi"}]}, ChatSchema(loss_mode="full"), TOK, max_length=32)
    assert s.input_ids.tolist() == [BOS, USER] + b("hi") + [END] and s.loss_mask.tolist() == [1] * 5


# ----------------------------------------------------------------------------- chat
CHAT = {
    "messages": [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "z"},
    ]
}
CHAT_IDS = [BOS, SYS, *b("S"), END, USER, *b("hi"), END, ASST, *b("yo"), END, USER, *b("ok"), END, ASST, *b("z"), END]


def ones_at(n, positions):
    return [1 if i in positions else 0 for i in range(n)]


@pytest.mark.parametrize(
    "loss_mode, trained",
    [("assistant", {9, 10, 11, 17, 18}), ("last_turn", {17, 18}), ("full", set(range(19)))],
)
def test_chat_loss_modes_exact_masks(loss_mode, trained):
    s = tokenize_row(CHAT, ChatSchema(loss_mode=loss_mode), TOK, max_length=64)
    assert s.input_ids.tolist() == CHAT_IDS
    assert s.loss_mask.tolist() == ones_at(19, trained)
    assert s.prompt_length == 17 and not s.truncated


def test_sharegpt_with_system_renders_like_messages():
    row = {
        "system": "S",
        "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "yo"},
            {"from": "human", "value": "ok"},
            {"from": "gpt", "value": "z"},
        ],
    }
    s = tokenize_row(row, ChatSchema(), TOK, max_length=64)
    assert s.input_ids.tolist() == CHAT_IDS
    assert s.loss_mask.tolist() == ones_at(19, {9, 10, 11, 17, 18})


def test_chat_right_truncation_is_flagged_and_can_leave_nothing_to_train():
    s = tokenize_row(CHAT, ChatSchema(), TOK, max_length=10)
    assert s.input_ids.tolist() == CHAT_IDS[:10] and s.loss_mask.tolist() == ones_at(10, {9})
    assert s.truncated and s.original_length == 19 and s.num_truncated == 9 and s.prompt_length == 10
    with pytest.raises(SampleRejected) as info:
        tokenize_row(CHAT, ChatSchema(), TOK, max_length=9)
    assert info.value.reason == "no_supervised_tokens"


def test_chat_reject_and_left_policies():
    with pytest.raises(SampleRejected) as info:
        tokenize_row(CHAT, ChatSchema(), TOK, max_length=18, truncation="reject")
    assert info.value.reason == "too_long"
    assert tokenize_row(CHAT, ChatSchema(), TOK, max_length=19, truncation="reject").num_tokens == 19
    with pytest.raises(UsageError, match="left truncation"):
        tokenize_row(CHAT, ChatSchema(), TOK, max_length=64, truncation="left")


# ----------------------------------------------------------------------------- shift
def test_label_shift_convention():
    s = pc("ab", "c")  # ids: a b ' ' c EOS ; mask 0 0 1 1 1
    ex = to_training_example(s)
    assert ex.tokens.tolist() == b("ab c")
    assert ex.labels.tolist() == b("b c") + [EOS]
    assert ex.loss_mask.tolist() == [0.0, 1.0, 1.0, 1.0]  # mask[1:], aligned to labels
    assert (ex.tokens.dtype, ex.labels.dtype, ex.loss_mask.dtype) == (np.int64, np.int64, np.float32)
    assert ex.to_dict()["labels"][-1] == EOS


def test_shift_of_chat_trains_exactly_the_assistant_labels():
    ex = to_training_example(tokenize_row(CHAT, ChatSchema(), TOK, max_length=64))
    trained_labels = ex.labels[ex.loss_mask == 1].tolist()
    assert trained_labels == b("yo") + [END] + b("z") + [END]


# ----------------------------------------------------------------------------- with a file
def test_errors_from_a_file_name_file_line_and_field(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n'
        "\n"
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 5}]}\n'
    )
    f = JsonlFile(path)
    assert tokenize_row(f.row(0), ChatSchema(), TOK, max_length=32, location=f.location(0)).num_supervised == 2
    with pytest.raises(InputError) as info:
        tokenize_row(f.row(1), ChatSchema(), TOK, max_length=32, location=f.location(1))
    assert str(info.value).startswith(f"{path}:3, row 1, field 'messages[1].content': must be a string")

"""Long chats: ``oldest_turns`` drops whole exchanges from the front (the system prompt and the last exchange
kept), a conversation the model's template refuses is skipped and counted when asked, and the truncation
modes each schema refuses are refused with one message everywhere."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.tokenizer_bundles import require_tokenizer_dir
from seqpack.core.errors import UsageError
from seqpack.data import ByteTokenizer, load_tokenizer, tokenize_batch, tokenize_row
from seqpack.data.chat_render import TemplateRefused
from seqpack.data.rejections import SampleRejected
from seqpack.data.schemas import ChatSchema, PromptCompletionSchema
from seqpack.packing.offline.prepare import prepare_packed_dataset

SYSTEM = {"role": "system", "content": "You are terse."}


def _chat(turns: int, words: int = 30) -> dict:
    messages = [SYSTEM]
    for k in range(turns):
        messages += [{"role": "user", "content": f"question {k} " + "word " * words},
                     {"role": "assistant", "content": f"answer {k} " + "text " * words}]
    return {"messages": messages}


def _text(tok, sample) -> str:
    return tok.decode(sample.input_ids.tolist())


@pytest.mark.parametrize("family", ["byte", "qwen3"])
def test_oldest_exchanges_go_first_and_the_system_prompt_and_last_answer_stay(family):
    tok = ByteTokenizer() if family == "byte" else load_tokenizer(require_tokenizer_dir(family))
    row = _chat(5)
    full = tokenize_row(row, ChatSchema(), tok, max_length=1 << 20)
    cap = full.num_tokens * 2 // 3
    cut = tokenize_row(row, ChatSchema(), tok, max_length=cap, truncation="oldest_turns")
    text = _text(tok, cut)
    assert cut.num_tokens <= cap and cut.truncated and cut.original_length == full.num_tokens
    assert "You are terse." in text and "answer 4" in text and "question 4" in text
    assert "question 0" not in text and "answer 0" not in text  # the oldest exchange is gone, whole
    assert cut.num_supervised > 0
    # right truncation at the same cap keeps the head and loses the last answer instead
    right = tokenize_row(row, ChatSchema(), tok, max_length=cap, truncation="right")
    assert "answer 4" not in _text(tok, right) and "question 0" in _text(tok, right)


def test_when_the_last_exchange_alone_does_not_fit_the_row_is_rejected():
    row = _chat(3, words=200)
    with pytest.raises(SampleRejected) as err:
        tokenize_row(row, ChatSchema(), ByteTokenizer(), max_length=300, truncation="oldest_turns")
    assert err.value.reason == "too_long" and "last exchange" in err.value.message


def test_batch_and_row_agree_under_oldest_turns():
    rows = [_chat(k) for k in (1, 3, 6)] + [_chat(4, words=400)]
    tok = ByteTokenizer()
    batch = tokenize_batch(rows, ChatSchema(), tok, max_length=900, truncation="oldest_turns")
    assert [pos for pos, _ in batch.rejected] == [3]
    for i, pos in enumerate(batch.positions.tolist()):
        alone = tokenize_row(rows[pos], ChatSchema(), tok, max_length=900, truncation="oldest_turns")
        assert np.array_equal(batch.sample(i).input_ids, alone.input_ids)
        assert np.array_equal(batch.sample(i).loss_mask, alone.loss_mask)


def test_each_schema_refuses_the_mode_it_cannot_take():
    with pytest.raises(UsageError, match="left truncation is not supported for chat"):
        tokenize_row(_chat(1), ChatSchema(), ByteTokenizer(), max_length=64, truncation="left")
    with pytest.raises(UsageError, match="oldest_turns truncation drops whole chat turns"):
        tokenize_row({"prompt": "a", "completion": "b"}, PromptCompletionSchema(), ByteTokenizer(), max_length=64,
                     truncation="oldest_turns")


def test_pack_counts_oldest_turns_truncations_and_fingerprints_the_mode(tmp_path):
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(_chat(k % 6 + 1)) + "\n" for k in range(24)))
    last = ChatSchema(loss_mode="last_turn")  # only the last answer is trained: right truncation loses it
    right = prepare_packed_dataset(data, tmp_path / "out", pack_size=512, truncation="right", schema=last)
    turns = prepare_packed_dataset(data, tmp_path / "out", pack_size=512, truncation="oldest_turns", schema=last)
    acc_r = right.manifest["splits"]["training"]["accounting"]
    acc_t = turns.manifest["splits"]["training"]["accounting"]
    assert turns.pack_dir != right.pack_dir and turns.root == turns.pack_dir  # `root`: the old name, one release
    assert acc_t["truncated"] > 0 and acc_t["packed"] + acc_t["skipped_total"] == 24
    assert acc_t["skipped"].get("no_supervised_tokens", {}).get("count", 0) == 0  # no row lost its answer
    assert acc_r["skipped"].get("no_supervised_tokens", {}).get("count", 0) > 0  # right truncation loses answers


@pytest.mark.slow
def test_a_refused_conversation_stops_the_run_or_is_skipped_and_counted(tmp_path):
    gemma = load_tokenizer(require_tokenizer_dir("gemma3"))  # its template refuses non-alternating roles
    tool_row = {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"},
                             {"role": "assistant", "content": "hello"}]}
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    with pytest.raises(TemplateRefused, match="alternate"):
        tokenize_row(tool_row, ChatSchema(), gemma, max_length=512)
    with pytest.raises(SampleRejected) as err:
        tokenize_row(tool_row, ChatSchema(on_template_error="skip"), gemma, max_length=512)
    assert err.value.reason == "template_error"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [good, tool_row, good]))
    with pytest.raises(TemplateRefused) as stop:
        prepare_packed_dataset(data, tmp_path / "a", pack_size=512, tokenizer=gemma, schema=ChatSchema())
    assert stop.value.row == 1 and stop.value.line == 2
    done = prepare_packed_dataset(data, tmp_path / "b", pack_size=512, tokenizer=gemma,
                                  schema=ChatSchema(on_template_error="skip"))
    acc = done.manifest["splits"]["training"]["accounting"]
    assert acc["packed"] == 2 and acc["skipped"]["template_error"]["count"] == 1
    assert acc["skipped"]["template_error"]["examples"][0]["line"] == 2
    assert done.manifest["schema"]["on_template_error"] == "skip"

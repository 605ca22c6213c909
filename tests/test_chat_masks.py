"""Chat ownership without prefix renders: markers, alignment, fallbacks, generation blocks, batches."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seqpack.data import chat_masks as cm
from seqpack.data.location import RowLocation
from seqpack.data.schemas import ChatSchema, Message, PromptCompletionSchema
from seqpack.data.tokenize import tokenize_batch, tokenize_row
from seqpack.data.tokenizers import ByteTokenizer, load_tokenizer
from seqpack.data.rejections import SampleRejected
from seqpack.core.errors import InputError, SeqpackError, UsageError

SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
# A Qwen3-like template: reasoning of earlier turns is dropped, the last turn always gets a think block.
QWEN3_LIKE = (
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}"
    "{% set content = m.content or '' %}{% set reasoning = m.reasoning_content or '' %}"
    "{% if '</think>' in content %}{% set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "<|im_start|>assistant\n"
    "{% if loop.last %}<think>\n{{ reasoning.strip('\\n') }}\n</think>\n\n{% endif %}{{ content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = ["hello world how are you", "fine thanks the answer is yes", "think hard about it", "get weather Paris"] * 5


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    root = tmp_path_factory.mktemp("bpe")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(special_tokens=SPECIALS, vocab_size=400,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(str(root / "tokenizer.json"))
    return root


def with_template(root, template, eos="<|im_end|>"):
    (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": eos}))
    return load_tokenizer(root)


def trained_text(tok, r, k=None):
    return tok.decode([i for i, o in zip(r.ids, r.owner) if o >= 0 and r.roles[o] == "assistant" and (k is None or o == k)])


# ----------------------------------------------------------------------------- pure pieces
def test_markers_keep_tags_and_outer_whitespace_and_split_inline_reasoning():
    msgs = [{"role": "user", "content": "  <tool_response>\n{\"a\": 1}\n</tool_response>"},
            {"role": "assistant", "content": "<think>\nwhy\n</think>\n\nso", "reasoning_content": None}]
    marked, pieces = cm.sentinel_messages(msgs)
    o, c = cm.SENTINEL_OPEN, cm.SENTINEL_CLOSE
    assert marked[0]["content"] == f"  <tool_response>\n{o}0{c}\n</tool_response>"
    assert marked[1]["content"] == f"<think>\n{o}1{c}\n</think>\n\n{o}2{c}"
    assert [(p.message, p.kind, p.text) for p in pieces] == [(0, "content", '{"a": 1}'), (1, "reasoning", "why"),
                                                            (1, "content", "so")]
    assert cm.sentinel_messages([{"role": "user", "content": f"x{o}"}]) is None  # marker characters in data


def test_align_accepts_verbatim_or_json_escaped_text_and_rejects_a_rewrite():
    pieces = [cm.Piece(0, "content", 'say "hi"')]
    o, c = cm.SENTINEL_OPEN, cm.SENTINEL_CLOSE
    assert cm.align(f"<u>{o}0{c}</u>", '<u>say "hi"</u>', pieces)[0] == cm.PieceSpan(3, 11, 0, "content")
    assert cm.align(f'["{o}0{c}"]', '["say \\"hi\\""]', pieces)[0] == cm.PieceSpan(2, 12, 0, "content")
    assert cm.align(f"<u>{o}0{c}</u>", '<u>SAY "HI"</u>', pieces) is None
    assert cm.align(f"<u>{o}0{c}</u>", '<x>say "hi"</u>', pieces) is None


def test_token_ownership_gives_straddling_tokens_to_the_assistant_and_flags_pure_reasoning():
    # text: "H:" header, then reasoning "rr" and answer "aa" of message 1, then "E" end marker
    text = "H:rraaE"
    turns = [cm.TurnSpan(2, 7, 1, reasoning=[(2, 4)])]
    offsets = np.array([[0, 2], [1, 3], [3, 5], [5, 7]])  # "H:", ":r" straddles, "ra" mixed, "aE"
    owner, reasoning = cm.token_ownership(offsets, len(text), turns, [cm.PieceSpan(0, 1, 0, "content")])
    assert owner.tolist() == [0, 1, 1, 1] and reasoning.tolist() == [False, True, False, False]


# ----------------------------------------------------------------------------- the HF adapter on a Qwen3-like template
def test_reasoning_template_that_rewrites_earlier_turns(bpe_dir):
    tok = with_template(bpe_dir, QWEN3_LIKE)
    msgs = [Message("user", "hello world"), Message("assistant", "fine thanks", reasoning="think hard"),
            Message("user", "how are you"), Message("assistant", "yes", reasoning="about it")]
    assert tok.prefix_regions(msgs) is None  # not prefix-stable: the old method refused this
    r = tok.apply_chat_template(msgs)
    assert r.method == "sentinel"
    assert "think hard" not in r.text  # dropped by the template from the earlier turn
    assert trained_text(tok, r, 1) == "fine thanks<|im_end|>"
    assert trained_text(tok, r, 3) == "<think>\nabout it\n</think>\n\nyes<|im_end|>"
    reasoning = tok.decode([i for i, f in zip(r.ids, r.reasoning) if f])
    assert reasoning == "<think>\nabout it\n</think>\n\n"
    masked = tokenize_row({"messages": [m.to_dict() for m in msgs]}, ChatSchema(reasoning="mask"), tok, max_length=256)
    assert tok.decode(masked.input_ids[masked.loss_mask == 1]) == "fine thanks<|im_end|>yes<|im_end|>"


def test_empty_reasoning_block_written_by_the_template_is_header(bpe_dir):
    tok = with_template(bpe_dir, QWEN3_LIKE)
    r = tok.apply_chat_template([Message("user", "hello"), Message("assistant", "yes")])
    assert "<think>\n\n</think>" in r.text
    assert trained_text(tok, r) == "yes<|im_end|>" and not any(r.reasoning)


def test_inline_think_block_and_reasoning_field_train_the_same_tokens(bpe_dir):
    tok = with_template(bpe_dir, QWEN3_LIKE)
    base = [{"role": "user", "content": "hello"}]
    field = {"messages": [*base, {"role": "assistant", "content": "yes", "reasoning_content": "think hard"}]}
    inline = {"messages": [*base, {"role": "assistant", "content": "<think>\nthink hard\n</think>\n\nyes"}]}
    for policy in ("train", "mask"):
        a, b = (tokenize_row(row, ChatSchema(reasoning=policy), tok, max_length=128) for row in (field, inline))
        assert a.input_ids.tolist() == b.input_ids.tolist() and a.loss_mask.tolist() == b.loss_mask.tolist()


def test_tool_calls_are_trained_and_tool_results_never(bpe_dir):
    tok = with_template(bpe_dir, QWEN3_LIKE)
    row = {"messages": [
        {"role": "user", "content": "get weather Paris"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "fine"},
        {"role": "assistant", "content": "the answer is yes"},
    ]}
    s = tokenize_row(row, ChatSchema(), tok, max_length=256)
    assert tok.decode(s.input_ids[s.loss_mask == 1]) == (
        '<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call><|im_end|>the answer is yes<|im_end|>'
    )
    full = tokenize_row(row, ChatSchema(loss_mode="full"), tok, max_length=256)
    assert full.loss_mask.all()


def test_template_that_rewrites_user_text_falls_back_to_search(bpe_dir):
    tok = with_template(bpe_dir, QWEN3_LIKE.replace("{{ m.content }}<|im_end|>\n{% endif %}", "{{ m.content | upper }}<|im_end|>\n{% endif %}"))
    r = tok.apply_chat_template([Message("user", "hello"), Message("assistant", "yes")])
    assert r.method == "search" and trained_text(tok, r) == "yes<|im_end|>"


def test_assistant_text_nobody_can_find_is_refused_with_the_field(bpe_dir):
    tok = with_template(bpe_dir, QWEN3_LIKE.replace("{{ content }}", "{{ content | upper }}"))
    row = {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "yes"}]}
    with pytest.raises(InputError) as info:
        tokenize_row(row, ChatSchema(), tok, max_length=64, location=RowLocation("chat.jsonl", 4, 3))
    err = info.value
    assert err.field == "messages[1].content" and (err.file, err.line, err.row) == ("chat.jsonl", 4, 3)
    assert "rewrites its text" in str(err) and "generation" in (err.fix or "")


def test_generation_blocks_define_the_trained_span(bpe_dir):
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}"
        "{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
    )
    tok = with_template(bpe_dir, template)
    r = tok.apply_chat_template([Message("user", "hello"), Message("assistant", "yes"), Message("user", "how"),
                                 Message("assistant", "fine thanks")])
    assert r.method == "generation"
    assert trained_text(tok, r, 1) == "yes<|im_end|>" and trained_text(tok, r, 3) == "fine thanks<|im_end|>"
    last = tokenize_row({"messages": [m.to_dict() for m in [Message("user", "hello"), Message("assistant", "yes"),
                                                                 Message("user", "how"), Message("assistant", "fine")]]},
                        ChatSchema(loss_mode="last_turn"), tok, max_length=64)
    assert tok.decode(last.input_ids[last.loss_mask == 1]) == "fine<|im_end|>"


def test_template_without_generation_prompt_starts_the_turn_after_the_closing_special(bpe_dir):
    # Mistral-like: [no header] the user turn is closed by a special token, the answer follows directly
    template = "<s>{% for m in messages %}{% if m.role == 'user' %}<|im_start|>{{ m.content }}</think>{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"
    tok = with_template(bpe_dir, template, eos="</s>")
    assert tok.chat_info().header == ""
    r = tok.apply_chat_template([Message("user", "hello"), Message("assistant", "yes")])
    assert trained_text(tok, r) == "yes</s>"


def test_dates_are_fixed_for_reproducible_packs(bpe_dir):
    tok = with_template(bpe_dir, "{{ strftime_now('%d %b %Y') }}{% for m in messages %}{{ m.content }}{% endfor %}")
    assert tok.render([Message("user", "x")]) == "26 Jul 2024x"


# ----------------------------------------------------------------------------- byte tokenizer format
def test_byte_chat_renders_tools_reasoning_and_calls():
    tok = ByteTokenizer()
    row = {"tools": [{"name": "f"}], "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "reasoning_content": "r",
         "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "o"},
        {"role": "assistant", "content": "<think>s</think>a"},
    ]}
    s = tokenize_row(row, ChatSchema(), tok, max_length=512)
    assert tok.decode(s.input_ids[s.loss_mask == 1]) == (
        '<think>r</think><tool_call>{"name": "f", "arguments": {}}</tool_call><|end|><think>s</think>a<|end|>'
    )
    assert tok.decode(s.input_ids[:20]).startswith('<s><|system|>[{"name": "f"}]<|end|>')
    masked = tokenize_row(row, ChatSchema(reasoning="mask"), tok, max_length=512)
    assert tok.decode(masked.input_ids[masked.loss_mask == 1]) == (
        '<tool_call>{"name": "f", "arguments": {}}</tool_call><|end|>a<|end|>'
    )


# ----------------------------------------------------------------------------- batches
def test_batch_equals_row_by_row_and_lists_rejections_by_position():
    tok = ByteTokenizer()
    chats = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        {"messages": []},
        {"messages": [{"role": "user", "content": "x" * 50}, {"role": "assistant", "content": "y"}]},
        {"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "z"}]},
    ]
    batch = tokenize_batch(chats, ChatSchema(), tok, max_length=20)
    assert batch.positions.tolist() == [0, 3] and [(p, e.reason) for p, e in batch.rejected] == [(1, "empty_conversation"), (2, "no_supervised_tokens")]
    for i, pos in enumerate(batch.positions.tolist()):
        single = tokenize_row(chats[pos], ChatSchema(), tok, max_length=20)
        assert batch.sample(i).input_ids.tolist() == single.input_ids.tolist()
        assert batch.sample(i).loss_mask.tolist() == single.loss_mask.tolist()
    assert batch.offsets.tolist() == [0, *np.cumsum(batch.lengths).tolist()] and batch.ids.dtype == np.int32

    pcs = [{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": ""}, {"prompt": "d" * 9, "completion": "e"}]
    pcb = tokenize_batch(pcs, PromptCompletionSchema(), tok, max_length=6)
    assert pcb.positions.tolist() == [0, 2] and pcb.rejected[0][1].reason == "empty_completion"
    assert pcb.sample(1).input_ids.tolist() == tokenize_row(pcs[2], PromptCompletionSchema(), tok, max_length=6).input_ids.tolist()
    assert pcb.truncated.tolist() == [False, True]


def test_batch_input_errors_name_the_row():
    bad = [{"messages": [{"role": "user", "content": "hi"}]}, {"messages": [{"role": "robot", "content": "x"}]}]
    where = [RowLocation("f.jsonl", 1, 0), RowLocation("f.jsonl", 2, 1)]
    with pytest.raises(InputError) as info:
        tokenize_batch(bad, ChatSchema(loss_mode="full"), ByteTokenizer(), max_length=16, locations=where)
    assert (info.value.line, info.value.field) == (2, "messages[0].role")


# ----------------------------------------------------------------------------- vectorized prompt/completion batches
_PC_TEXT = st.text(alphabet=st.sampled_from(["a", "b", " ", "é", "漢", "\n"]), max_size=12)


class _ListOnlyTokenizer(ByteTokenizer):
    """The byte tokenizer without its flat batch encoder: exercises the generic list path."""

    encode_batch_flat = None  # type: ignore[assignment]


_ODD_PC_ROW = st.one_of(
    st.fixed_dictionaries({"prompt": _PC_TEXT, "completion": _PC_TEXT}),
    st.fixed_dictionaries({"prompt": _PC_TEXT, "completion": _PC_TEXT, "images": st.sampled_from([None, [], ["a.png"]])}),
    st.fixed_dictionaries({"prompt": _PC_TEXT, "completion": st.sampled_from([None, 5, " ", "  x "])}),
    st.fixed_dictionaries({"prompt": st.sampled_from([" p ", "q  ", ""]), "completion": st.sampled_from([" c", "d "])}),
    st.fixed_dictionaries({"input": _PC_TEXT, "completion": _PC_TEXT}),  # the prompt under another name
    st.fixed_dictionaries({"prompt": _PC_TEXT, "completion": _PC_TEXT, "messages": st.just([])}),
)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.fixed_dictionaries({"prompt": _PC_TEXT, "completion": _PC_TEXT}), min_size=1, max_size=8),
    max_length=st.integers(2, 30),
    truncation=st.sampled_from(["right", "left", "reject"]),
    loss_mode=st.sampled_from(["completion", "full"]),
    add_bos=st.booleans(),
    add_eos=st.booleans(),
    allow_empty=st.booleans(),
    flat=st.booleans(),
)
@example(rows=[{"prompt": "", "completion": ""}, {"prompt": "a", "completion": "b"}], max_length=2, truncation="right",
         loss_mode="completion", add_bos=True, add_eos=True, allow_empty=False, flat=False)
def test_prompt_completion_batch_equals_row_by_row(rows, max_length, truncation, loss_mode, add_bos, add_eos,
                                                   allow_empty, flat):
    tok = ByteTokenizer() if flat else _ListOnlyTokenizer()
    schema = PromptCompletionSchema(loss_mode=loss_mode, add_bos=add_bos, add_eos=add_eos,
                                    allow_empty_completion=allow_empty)
    where = [RowLocation("f.jsonl", i + 1, i) for i in range(len(rows))]
    try:
        batch = tokenize_batch(rows, schema, tok, max_length=max_length, truncation=truncation, locations=where)
    except UsageError as err:
        with pytest.raises(UsageError) as info:
            for row in rows:  # a row rejected on its own (say, an empty completion) comes before the usage error
                try:
                    tokenize_row(row, schema, tok, max_length=max_length, truncation=truncation)
                except SampleRejected:
                    continue
        assert info.value.message == err.message
        return
    expected, rejected = [], []
    for i, row in enumerate(rows):
        try:
            expected.append((i, tokenize_row(row, schema, tok, max_length=max_length, truncation=truncation,
                                             location=where[i])))
        except SampleRejected as err:
            rejected.append((i, err.reason, str(err)))
    assert [(p, e.reason, str(e)) for p, e in batch.rejected] == rejected
    assert batch.positions.tolist() == [p for p, _ in expected]
    for k, (_, single) in enumerate(expected):
        got = batch.sample(k)
        assert got.input_ids.tolist() == single.input_ids.tolist()
        assert got.loss_mask.tolist() == single.loss_mask.tolist()
        assert (got.prompt_length, got.original_length, got.truncated) == (
            single.prompt_length, single.original_length, single.truncated)
    assert batch.ids.dtype == np.int32 and batch.loss_mask.dtype == np.uint8


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(_ODD_PC_ROW, min_size=1, max_size=8), template=st.sampled_from(["{prompt}", "Q: {prompt}\nA:"]),
       strip=st.booleans(), allow_empty=st.booleans())
def test_prompt_completion_batch_reads_odd_rows_like_row_by_row(rows, template, strip, allow_empty):
    """The inline reading of common rows (_pc_texts_batch) against the row-by-row path on rows that leave it."""
    schema = PromptCompletionSchema(prompt_template=template, strip_whitespace=strip, allow_empty_completion=allow_empty)
    tok = ByteTokenizer()
    where = [RowLocation("f.jsonl", i + 1, i) for i in range(len(rows))]
    expected, rejected, error = [], [], None
    for i, row in enumerate(rows):
        try:
            expected.append(tokenize_row(row, schema, tok, max_length=64, location=where[i]).input_ids.tolist())
        except SampleRejected as err:
            rejected.append((i, str(err)))
        except SeqpackError as err:
            error = str(err)
            break
    if error is not None:
        with pytest.raises(SeqpackError) as info:
            tokenize_batch(rows, schema, tok, max_length=64, locations=where)
        assert str(info.value) == error
        return
    batch = tokenize_batch(rows, schema, tok, max_length=64, locations=where)
    assert [(p, str(e)) for p, e in batch.rejected] == rejected
    assert [batch.sample(k).input_ids.tolist() for k in range(len(batch))] == expected


def test_string_free_arguments_are_located_or_refused():
    """Tool-call arguments without a string value get a span where tojson wrote them; keys rendered in an
    unknown form are refused (the call's end could not be attributed); arguments never rendered add nothing."""
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"n": 3}}}]},
            {"role": "tool", "content": "r"}]
    text = "U:q|A:f args={\"n\": 3}<call>|T:r"
    spans = [cm.PieceSpan(2, 3, 0, "content"), cm.PieceSpan(text.index("f args"), text.index("f args") + 1, 1, "tool_call"),
             cm.PieceSpan(len(text) - 1, len(text), 2, "content")]
    out = cm.string_free_arguments(text, spans, msgs)
    (extra,) = [s for s in out if s not in spans]
    assert text[extra.start:extra.end] == '{"n": 3}' and extra.message == 1
    # the key is rendered, the object in a form no tojson writes: refused
    odd = text.replace('{"n": 3}', '{ "n" = 3 }')
    with pytest.raises(cm.UnlocatedArguments) as err:
        cm.string_free_arguments(odd, spans, msgs)
    assert err.value.message == 1
    # a template that never renders the arguments: nothing to add, nothing refused
    bare = "U:q|A:f<call>|T:r"
    bare_spans = [cm.PieceSpan(2, 3, 0, "content"), cm.PieceSpan(6, 7, 1, "tool_call"),
                  cm.PieceSpan(len(bare) - 1, len(bare), 2, "content")]
    assert cm.string_free_arguments(bare, bare_spans, msgs) == bare_spans


# Arguments written with indent: the keys are in the text, no JSON form seqpack knows is.
INDENTED_ARGS = QWEN3_LIKE.replace("<tool_call>{{ c.function | tojson }}</tool_call>",
                                   "<tool_call>{{ c.function.name }} {{ c.function.arguments | tojson(indent=2) }}"
                                   "</tool_call>")


def test_unlocatable_string_free_arguments_refuse_the_row_with_its_field(bpe_dir, tmp_path, capsys):
    """Through tokenize_row and `seqpack pack`: one clear line naming the tool calls, exit 2, no internal error."""
    from seqpack.faces.cli import main

    tok = with_template(bpe_dir, INDENTED_ARGS)
    row = {"messages": [{"role": "user", "content": "hello world"},
                        {"role": "assistant", "content": "", "tool_calls": [
                            {"type": "function", "function": {"name": "get", "arguments": {"n": 3}}}]},
                        {"role": "tool", "content": "fine"}, {"role": "assistant", "content": "yes"}]}
    with pytest.raises(InputError) as err:
        tokenize_row(row, ChatSchema(), tok, max_length=512)
    assert err.value.field == "messages[1].tool_calls" and "cannot locate" in err.value.message
    # a string-valued argument is located by its value: the same template then packs
    ok = json.loads(json.dumps(row))
    ok["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    assert tokenize_row(ok, ChatSchema(), tok, max_length=512).loss_mask.sum() > 0
    data = tmp_path / "calls.jsonl"
    data.write_text(json.dumps(row) + "\n")
    code = main(["pack", str(data), "--out", str(tmp_path / "out"), "--pack-size", "512", "--schema", "chat",
                 "--tokenizer", str(bpe_dir), "--no-progress"])
    err_text = capsys.readouterr().err
    lines = [ln for ln in err_text.strip().splitlines() if not ln.startswith("seqpack-nonce")]
    assert code == 2 and len(lines) == 1 and "internal error" not in err_text, err_text
    assert f"{data}:1" in lines[0] and "tool_calls" in lines[0]

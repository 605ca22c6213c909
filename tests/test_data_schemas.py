"""Row schemas: detection, field extraction and the errors for missing or wrong-typed fields."""

from __future__ import annotations

import pytest

from seqpack.data.schemas import ChatSchema, Message, PromptCompletionSchema, default_schema, detect_schema
from seqpack.core.errors import ConfigError, InputError


@pytest.mark.parametrize(
    "row, kind",
    [
        ({"prompt": "a", "completion": "b"}, "prompt_completion"),
        ({"messages": []}, "chat"),
        ({"conversation": [{"role": "user", "content": "x"}]}, "chat"),
        ({"conversations": [], "system": "s"}, "chat"),
    ],
)
def test_detect_schema(row, kind):
    assert detect_schema(row) == kind


def test_detect_schema_with_custom_columns():
    assert detect_schema({"input": "a", "output": "b"}, prompt_column="input", completion_column="output") == "prompt_completion"


def test_detect_schema_neither_names_the_keys_and_hints_at_legacy_rows():
    with pytest.raises(InputError) as info:
        detect_schema({"input": "a", "output": "b"})
    msg = str(info.value)
    assert "['input', 'output']" in msg and "prompt_column='input'" in msg


def test_detect_schema_both_is_ambiguous():
    with pytest.raises(InputError, match="cannot tell") as info:
        detect_schema({"prompt": "a", "completion": "b", "messages": []})
    assert info.value.field == "messages"


def test_prompt_completion_extract_applies_template_and_strips_spaces_only():
    schema = PromptCompletionSchema(prompt_template="Q: {prompt}\nA:")
    assert schema.extract({"prompt": "  hi \n ", "completion": " yes  "}) == ("Q: hi \n\nA:", "yes")
    raw = PromptCompletionSchema(strip_whitespace=False)
    assert raw.extract({"prompt": " hi ", "completion": " yes"}) == (" hi ", " yes")


def test_prompt_completion_custom_columns_with_canonical_fallback():
    schema = PromptCompletionSchema(prompt_column="question", completion_column="answer")
    assert schema.extract({"question": "q", "answer": "a"}) == ("q", "a")
    assert schema.extract({"prompt": "q", "completion": "a"}) == ("q", "a")


@pytest.mark.parametrize(
    "row, field, text",
    [
        ({"completion": "b"}, "prompt", "missing field 'prompt'"),
        ({"prompt": "a"}, "completion", "missing field 'completion'"),
        ({"prompt": 3, "completion": "b"}, "prompt", "got int"),
        ({"prompt": "a", "completion": None}, "completion", "got NoneType"),
        ({"prompt": "a", "completion": "b", "messages": []}, "messages", "chat row"),
    ],
)
def test_prompt_completion_field_errors(row, field, text):
    with pytest.raises(InputError, match=text) as info:
        PromptCompletionSchema().extract(row)
    assert info.value.field == field


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"loss_mode": "answer"}, "loss_mode"),
        ({"prompt_template": "{question}"}, "prompt_template"),
        ({"prompt_template": "no placeholder"}, "prompt_template"),
        ({"prompt_template": "{prompt"}, "prompt_template"),
        ({"prompt_column": ""}, "prompt_column"),
    ],
)
def test_prompt_completion_config_errors(kwargs, field):
    with pytest.raises(ConfigError) as info:
        PromptCompletionSchema(**kwargs)
    assert info.value.field == field


def test_chat_messages_and_conversation_keys():
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "extra": 1}]
    expected = [Message("user", "hi"), Message("assistant", "yo")]
    assert ChatSchema().extract({"messages": turns}) == expected
    assert ChatSchema().extract({"conversation": turns}) == expected


def test_sharegpt_with_system_maps_speakers():
    row = {
        "system": "be nice",
        "conversations": [
            {"from": "human", "value": "q1"},
            {"from": "gpt", "value": "a1"},
            {"from": "observation", "value": "tool out"},
            {"from": "assistant", "value": "a2"},
        ],
    }
    assert ChatSchema().extract(row) == [
        Message("system", "be nice"),
        Message("user", "q1"),
        Message("assistant", "a1"),
        Message("tool", "tool out"),
        Message("assistant", "a2"),
    ]
    row["system"] = ""
    assert ChatSchema().extract(row)[0] == Message("user", "q1")


@pytest.mark.parametrize(
    "row, field",
    [
        ({"messages": [{"role": "user", "content": "a"}] * 3 + [{"role": "assistant"}]}, "messages[3].content"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": None}]}, "messages[1].content"),
        ({"messages": [{"role": "assistant", "content": None, "tool_calls": []}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant", "content": "a", "tool_calls": {}}]}, "messages[0].tool_calls"),
        ({"messages": [{"role": "assistant", "content": "", "tool_calls": [3]}]}, "messages[0].tool_calls[0]"),
        ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": ""}}]}]},
         "messages[0].tool_calls[0].function.name"),
        ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]},
         "messages[0].tool_calls[0].function.arguments"),
        ({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 3}]}, "messages[0].reasoning_content"),
        ({"messages": [{"role": "assistant", "content": "a", "reasoning_content": "x", "thinking": "y"}]},
         "messages[0].thinking"),
        ({"messages": [{"role": "tool", "content": "a", "tool_call_id": 7}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": ["part"]}]}, "messages[0].content"),
        ({"messages": [{"role": "robot", "content": "a"}]}, "messages[0].role"),
        ({"messages": [{"content": "a"}]}, "messages[0].role"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": "hi"}, "messages"),
        ({"conversation": [{"role": 1, "content": "a"}]}, "conversation[0].role"),
        ({"conversations": [{"from": "human", "value": "a"}, {"from": "bot", "value": "b"}]}, "conversations[1].from"),
        ({"conversations": [{"from": "human"}]}, "conversations[0].value"),
        ({"conversations": [], "system": 5}, "system"),
        ({"messages": [], "conversations": []}, "conversations"),
        ({"text": "x"}, "messages"),
    ],
)
def test_chat_field_errors_name_the_field(row, field):
    with pytest.raises(InputError) as info:
        ChatSchema().extract(row)
    assert info.value.field == field
    assert f"field '{field}'" in str(info.value)


def test_chat_tool_and_reasoning_fields():
    row = {
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "reasoning_content": "think",
             "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}}]},
            {"role": "tool", "content": "out", "tool_call_id": "c1", "name": "f"},
            {"role": "assistant", "content": "done", "thinking": "more"},
        ],
    }
    msgs = ChatSchema().extract(row)
    assert msgs[1].content is None and msgs[1].reasoning == "think" and msgs[1].tool_calls[0].name == "f"
    assert msgs[1].to_dict() == {
        "role": "assistant", "content": None, "reasoning_content": "think", "thinking": "think",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}, "id": "c1"}],
    }
    assert msgs[2].to_dict() == {"role": "tool", "content": "out", "tool_call_id": "c1", "name": "f"}
    assert msgs[3].reasoning == "more"
    assert msgs[0].to_dict() == {"role": "user", "content": "q"}  # absent fields stay absent
    assert ChatSchema().extract_tools(row) == row["tools"] and ChatSchema().extract_tools({}) is None
    with pytest.raises(InputError) as info:
        ChatSchema().extract_tools({"tools": "f"})
    assert info.value.field == "tools"
    with pytest.raises(ConfigError) as cfg:
        ChatSchema(reasoning="drop")
    assert cfg.value.field == "reasoning"


def test_chat_config_error_and_default_schema():
    with pytest.raises(ConfigError, match="last_turn"):
        ChatSchema(loss_mode="final")
    assert default_schema("chat") == ChatSchema()
    assert default_schema("prompt_completion") == PromptCompletionSchema()
    with pytest.raises(ConfigError):
        default_schema("legacy")


def test_schema_to_dict_is_json_able():
    import json

    assert json.loads(json.dumps(PromptCompletionSchema().to_dict()))["kind"] == "prompt_completion"
    assert ChatSchema(loss_mode="last_turn").to_dict() == {
        "kind": "chat",
        "loss_mode": "last_turn",
        "roles": ["system", "user", "assistant", "tool"],
        "reasoning": "train",
    }

"""Faults in tokenizer directories: chat templates that are hostile code, tokenizer files the libraries refuse.

Classes (issue 26, family 1): a chat template that recurses, nests loops, builds a huge string,
computes a huge power, overflows an index or range, divides by zero, reaches for what the sandbox
forbids or nests too deeply to compile: each ends in one line naming the template's file, exit 2,
in ``pack``, ``plan``, ``batches`` and in the pack workers (``--workers 2``, the template failing
only on a row of the second job). A ``chat_template.jinja`` that is not UTF-8, a deeply nested,
huge-integer, non-object or wrongly typed ``tokenizer_config.json``, a ``tokenizer.json`` the
tokenizers library refuses (missing unk token, WordPiece without [UNK]), one that makes it panic
in Rust, a sparse multi-GB file: one line naming the file. Truncation and padding settings of a
``tokenizer.json`` are ignored (as transformers does), so they neither cut ids silently nor abort
the process. Every run that could hang runs in a forked child with a deadline and a memory cap.
"""

from __future__ import annotations

import json

import pytest

from faults_helpers import TEMPLATE, chat_rows, cli_forked, make_tokenizer, temporaries

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

STOPPED = "the chat template of hf:{name} was stopped on a conversation of {n} message(s): {why}. " \
          "Fix: use a chat template that renders in bounded time and size"

HOSTILE = {
    "recursion": ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}",
                  "its calls nest more than 64 deep (a macro or loop that recurses?)"),
    "nested_loops": ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
                     "it took more than 2,000,000 loop iterations and calls (a loop that does not end?)"),
    "huge_string": ("{{ 'x' * 10000000000 }}",
                    "it builds a string of 10,000,000,000 characters (more than 33,554,432)"),
    "doubling_string": ("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{{ ns.s }}", "it builds a string of 67,108,864 characters (more than 33,554,432)"),
    "huge_power": ("{{ 2 ** 100000000 }}", "it computes an integer of about 100,000,000 bits (more than 8,192)"),
    "index_overflow": ("{{ range(10 ** 30) }}",
                       "it passes an integer of 100 bits to a call (a width or count beyond 33,554,432)"),
    "format_width": ("{{ '{:>99999999999}'.format('x') }}",
                     "it formats with a width or precision of 99999999999 (beyond 33,554,432)"),
    "zero_division": ("{{ 1 / 0 }}", "ZeroDivisionError: division by zero"),
    "sandbox_escape": ("{{ ''.__class__.__mro__ }}", "access to attribute '__class__' of 'str' object is unsafe"),
}


def _tokenizer(tmp_path, template, name="tok"):
    directory = make_tokenizer(tmp_path / name, template=template)
    return directory, directory / "tokenizer_config.json"


def _command(command, data, tok, tmp_path):
    return {
        "pack": ["pack", data, "--out", tmp_path / "out", "--pack-size", 64, "--tokenizer", tok, "--no-progress"],
        "plan": ["plan", "--jsonl", data, "--tokenizer", tok, "--candidates", "64,128"],
        "batches": ["batches", data, "--tokenizer", tok, "--seq-length", 256, "--schema", "chat"],
    }[command]


SLOW = {"nested_loops"}  # two million steps take about two seconds


@pytest.mark.parametrize("fault", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW else f for f in sorted(HOSTILE)])
def test_a_hostile_template_stops_pack_with_one_line_naming_it(write, tmp_path, fault):
    source, why = HOSTILE[fault]
    data = write("chat.jsonl", chat_rows(4))
    tok, config = _tokenizer(tmp_path, source)
    run = cli_forked(*_command("pack", data, tok, tmp_path))
    run.refused_with(f"seqpack pack: error: {config}, field 'chat_template': " + STOPPED.format(name="tok", n=1, why=why))
    assert not temporaries(tmp_path) and not list((tmp_path / "out").rglob("*.parquet"))


@pytest.mark.parametrize("command", ["plan", pytest.param("batches", marks=pytest.mark.slow)])  # batches loads torch
@pytest.mark.parametrize("fault", ["recursion", pytest.param("nested_loops", marks=pytest.mark.slow), "huge_string"])
def test_a_hostile_template_stops_plan_and_batches(write, tmp_path, command, fault):
    source, why = HOSTILE[fault]
    data = write("chat.jsonl", chat_rows(4))
    tok, config = _tokenizer(tmp_path, source)
    cli_forked(*_command(command, data, tok, tmp_path)).refused_with(
        f"seqpack {command}: error: {config}, field 'chat_template': " + STOPPED.format(name="tok", n=1, why=why))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["nested_loops", "recursion"])
def test_a_template_that_fails_on_one_row_stops_the_pack_workers(write, tmp_path, fault):
    source, why = HOSTILE[fault]
    guarded = "{% if 'question' in messages[0]['content'] %}" + source + "{% endif %}" + TEMPLATE
    data = write("chat.jsonl", chat_rows(1100, special={1050: "question answer"}))  # row 1050: the second job
    tok, config = _tokenizer(tmp_path, guarded)
    run = cli_forked("pack", data, "--out", tmp_path / "out", "--pack-size", 64, "--tokenizer", tok, "--no-progress",
                     "--workers", 2, timeout=120)
    run.refused_with(f"seqpack pack: error: {config}, field 'chat_template': "
                     + STOPPED.format(name="tok", n=2, why=why))
    assert not temporaries(tmp_path) and not list((tmp_path / "out").rglob("*.parquet"))


def test_a_template_writing_far_more_than_its_conversation_is_stopped(write, tmp_path):
    data = write("chat.jsonl", chat_rows(2))
    tok, config = _tokenizer(tmp_path, "{{ 'x'.ljust(3000000) }}" + TEMPLATE)
    run = cli_forked(*_command("pack", data, tok, tmp_path))
    run.refused(str(config), "it writes more than 1,049,", "characters for a conversation whose own text is far shorter")


def test_a_template_nested_too_deeply_to_compile(write, tmp_path):
    data = write("chat.jsonl", chat_rows(2))
    tok, config = _tokenizer(tmp_path, "{% if true %}" * 3000 + "x" + "{% endif %}" * 3000)
    cli_forked(*_command("pack", data, tok, tmp_path)).refused_with(
        f"seqpack pack: error: {config}, field 'chat_template': chat_template of hf:tok does not compile: "
        "it nests or recurses too deeply")


def test_a_bounded_template_still_packs_like_before(write, tmp_path):
    """Negative control: the real-world constructs the bounds watch (loops, macros, filters, +, ~) pass."""
    template = ("{% macro turn(m) %}<|{{ m['role'] }}|> {{ m['content']|trim }} <|end|> {% endmacro %}"
                "{{ bos_token }}{% for m in messages %}{{ turn(m) ~ '' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|assistant|>' + ' ' }}{% endif %}")
    data = write("chat.jsonl", chat_rows(6))
    tok, _ = _tokenizer(tmp_path, template)
    run = cli_forked("pack", data, "--out", tmp_path / "out", "--pack-size", 64, "--tokenizer", tok, "--no-progress",
                     "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out)["splits"]["training"]["accounting"]["packed"] == 6


# ------------------------------------------------------------------------------------------------ tokenizer files
def _wordpiece_without_unk(doc):
    vocab = {k: v for k, v in doc["model"]["vocab"].items() if k != "[UNK]"}
    doc["model"] = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                    "max_input_chars_per_word": 100, "vocab": vocab}


def _missing_unk(doc):
    doc["model"]["unk_token"] = "[NOPE]"


def _panics(doc):  # a BPE merge whose pieces make the Rust code index past a slice: pyo3 PanicException
    doc["model"] = {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"], "unk_token": None}


FILE_FAULTS = {
    # name: (edit of tokenizer.json, bytes written over a file or None, the file, the reason)
    "missing_unk": (_missing_unk, None, "tokenizer.json",
                    "cannot encode: the tokenizers library failed: WordLevel error: Missing [UNK] token from the "
                    "vocabulary"),
    "wordpiece_without_unk": (_wordpiece_without_unk, None, "tokenizer.json",
                              "cannot encode: the tokenizers library failed: WordPiece error: Missing [UNK] token "
                              "from the vocabulary"),
    "rust_panic": (_panics, None, "tokenizer.json",
                   "cannot load the tokenizer: the tokenizers library panicked: range end index 2 out of range for "
                   "slice of length 1"),
    "tokenizer_not_utf8": (None, ("tokenizer.json", b"\xff\xfe{}"), "tokenizer.json",
                           "tokenizer.json is not UTF-8 (byte 0)"),
    "tokenizer_too_deep": (lambda d: d.update(normalizer=json.loads("[" * 200 + "]" * 200)), None, "tokenizer.json",
                           "cannot load the tokenizer: the tokenizers library failed: recursion limit exceeded"),
    "jinja_not_utf8": (None, ("chat_template.jinja", b"\xff\xfe{{ x }}"), "chat_template.jinja",
                       "chat_template.jinja is not UTF-8 (byte 0)"),
    "config_too_deep": (None, ("tokenizer_config.json", b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
                        "tokenizer_config.json",
                        "tokenizer_config.json: JSON nested deeper than 100 levels (Python's parser gave up)"),
    "config_huge_integer": (None, ("tokenizer_config.json", b'{"model_max_length": ' + b"9" * 100000 + b"}"),
                            "tokenizer_config.json",
                            "tokenizer_config.json: a number is too long to read: Exceeds the limit (4300 digits) "
                            "for integer string conversion: value has 100000 digits"),
    "config_not_an_object": (None, ("tokenizer_config.json", b"[1, 2]"), "tokenizer_config.json",
                             "tokenizer_config.json must hold a JSON object"),
    "config_template_wrong_type": (None, ("tokenizer_config.json", b'{"chat_template": 7}'),
                                   "tokenizer_config.json, field 'chat_template'",
                                   "chat_template must be a string or a list of named templates, got a number"),
    "config_token_wrong_type": (None, ("tokenizer_config.json", b'{"bos_token": 5, "chat_template": "x"}'),
                                "tokenizer_config.json, field 'bos_token'",
                                "bos_token must be a string or an object with a string 'content', got a number"),
}


@pytest.mark.parametrize("fault", sorted(FILE_FAULTS))
def test_a_bad_tokenizer_file_is_one_line_naming_it(write, tmp_path, fault):
    edit, overwrite, where, why = FILE_FAULTS[fault]
    data = write("chat.jsonl", chat_rows(3, special={1: "zzz unknown words"}))
    tok = make_tokenizer(tmp_path / "tok", edit=edit)
    if overwrite is not None:
        name, content = overwrite
        if name == "chat_template.jinja":  # read only when the config has no template
            (tok / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
        (tok / name).write_bytes(content)
    run = cli_forked(*_command("pack", data, tok, tmp_path))
    fix = ". Fix: check the tokenizer files (a tokenizer.json that transformers loads too)" \
        if "tokenizers library" in why else ""
    if fault == "tokenizer_too_deep":  # the library's message ends with its own column number
        run.refused(f"{tok / where}: {why}")
    else:
        run.refused_with(f"seqpack pack: error: {tok / where}: {why}{fix}")
    assert "Traceback" not in run.err and not temporaries(tmp_path)


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])
def test_a_sparse_multi_gb_tokenizer_file_is_refused_unread(write, tmp_path, name):
    data = write("chat.jsonl", chat_rows(2))
    tok = make_tokenizer(tmp_path / "tok", template=None if name == "chat_template.jinja" else TEMPLATE)
    with open(tok / name, "ab") as fh:
        fh.truncate(3 << 30)  # 3 GiB of holes: no disk used, and never read
    limit = "536,870,912" if name == "tokenizer.json" else "33,554,432"
    what = {"tokenizer.json": "tokenizer file", "tokenizer_config.json": "tokenizer_config.json",
            "chat_template.jinja": "chat template"}[name]
    cli_forked(*_command("pack", data, tok, tmp_path), timeout=30).refused_with(
        f"seqpack pack: error: {tok / name}: {what} is larger than {limit} bytes (3,221,225,472)")


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["truncation", "padding"])
def test_truncation_and_padding_settings_of_tokenizer_json_are_ignored(write, tmp_path, setting):
    """A stride longer than max_length panics in Rust, a huge fixed padding aborts the process on its
    allocation, a short max_length would cut every sample silently: all are switched off, and the
    packs equal those of the same tokenizer without the setting."""
    value = {"truncation": {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 5},
             "padding": {"strategy": {"Fixed": 100_000_000_000}, "direction": "Right", "pad_to_multiple_of": None,
                         "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}}[setting]
    data = write("chat.jsonl", chat_rows(5))
    plain = make_tokenizer(tmp_path / "plain")
    odd = make_tokenizer(tmp_path / "odd", edit=lambda d: d.update({setting: value}))
    runs = [cli_forked("plan", "--jsonl", data, "--tokenizer", t, "--candidates", "64,128", "--json") for t in (plain, odd)]
    assert [r.code for r in runs] == [0, 0], [r.err for r in runs]
    plans = [json.loads(r.out) for r in runs]
    assert plans[0]["lengths"] == plans[1]["lengths"] and plans[0]["lengths"]["min"] > 2


def test_a_template_whose_filter_asserts_refuses_the_row(write, tmp_path):
    """jinja's truncate asserts on its arguments: an AssertionError is a failed render, not a crash."""
    data = write("chat.jsonl", chat_rows(2))
    tok, _ = _tokenizer(tmp_path, "{{ 'x'|truncate(1) }}" + TEMPLATE)
    cli_forked(*_command("pack", data, tok, tmp_path)).refused_with(
        f"seqpack pack: error: {data}:1, row 0, field 'messages': chat template failed on 2 message(s) "
        "(AssertionError: expected length >= 3, got 1); the template may not support this message shape "
        "(tool calls, reasoning, roles)")

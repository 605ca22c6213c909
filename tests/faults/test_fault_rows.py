"""Faults in JSONL rows, through every command that reads JSONL.

Classes: a lone surrogate escape, nesting deeper than Python parses, an integer beyond Python's
digit limit (each in pack, plan --jsonl, batches, energon-prepare and smoke --data); the bad-input
classes of issue 3 (malformed JSON, missing field, wrong type, empty file, non-UTF-8 bytes, a sample
longer than the pack under --truncation reject, an empty completion); a --prompt-column no row
has; energon-prepare rows that pack would refuse or skip.
"""

from __future__ import annotations

import json

import pytest

from faults_helpers import assert_accounted, digest, temporaries

GOOD = json.dumps({"prompt": "a question", "completion": "an answer"})
BAD_ROWS = {
    "lone_surrogate": ('{"prompt": "a\\ud800b", "completion": "x"}', ["field 'prompt'", "lone surrogate"]),
    "deep_nesting": ('{"prompt": ' + "[" * 5000 + "]" * 5000 + ', "completion": "x"}', ["nested deeper"]),
    "huge_integer": ('{"prompt": "p", "completion": "c", "n": ' + "9" * 5000 + "}", ["too long to read"]),
}


def _commands(path, out):
    return {
        "pack": ["pack", path, "--out", out / "packs", "--pack-size", 256],
        "plan": ["plan", "--jsonl", path],
        "batches": ["batches", path, "--seq-length", 256],
        "energon-prepare": ["energon-prepare", path, "--out", out / "ds"],
        "smoke": ["smoke", "--path", "in_batch", "--data", path, "--no-cp", "--size", "tiny"],
    }


# the smoke test reads its rows through the same JsonlFile as the others: one class there suffices
@pytest.mark.parametrize("command, fault", [(c, f) for f in sorted(BAD_ROWS)
                                            for c in ("pack", "plan", "batches", "energon-prepare", "smoke")
                                            if c != "smoke" or f == "lone_surrogate"])
def test_bad_json_values_in_every_jsonl_command(cli, write, tmp_path, command, fault):
    row, needles = BAD_ROWS[fault]
    path = write("rows.jsonl", "\n".join([GOOD, GOOD, row, GOOD]) + "\n")
    before = digest([path])
    run = cli(*_commands(path, tmp_path / "out")[command])
    run.refused(f"{path}:3", "row 2", *needles)  # the user's file and line, never a temporary copy
    assert digest([path]) == before and not temporaries(tmp_path)
    assert not (tmp_path / "out" / "ds").exists() and not list((tmp_path / "out").rglob("*.parquet"))


def test_a_valid_surrogate_pair_is_fine(cli, write, tmp_path):
    path = write("emoji.jsonl", '{"prompt": "smile \\ud83d\\ude00", "completion": "ok"}\n')
    assert cli("plan", "--jsonl", path).code == 0


@pytest.mark.parametrize(
    "content, needles",
    [
        (GOOD + '\n{"prompt": "p", "completion": \n', ["rows.jsonl:2", "malformed JSON"]),
        (GOOD + '\n{"prompt": "p"}\n', ["rows.jsonl:2", "missing field 'completion'"]),
        (GOOD + '\n{"prompt": ["p"], "completion": "c"}\n', ["rows.jsonl:2", "field 'prompt'", "must be a string"]),
        ("\n\n  \n", ["rows.jsonl", "no rows"]),
        (GOOD.encode() + b'\n{"prompt": "\xff", "completion": "c"}\n', ["rows.jsonl:2", "invalid UTF-8"]),
        (GOOD + "\n[1, 2]\n", ["rows.jsonl:2", "got a JSON array"]),
    ],
    ids=["malformed", "missing-field", "wrong-type", "empty-file", "non-utf8", "not-an-object"],
)
def test_bad_rows_of_issue_3(cli, write, tmp_path, content, needles):
    path = write("rows.jsonl", content)
    before = digest([path])
    cli("pack", path, "--out", tmp_path / "packs", "--pack-size", 256).refused(*needles)
    assert digest([path]) == before and not temporaries(tmp_path)
    assert not (tmp_path / "packs").exists() or not list((tmp_path / "packs").iterdir())


def test_rejected_samples_are_skipped_and_accounted(cli, write, tmp_path):
    rows = [GOOD, json.dumps({"prompt": "p", "completion": ""}), json.dumps({"prompt": "p", "completion": "z" * 600})]
    path = write("rows.jsonl", "\n".join(rows * 3) + "\n")
    run = cli("pack", path, "--out", tmp_path / "packs", "--pack-size", 256, "--truncation", "reject", "--json")
    assert run.code == 0
    result = json.loads(run.out)
    acc = result["splits"]["training"]["accounting"]
    assert acc == {**acc, "rows_in": 9, "packed": 3, "skipped_total": 6}
    assert set(acc["skipped"]) == {"empty_completion", "too_long"}
    assert acc["skipped"]["empty_completion"]["examples"][0]["line"] == 2
    manifest = json.loads(open(result["manifest_path"]).read())
    assert_accounted(manifest)


def test_a_prompt_column_no_row_has_is_refused(cli, data, tmp_path):
    cli("pack", data, "--out", tmp_path / "packs", "--pack-size", 256, "--prompt-column", "question").refused(
        f"{data}:1", "field 'question'", "not in the first row")
    assert not (tmp_path / "packs").exists()


@pytest.mark.parametrize(
    "row, needles",
    [
        ({"prompt": None, "completion": "c"}, ["field 'prompt'", "must be a string"]),
        ({"prompt": ["p"], "completion": "c"}, ["field 'prompt'", "must be a string"]),
        ({"messages": [{"role": "wizard", "content": "x"}]}, ["messages[0].role", "unknown role"]),
    ],
    ids=["null", "list", "unknown-role"],
)
def test_energon_prepare_checks_rows_like_pack(cli, write, tmp_path, row, needles):
    first = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]} \
        if "messages" in row else json.loads(GOOD)
    path = write("rows.jsonl", json.dumps(first) + "\n" + json.dumps(row) + "\n")
    cli("energon-prepare", path, "--out", tmp_path / "ds").refused("rows.jsonl:2", *needles)
    cli("pack", path, "--out", tmp_path / "packs", "--pack-size", 256).refused("rows.jsonl:2", *needles)
    assert not (tmp_path / "ds").exists() and not temporaries(tmp_path)


def test_energon_prepare_skips_and_accounts_what_pack_skips(cli, write, tmp_path):
    rows = [GOOD, json.dumps({"prompt": "p", "completion": ""}), GOOD]
    path = write("rows.jsonl", "\n".join(rows) + "\n")
    run = cli("energon-prepare", path, "--out", tmp_path / "ds", "--json")
    assert run.code == 0 and json.loads(run.out)["skipped"] == {"empty_completion": 1}
    manifest = json.loads((tmp_path / "ds" / "seqpack_energon.json").read_text())
    acc = manifest["accounting"]
    assert acc["rows_in"] == acc["written"] + acc["skipped_total"] == 3

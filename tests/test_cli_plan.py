"""seqpack plan: the same result as plan_pack_length, text and JSON output, exit codes, one-line errors."""

import json

import pytest

from seqpack.faces.cli import build_parser, main
from seqpack.data.length_mixes import sample_lengths
from seqpack.verbs.planning import plan_pack_length


def test_lengths_json_is_the_library_result(capsys):
    assert main(["plan", "--lengths", "5,3,3,2,7", "--candidates", "8,16", "--token-slots", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == plan_pack_length([5, 3, 3, 2, 7], candidates=(8, 16), token_slots=32).to_dict()
    assert data["recommended_pack_size"] == 8
    assert [r["packs"] for r in data["rows"]] == [3, 2]
    # the old names stay in the JSON for one release (deprecated), with the same values
    assert data["recommended_pack_len"] == 8 and [r["pack_len"] for r in data["rows"]] == [r["pack_size"]
                                                                                        for r in data["rows"]]


def test_text_table_marks_the_recommendation(capsys):
    assert main(["plan", "--lengths", "5,3,3,2,7", "--candidates", "8,16", "--token-slots", "32"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("5 samples from lengths, 20 tokens")
    row8 = next(line for line in lines if line.startswith("8*"))
    assert row8.split()[:6] == ["8*", "4", "yes", "3", "3", "83.33%"]
    assert "recommended: pack_size 8 (global batch size 4)" in out
    assert "rule: Among the valid candidates" in out


def test_topology_flags_derive_the_alignment(capsys):
    args = ["plan", "--lengths", "5,3,3,2,7", "--candidates", "8,16", "--token-slots", "32", "--json"]
    assert main(args + ["--tp", "4", "--cp", "2", "--sp"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pad_seq_to_mult"] == 8
    # aligned to 8: every sample takes 8 slots -> P=8: 5 packs, P=16: 3 packs
    assert [r["packs"] for r in data["rows"]] == [5, 3]


def test_mix_uses_the_seeded_length_mix(capsys):
    args = ["plan", "--mix", "bimodal", "--n", "3000", "--seed", "5", "--dp", "4", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    expected = plan_pack_length(sample_lengths("bimodal", 3000, seed=5), dp=4, seed=5).to_dict()
    assert data == expected
    assert data["lengths"]["num_samples"] == 3000


def test_jsonl_source(write_jsonl, capsys):
    path = write_jsonl([{"prompt": "ab", "completion": "cde"}, {"prompt": "hello", "completion": "world!"}])
    assert main(["plan", "--jsonl", str(path), "--candidates", "8,16", "--token-slots", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lengths"]["source"] == "jsonl" and data["lengths"]["total_tokens"] == 6 + 12
    assert data["recommended_pack_size"] == 16


def test_no_valid_candidate_exits_1(capsys):
    assert main(["plan", "--lengths", "100,200", "--dp", "3"]) == 1
    out = capsys.readouterr().out
    assert "no recommendation: no candidate is valid" in out
    assert "2048: [BATCH-GBS-DIVISIBLE] global_batch_size 32 is not divisible by DP=3" in out


def test_errors_are_one_line_with_exit_2(capsys, write_jsonl):
    assert main(["plan", "--lengths", "5,3", "--pad-seq-to-mult", "6", "--tp", "4", "--cp", "2", "--sp"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("seqpack plan: error: [PACK-OFFLINE-PAD-MULT-TOPOLOGY]")

    assert main(["plan", "--lengths", "5,0"]) == 2
    assert "lengths[1] is 0" in capsys.readouterr().err

    path = write_jsonl([{"prompt": "a", "completion": "b"}])
    assert main(["plan", "--jsonl", str(path), "--schema", "chat"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err


def test_a_source_is_required_and_exclusive(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["plan", "--lengths", "1", "--mix", "uniform"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_plan_and_mcp_are_listed():
    text = build_parser().format_help()
    assert "plan" in text and "mcp" in text

"""seqpack align / validate / rules: exit codes, JSON shape, one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqpack.faces.cli import main
from seqpack.config.rules import RULES
from seqpack.config.examples import list_examples

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "seqpack", *args], capture_output=True, text=True, env=env)


def test_align_text_and_json(capsys):
    assert main(["align", "--tp", "4", "--cp", "2", "--sp"]) == 0
    assert "pad_seq_to_mult = lcm(4, 8) = 8" in capsys.readouterr().out
    assert main(["align", "--tp", "2", "--cp", "2", "--sp", "--eval-cp", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pad_seq_to_mult"] == 8 and data["cp_multiple"] == 4 and data["eval_cp"] == 4


def test_align_candidates_json(capsys):
    assert main(["align", "--token-slots", "65536", "--dp", "16", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["candidates"]
    assert [(r["pack_size"], r["valid"]) for r in rows] == [(2048, True), (4096, True), (8192, False)]


def test_validate_exit_codes_and_json(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("dataset:\n  kind: direct_hf\n  enable_in_batch_packing: true\n  dataloader_type: single\n"
                    "train:\n  micro_batch_size: 4\n")
    assert main(["validate", str(good)]) == 0
    assert capsys.readouterr().out.startswith("VALID")
    assert main(["validate", str(good), "--set", "train.micro_batch_size=1", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"ok", "violations", "warnings", "resolved", "rules_checked", "config", "bridge_version",
                         "not_checked", "packs"}
    assert data["ok"] is False
    (v,) = data["violations"]
    assert v["rule_id"] == "PACK-IN-BATCH-MBS" and v["fields"]["train.micro_batch_size"] == 1
    assert set(v) == {"rule_id", "severity", "family", "title", "message", "fix", "fields", "provenance", "source"}


def test_validate_strict_turns_warnings_into_failure(capsys):
    args = ["validate", "--example", "in_batch_mbs4", "--set", "dataset.in_batch_packing_pad_to_multiple_of=16"]
    assert main(args) == 0
    assert main(args + ["--strict"]) == 1
    assert "PACK-IN-BATCH-MULTIPLE-OVERRIDDEN" in capsys.readouterr().out


@pytest.mark.parametrize("name", list_examples())
def test_bundled_examples(name, capsys):
    from seqpack.config.examples import example_target

    expected = 1 if name.startswith("broken") else 0
    target = example_target(name)
    assert main(["validate", "--example", name, "--bridge-version", target]) == expected
    if target != "0.6.2":  # a main-only feature: the release refuses it, naming the version
        capsys.readouterr()
        assert main(["validate", "--example", name]) == 1
        out = capsys.readouterr().out
        assert "not in megatron-bridge 0.6.2" in out or "in no Megatron-Bridge release" in out


def test_rules_formats(capsys):
    assert main(["rules", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in data] == [r.id for r in RULES]
    assert main(["rules", "--format", "markdown", "--family", "energon"]) == 0
    out = capsys.readouterr().out
    assert "| `PACK-ENERGON-MBS1` |" in out and "PACK-OFFLINE-MBS1" not in out
    assert main(["rules", "PACK-OFFLINE-MBS1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["severity"] == "error"
    assert main(["rules", "cuda graph"]) == 0
    assert "PACK-CUDA-GRAPH-PAD-CU" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["validate", "missing.yaml"], "config file not found"),
        (["validate", "--set", "x"], "give a config file"),
        (["validate", "--example", "nope"], "no bundled example named 'nope'"),
        (["align", "--tp", "0"], "tp must be a positive integer"),
        (["align", "--tp", "x"], "invalid int value"),
        (["rules", "--family", "bogus"], "invalid choice: 'bogus'"),
        (["rules", "zzzz-nothing"], "No rule id or keyword match for 'zzzz-nothing'"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_errors_are_one_line_exit_2(args, fragment):
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_config_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  context_parallel_size: 2\ndataset:\n  enable_offline_packin: true\n")
    proc = run_cli("validate", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:4" in proc.stderr and "enable_offline_packing" in proc.stderr


def test_light_commands_do_not_import_torch():
    code = (
        "import sys; from seqpack.faces.cli import main; main(['validate', '--example', 'in_batch_mbs4']);"
        "main(['align', '--cp', '2']); main(['rules', '--json']);"
        "print('HEAVY', sorted(m for m in ('torch', 'numpy', 'pyarrow', 'megatron') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "HEAVY []" in out

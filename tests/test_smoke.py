"""The packing smoke test: every check passes on the real paths, and each can fail (negative controls)."""

import json
import subprocess
import sys

import pytest

from seqpack.faces.cli import main
from seqpack.core.errors import UsageError
from seqpack.core.packing_paths import path_names
from seqpack.smoke.report import CHECK_NAMES, DEFAULT_CONFIGS
from seqpack.smoke.run import run_packing_smoke_test


def _status(report):
    return {c.name: c.passed for c in report.checks}


@pytest.mark.distributed
@pytest.mark.parametrize("path", path_names())
def test_default_smoke_passes_every_check_including_cp(path, smoke_cp_reports):
    report = smoke_cp_reports[path]
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    assert all(c.passed is True for c in report.checks), [(c.name, c.message) for c in report.checks]
    eq = report.check("packed_equals_unpacked").value
    assert eq["sequences"] == report.data["samples"] > 0 and eq["max_grad_diff"] < 1e-9
    assert eq["losses"] == ["lm"] and eq["outputs"] == ["logits"] and eq["outside_loss_tokens"] == 0
    cp = report.check("cp_matches_cp1").value
    assert cp["cp"] == 2 and cp["max_grad_diff"] < 1e-9
    assert report.check("no_cross_sequence_leakage").value["min_own_output_change"] > 0
    # one launch served every path; the real PackedSeqParams was built there, Megatron-Core imported once
    assert cp["launch_paths"] == [r.path for r in smoke_cp_reports.values()]
    assert report.data["packed_seq_params"] == "megatron.core.packed_seq_params.PackedSeqParams"
    assert report.timings["megatron_core_import_s"] > 0


@pytest.mark.slow
def test_the_smoke_process_never_imports_megatron_core():
    code = ("import sys; from seqpack.smoke.run import run_packing_smoke_test as r; "
            "rep = r('in_batch', size='tiny', cp_check=False); "
            "assert 'megatron.core' not in sys.modules, 'imported'; print(rep.data['packed_seq_params'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "field mapping only" in done.stdout


@pytest.mark.parametrize("path", ["offline", "in_batch", "energon"])
def test_attention_without_boundaries_fails_equivalence_and_leakage(path):
    report = run_packing_smoke_test(path, size="tiny", cp_check=False, faults=["no_boundaries"])
    status = _status(report)
    assert status["packed_equals_unpacked"] is False and status["no_cross_sequence_leakage"] is False
    assert status["samples_exactly_once"] is True and not report.ok
    assert report.check("no_cross_sequence_leakage").value["max_other_output_change"] > 1e-6
    assert "cu_seqlens" in report.check("packed_equals_unpacked").fix


def test_shifted_loss_mask_fails():
    report = run_packing_smoke_test("offline", size="tiny", cp_check=False, faults=["shift_loss_mask"])
    status = _status(report)
    assert status["packed_equals_unpacked"] is False
    assert status["samples_exactly_once"] is False


def test_dropped_sample_fails_exactly_once_and_token_count():
    report = run_packing_smoke_test("in_batch", size="tiny", cp_check=False, faults=["drop_sample"])
    status = _status(report)
    assert status["samples_exactly_once"] is False and status["loss_tokens_preserved"] is False
    assert report.check("samples_exactly_once").value["missing"] > 0


def test_positions_that_do_not_restart_fail():
    report = run_packing_smoke_test("offline", size="tiny", cp_check=False, faults=["no_position_reset"])
    assert _status(report)["position_ids_restart"] is False


@pytest.mark.distributed
def test_wrong_alignment_for_cp_fails_the_cp_check_with_the_rule(smoke_cp_reports):
    report = smoke_cp_reports["offline-pad1"]
    cp = report.check("cp_matches_cp1")
    assert cp.passed is False and cp.rule_id == "PACK-OFFLINE-PAD-MULT-TOPOLOGY"
    assert "divisible" in cp.message or "multiple" in cp.message
    config = report.check("config_valid")
    assert config.passed is False and "PACK-OFFLINE-PAD-MULT-TOPOLOGY" in config.value


@pytest.mark.distributed
def test_mean_loss_reduction_under_cp_differs_from_cp1(smoke_cp_reports):
    report = smoke_cp_reports["in_batch-mean-loss"]
    assert report.check("config_valid").rule_id == "CP-FT-PER-TOKEN-LOSS"
    cp = report.check("cp_matches_cp1")
    assert cp.passed is False and cp.value["max_grad_diff"] > 1e-6


def test_cp1_config_skips_cp_check_and_is_not_a_pass():
    report = run_packing_smoke_test("offline", size="tiny",
                                    overrides=["model.context_parallel_size=1", "dist.world_size=1",
                                               "dataset.offline_packing_specs.pad_seq_to_mult=1"])
    cp = report.check("cp_matches_cp1")
    assert cp.passed is None and cp.status == "skipped" and "context_parallel_size=1" in cp.reason
    assert all(c.status == "passed" for c in report.checks if c is not cp)
    assert report.result == "incomplete" and report.skipped == ["cp_matches_cp1"] and not report.ok


def test_a_batch_of_single_sequences_skips_the_leakage_check(write_jsonl):
    # every pack holds one sequence (two rows that cannot share a 128-token pack): nothing to perturb
    rows = [{"prompt": "p" * 40, "completion": "c" * 60}, {"prompt": "q" * 50, "completion": "d" * 50}]
    cfg = {"model": {"seq_length": 128}, "dataset": {"seq_length": 128, "enable_offline_packing": True,
           "offline_packing_specs": {"packed_sequence_size": 128, "pad_seq_to_mult": 1}}}
    report = run_packing_smoke_test("offline", cfg, write_jsonl(rows), size="tiny", cp_check=False)
    leak = report.check("no_cross_sequence_leakage")
    assert leak.status == "skipped" and "two sequences" in leak.reason
    assert report.result == "incomplete" and set(report.skipped) == {"no_cross_sequence_leakage", "cp_matches_cp1"}


def test_a_failure_outranks_a_skip():
    report = run_packing_smoke_test("offline", size="tiny", cp_check=False, faults=["no_position_reset"])
    assert report.skipped == ["cp_matches_cp1"] and report.result == "fail" and not report.ok


def test_argument_errors():
    with pytest.raises(UsageError, match="unknown packing path"):
        run_packing_smoke_test("bogus")
    with pytest.raises(UsageError, match="unknown fault"):
        run_packing_smoke_test("offline", faults=["nope"])
    with pytest.raises(UsageError, match="does not turn on the offline path"):
        run_packing_smoke_test("offline", DEFAULT_CONFIGS["in_batch"])


def test_user_config_file_and_data(tmp_path, write_jsonl):
    rows = [{"prompt": f"question {i}", "completion": "answer " * (1 + i % 5)} for i in range(10)]
    data = write_jsonl(rows)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "model: {seq_length: 128}\n"
        "dataset: {seq_length: 128, enable_offline_packing: true,\n"
        "          offline_packing_specs: {packed_sequence_size: 128, pad_seq_to_mult: 1}}\n"
    )
    report = run_packing_smoke_test("offline", str(cfg), data, size="medium")
    assert report.data["samples"] == 10 and report.data["rows"] == 10
    # CP=1 config: everything that can run passes, the CP check is skipped, so the run is incomplete
    assert report.skipped == ["cp_matches_cp1"] and report.result == "incomplete"


def test_cli_json_and_exit_codes(capsys):
    # --no-cp skips a check the path should run: not a pass (exit 1), reported as incomplete
    assert main(["smoke", "--path", "in_batch", "--size", "tiny", "--no-cp", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["result"] == "incomplete" and out["reports"][0]["path"] == "in_batch"
    assert out["reports"][0]["skipped"] == ["cp_matches_cp1"]
    assert main(["smoke", "--path", "in_batch", "--size", "tiny", "--no-cp"]) == 1
    assert "INCOMPLETE" in capsys.readouterr().out
    assert main(["smoke", "--path", "offline", "--size", "tiny", "--no-cp",
                 "--set", "dataset.offline_packing_specs.pad_seq_to_mult=2"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and "config_valid" in text

"""The packing smoke test on the global-batch path (DP ranks simulated in one process), and negative controls."""

from __future__ import annotations

import json

import pytest

from seqpack.core.errors import ConfigViolationError
from seqpack.smoke.report import CHECK_NAMES, DEFAULT_CONFIGS
from seqpack.smoke.run import run_packing_smoke_test


def _status(report):
    return {c.name: c.passed for c in report.checks}


@pytest.mark.distributed
def test_global_batch_smoke_passes_every_check_including_cp(smoke_cp_reports):
    report = smoke_cp_reports["global_batch"]
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    assert all(c.passed is True for c in report.checks), [(c.name, c.message) for c in report.checks]
    assert report.data["samples"] == report.check("packed_equals_unpacked").value["sequences"] == 12
    assert report.data["dp_size"] == 2 and report.data["simulated_dp_ranks"] is True
    assert report.data["steps"] == 2 and report.data["pad_seq_to_mult"] == 4  # 12 rows, GBS 8: 8 + 4
    assert report.check("cp_matches_cp1").value["cp"] == 2


def test_balanced_scheduler_passes_too():
    cfg = json.loads(json.dumps(DEFAULT_CONFIGS["global_batch"]))
    cfg["model"]["sequence_packing_scheduler"] = "balanced"
    report = run_packing_smoke_test("global_batch", cfg, size="tiny", cp_check=False, bridge_version="main")
    assert report.skipped == ["cp_matches_cp1"] and report.result == "incomplete"  # every check that ran passed
    assert report.data["scheduler"] == "balanced"
    assert _status(report)["samples_exactly_once"] is True


def test_attention_without_boundaries_fails():
    report = run_packing_smoke_test("global_batch", size="tiny", cp_check=False, faults=["no_boundaries"])
    status = _status(report)
    assert status["packed_equals_unpacked"] is False and status["no_cross_sequence_leakage"] is False
    assert status["samples_exactly_once"] is True and not report.ok


def test_dropped_pack_fails_exactly_once():
    report = run_packing_smoke_test("global_batch", size="tiny", cp_check=False, faults=["drop_sample"])
    status = _status(report)
    assert status["samples_exactly_once"] is False and status["loss_tokens_preserved"] is False
    assert report.check("samples_exactly_once").value["missing"] > 0


def test_capacity_below_seq_length_is_refused_with_the_rule():
    with pytest.raises(ConfigViolationError) as err:
        run_packing_smoke_test("global_batch", size="tiny", cp_check=False,
                               overrides=["model.max_seqlen_per_dp_cp_rank=64"])
    assert err.value.rule_id == "PACK-GLOBAL-CAPACITY"

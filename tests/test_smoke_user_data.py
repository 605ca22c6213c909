"""The smoke test on what users bring: chat rows rendered with a real model template on every path, samples
matched to packed sequences by their row (not by content), and the planted faults that must still fail."""

import numpy as np
import pytest

from tests.tokenizer_bundles import require_tokenizer_dir
from seqpack.core.packing_paths import PathBatches, path_names
from seqpack.data import demo_path
from seqpack.smoke.checks import exactly_once_check, match_sequences
from seqpack.smoke.run import SmokeRequest, run_packing_smoke_tests
from seqpack.packing.thd import build_thd_batch


def _status(report):
    return {c.name: c.status for c in report.checks}


# --- matching, on hand-made batches ------------------------------------------------------------------


def _sample(i, tokens, mask):
    tokens = list(tokens)
    return {"id": i, "tokens": np.array(tokens[:-1]), "labels": np.array(tokens[1:]), "loss_mask": np.array(mask, float)}


def _batch(seqs, rows):
    batch = build_thd_batch([{"tokens": s["tokens"], "labels": s["labels"], "loss_mask": s["loss_mask"]}
                             for s in seqs], pad_seq_to_mult=1)
    batch["row_indices"] = rows
    return batch


A = _sample(0, [5, 6, 7, 8, 9], [0, 1, 1, 1])
B = _sample(1, [3, 4, 5, 6], [0, 1, 1])


def test_rows_named_by_the_batch_are_matched_and_compared():
    matches = match_sequences([A, B], [_batch([A, B], [0, 1])])
    assert [(m.sample, m.status) for m in matches[0]] == [(0, "same"), (1, "same")]
    check = exactly_once_check(PathBatches([], [A, B], 2, 0), matches)
    assert check.passed and check.value["missing"] == check.value["altered"] == 0


def test_an_untrained_tail_on_either_side_is_the_same_sample():
    longer = {**A, "tokens": np.append(A["tokens"], 9), "labels": np.append(A["labels"], 1),
              "loss_mask": np.append(A["loss_mask"], 0.0)}  # the reader keeps one untrained input more
    shorter = {k: (v[:-1] if k != "id" else v) for k, v in B.items()}
    shorter["loss_mask"] = shorter["loss_mask"].copy()
    b_untrained_end = {**B, "loss_mask": np.array([0.0, 1.0, 0.0])}
    matches = match_sequences([A, b_untrained_end], [_batch([longer, shorter], [0, 1])])
    assert [(m.status, m.compared) for m in matches[0]] == [("tail", 4), ("tail", 2)]


def test_a_trained_tail_or_changed_content_is_altered_and_fails():
    trained_tail = {**A, "tokens": np.append(A["tokens"], 9), "labels": np.append(A["labels"], 1),
                    "loss_mask": np.append(A["loss_mask"], 1.0)}
    changed = {**B, "labels": np.array([4, 5, 7])}
    matches = match_sequences([A, B], [_batch([trained_tail, changed], [0, 1])])
    assert [m.status for m in matches[0]] == ["altered", "altered"]
    check = exactly_once_check(PathBatches([], [A, B], 2, 0), matches)
    assert check.passed is False and check.value["altered"] == 2 and "altered" in check.fix


def test_a_missing_and_a_duplicated_row_are_counted_apart():
    matches = match_sequences([A, B], [_batch([A], [0]), _batch([A], [0])])
    check = exactly_once_check(PathBatches([], [A, B], 2, 0), matches)
    assert check.passed is False and check.value["missing"] == 1 and check.value["duplicated"] == 1
    assert "1 missing" in check.message and "1 duplicated" in check.message


def test_batches_without_row_ids_fall_back_to_content():
    batch = _batch([A, B], [0, 1])
    del batch["row_indices"]
    assert [m.status for m in match_sequences([A, B], [batch])[0]] == ["same", "same"]


# --- the real paths with a real chat template ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", path_names())
def test_chat_rows_with_qwen3s_template_pass_every_in_process_check(path):
    qwen3 = require_tokenizer_dir("qwen3")
    report = run_packing_smoke_tests([SmokeRequest(path, data=demo_path("chat"), tokenizer=str(qwen3))],
                                     size="tiny", cp_check=False)[0]
    assert all(c.status == "passed" for c in report.checks if c.name != "cp_matches_cp1"), \
        [(c.name, c.message) for c in report.checks]
    assert report.data["tokenizer"] == str(qwen3) and report.data["compact_vocabulary"]["largest_id"] > 150_000
    assert report.check("packed_equals_unpacked").value["sequences"] == report.data["samples"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("fault, failing", [("drop_sample", ("samples_exactly_once", "loss_tokens_preserved")),
                                            ("shift_loss_mask", ("samples_exactly_once", "packed_equals_unpacked"))])
def test_planted_faults_still_fail_on_chat_rows_with_a_real_template(fault, failing):
    qwen3 = require_tokenizer_dir("qwen3")
    report = run_packing_smoke_tests([SmokeRequest("offline", data=demo_path("chat"), tokenizer=str(qwen3),
                                                   faults=(fault,))], size="tiny", cp_check=False)[0]
    assert all(_status(report)[name] == "failed" for name in failing) and report.result == "fail"


@pytest.mark.distributed
@pytest.mark.parametrize("path", path_names())
def test_chat_rows_with_qwen3s_template_pass_with_cp2(path, smoke_cp_reports):
    require_tokenizer_dir("qwen3")
    report = smoke_cp_reports[f"chat-qwen3-{path}"]
    assert report.result == "pass", [(c.name, c.message) for c in report.checks]
    assert report.check("cp_matches_cp1").value["cp"] == 2


def test_the_byte_tokenizer_is_named_when_none_is_given():
    report = run_packing_smoke_tests([SmokeRequest("offline")], size="tiny", cp_check=False)[0]
    assert report.data["tokenizer"] == "byte (default)" and "compact_vocabulary" not in report.data


def test_a_users_config_is_checked_for_the_release_validate_checks_by_default():
    from seqpack.smoke.report import default_config

    config = default_config("in_batch")  # a path the release does not have (PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION)
    report = run_packing_smoke_tests([SmokeRequest("in_batch", config)], size="tiny", cp_check=False)[0]
    check = report.check("config_valid")
    assert check.status == "failed" and check.rule_id == "PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION"
    assert "0.6.2" in check.message and "main" in check.fix and report.result == "fail"
    on_main = run_packing_smoke_tests([SmokeRequest("in_batch", config, bridge_version="main")], size="tiny",
                                      cp_check=False)[0]
    assert on_main.check("config_valid").status == "passed" and on_main.check("config_valid").value["bridge_version"] == "main"
    demo = run_packing_smoke_tests([SmokeRequest("in_batch")], size="tiny", cp_check=False)[0]
    assert demo.check("config_valid").status == "passed" and "needs main" in demo.check("config_valid").message


def test_a_run_that_rejected_most_rows_is_incomplete(write_jsonl):
    rows = [{"prompt": "p" * 400, "completion": "c" * 400}] * 5 + [{"prompt": "p", "completion": "c" * 20}] * 2
    data = write_jsonl(rows)
    report = run_packing_smoke_tests([SmokeRequest("energon", data=data)], size="tiny", cp_check=False)[0]
    assert all(c.status != "failed" for c in report.checks)
    assert report.result == "incomplete" and report.data["rows_rejected"] == 5
    assert any("5 of 7 rows" in note for note in report.notes)
    assert report.data["rejected"] == {"too_long": 5}


@pytest.mark.slow
@pytest.mark.parametrize("path", ["in_batch", "energon"])
def test_every_dp_rank_is_simulated_so_no_sample_looks_dropped(path):
    overrides = ("dist.world_size=8", "train.global_batch_size=16")  # CP 2 -> DP 4
    report = run_packing_smoke_tests([SmokeRequest(path, overrides=overrides)], size="tiny", cp_check=False)[0]
    assert report.data["dp_size"] == 4 and report.data["simulated_dp_ranks"] is True
    assert _status(report)["samples_exactly_once"] == "passed" and _status(report)["loss_tokens_preserved"] == "passed"
    assert report.result == "incomplete"  # only the CP check was left out


@pytest.mark.distributed
@pytest.mark.parametrize("path", ["in_batch", "energon"])
def test_vlm_rows_read_in_place_pass_with_cp2_when_a_rank_holds_no_image(path, smoke_cp_reports):
    require_tokenizer_dir("qwen2_5")
    report = smoke_cp_reports[f"vlm-big-{path}"]
    assert report.result == "pass", [(c.name, c.message) for c in report.checks]
    assert report.data["source"].endswith("vlm.jsonl") and report.data["rows_rejected"] == 0


def test_the_users_rows_in_bytes_get_a_warning_and_a_real_tokenizer_none():
    data = demo_path("chat")
    report = run_packing_smoke_tests([SmokeRequest("offline", data=data)], size="tiny", cp_check=False)[0]
    assert any("byte tokenizer" in n and "--tokenizer" in n for n in report.notes)
    demo = run_packing_smoke_tests([SmokeRequest("offline")], size="tiny", cp_check=False)[0]
    assert not any("byte tokenizer" in n for n in demo.notes)  # the demo data is not the user's

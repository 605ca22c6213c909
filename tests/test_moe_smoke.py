"""The smoke test with the MoE and MTP options of the reference model, on every packing path.

Every path builds its batches with its own code; the option checks compare each packed micro-batch
with its samples run alone (router statistics; MTP losses, counts, logits and gradients), with
fixed-width packs on and off. Negative controls: the router counting padding, MTP rolled across
boundaries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpack.core.errors import UsageError
from seqpack.smoke.run import run_packing_smoke_test

pytestmark = pytest.mark.slow

BOTH = {"moe": True, "mtp": True}
#: (path, overrides) runs: fixed-width packs off and on where the path has the switch.
RUNS = [
    ("offline", ()),
    ("offline", ("dataset.dataset_kwargs.pad_to_max_length=true",)),
    ("in_batch", ()),
    ("in_batch", ("dataset.pad_to_max_length=true",)),
    ("energon", ()),
    ("energon", ("dataset.pad_to_max_length=true",)),
    ("global_batch", ()),
]


def _status(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def _short_rows(path: Path, n: int = 16) -> Path:
    """Completion-only rows short enough that four of them fit one seq_length-wide in-batch pack."""
    path.write_text("".join(json.dumps({"prompt": "", "completion": "abcdefgh "[: 3 + i % 6] * (1 + i % 4)}) + "\n"
                            for i in range(n)))
    return path


@pytest.mark.parametrize(("path", "overrides"), RUNS, ids=[f"{p}{'-fixed' if o else ''}" for p, o in RUNS])
def test_options_pass_on_every_path(path: str, overrides: tuple[str, ...], tmp_path: Path) -> None:
    # in-batch packs are at most seq_length wide when fixed: give it rows that fit four to a pack
    data = _short_rows(tmp_path / "rows.jsonl") if path == "in_batch" and overrides else None
    report = run_packing_smoke_test(path, data=data, overrides=overrides, cp_check=False, model=BOTH,
                                    mtp_roll="reference")
    status = _status(report)
    assert status["moe_router_statistics"] == status["mtp_equals_unpacked"] == "passed", report.to_dict()
    assert status["packed_equals_unpacked"] == "passed"
    assert report.config["reference_model"]["moe"]["num_experts"] == 4
    moe = report.check("moe_router_statistics").value
    assert moe["batches"] >= 1 and moe["moe_layers"] == 3 and moe["max_count_diff"] == 0
    if overrides:  # fixed-width packs: their padding is dispatched but never counted
        assert moe["dispatched_padding"] > 0


@pytest.mark.parametrize("path", ["offline", "in_batch", "energon", "global_batch"])
def test_router_counting_padding_fails_the_statistics(path: str) -> None:
    report = run_packing_smoke_test(path, cp_check=False, model={"moe": True}, faults=("router_counts_padding",))
    check = report.check("moe_router_statistics")
    assert check.status == "failed" and report.result == "fail"
    assert check.value["max_count_diff"] > 0 and check.value["max_aux_loss_diff"] > 1e-6
    assert report.check("packed_equals_unpacked").status == "passed"  # only the statistics can see it


def test_mtp_rolled_across_boundaries_fails_and_its_loss_diverges(tmp_path: Path) -> None:
    # completion-only rows: the first label of every sequence is supervised, so a crossed roll adds targets
    rows = _short_rows(tmp_path / "rows.jsonl", 12)
    good = run_packing_smoke_test("offline", data=rows, cp_check=False, model={"mtp": True}, mtp_roll="reference")
    assert good.check("mtp_equals_unpacked").status == "passed"
    bad = run_packing_smoke_test("offline", data=rows, cp_check=False, model={"mtp": True},
                                 faults=("mtp_cross_boundary",))
    value = bad.check("mtp_equals_unpacked").value
    assert bad.check("mtp_equals_unpacked").status == "failed"
    assert value["max_mtp_loss_diff"] > 1e-6 and value["max_mtp_count_diff"] >= 1 and value["max_mtp_logit_diff"] > 1e-6
    # with the demo chat data the loss mask hides the crossed targets, the logits do not
    chat = run_packing_smoke_test("in_batch", cp_check=False, model={"mtp": True}, faults=("mtp_cross_boundary",))
    assert chat.check("mtp_equals_unpacked").status == "failed"
    assert chat.check("mtp_equals_unpacked").value["max_mtp_logit_diff"] > 1e-6


#: An offline config without per-sequence alignment padding (CP 1, no SP, pad_seq_to_mult 1).
NO_ALIGNMENT_PADDING = ("model.context_parallel_size=1", "dist.world_size=1",
                        "dataset.offline_packing_specs.pad_seq_to_mult=1")


def test_megatron_cores_own_roll_trains_wrong_mtp_targets_across_alignment_padding() -> None:
    # the default offline config aligns every sequence to 4: Megatron-Core's roll_tensor (the installed
    # release, run here) reads its windows from cu_seqlens_q over the padded row (MTP-PACKED-ALIGNMENT-ROLL)
    report = run_packing_smoke_test("offline", cp_check=False, model={"mtp": True})
    check = report.check("mtp_equals_unpacked")
    assert report.data["mtp_roll"].startswith("megatron-core ") and "roll_tensor" in report.data["mtp_roll"]
    assert check.status == "failed" and check.rule_id == "MTP-PACKED-ALIGNMENT-ROLL" and report.result == "fail"
    assert check.value["max_mtp_loss_diff"] > 1e-6 and "cu_seqlens_q" in check.fix
    # the negative control: without alignment padding the same upstream roll trains the right targets
    plain = run_packing_smoke_test("offline", cp_check=False, model={"mtp": True}, overrides=NO_ALIGNMENT_PADDING)
    assert plain.check("mtp_equals_unpacked").status == "passed", plain.check("mtp_equals_unpacked").message


def test_dense_runs_have_no_option_checks_and_bad_options_are_refused() -> None:
    dense = run_packing_smoke_test("in_batch", cp_check=False)
    assert "moe_router_statistics" not in _status(dense) and "mtp_equals_unpacked" not in _status(dense)
    with pytest.raises(UsageError, match="model option"):
        run_packing_smoke_test("in_batch", cp_check=False, model={"experts": 4})
    with pytest.raises(UsageError):
        run_packing_smoke_test("in_batch", cp_check=False, model={"moe": {"topk": 9}})


def test_cp_check_runs_the_moe_mtp_model() -> None:
    report = run_packing_smoke_test("offline", model=BOTH, mtp_roll="reference")
    assert report.ok, [(c.name, c.status, c.message) for c in report.checks]
    assert report.check("cp_matches_cp1").status == "passed"


def test_cli_flags_turn_the_options_on(capsys: pytest.CaptureFixture) -> None:
    from seqpack.faces.cli import main

    code = main(["smoke", "--path", "offline", "--moe", "--mtp", "--no-cp", "--json"])
    out = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["reports"][0]["checks"]]
    assert code == 1 and out["result"] in ("incomplete", "fail")  # --no-cp: never a pass
    assert "moe_router_statistics" in names and "mtp_equals_unpacked" in names
    # the demo config aligns sequences to 4, where Megatron-Core's own MTP roll is wrong
    mtp = next(c for c in out["reports"][0]["checks"] if c["name"] == "mtp_equals_unpacked")
    assert mtp["status"] == "failed" and mtp["rule_id"] == "MTP-PACKED-ALIGNMENT-ROLL"


def test_a_padding_mask_that_disagrees_with_the_boundaries_fails_the_router_check() -> None:
    """Megatron-Core's router reads the batch's padding_mask: one that marks padding as real fails the MoE check."""
    good = run_packing_smoke_test("offline", cp_check=False, model={"moe": True})
    assert good.check("moe_router_statistics").value["batches_with_wrong_padding_mask"] == 0
    bad = run_packing_smoke_test("offline", cp_check=False, model={"moe": True}, faults=("wrong_padding_mask",))
    check = bad.check("moe_router_statistics")
    assert check.status == "failed" and check.value["batches_with_wrong_padding_mask"] > 0
    assert "padding_mask that disagrees" in check.message

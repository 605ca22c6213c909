"""Bridge's own config dump (``ConfigContainer.to_yaml``, as written next to checkpoints) read by ``seqpack validate``.

The lane builds each case as a real ``ConfigContainer`` from Bridge's SFT template, writes the dump
with Bridge's serializer and runs ``runtime_config_update`` on it. seqpack reads the file as it is
(only the world size, which a dump does not carry, is given as an override, as a user would) and must
agree: Bridge raises <=> seqpack reports an error, and a broken case is reported by the rule that
names that setting (negative controls).
"""

from __future__ import annotations

import pytest

from seqpack.config.bridge_dump import from_bridge_dump, is_bridge_dump
from seqpack.config.yaml_bounded import load_yaml
from seqpack.verbs.validation import ValidateOptions, validate

FUNCTION = "config_dump.to_yaml"
_VLM = {"dataset": "mock_vlm"}

#: name -> (case, the error rule seqpack must report; None = valid on both sides)
CASES: dict[str, tuple[dict, str | None]] = {
    "offline_template": ({}, None),
    "offline_cp2_aligned": ({"world_size": 2, "set": {"model.context_parallel_size": 2,
                                                      "model.calculate_per_token_loss": True,
                                                      "ddp.average_in_collective": False,
                                                      "dataset.offline_packing_specs.pad_seq_to_mult": 4}}, None),
    "offline_mbs2": ({"set": {"train.micro_batch_size": 2}}, "PACK-OFFLINE-MBS1"),
    "offline_pack_size_unset": ({"set": {"dataset.offline_packing_specs.packed_sequence_size": -1}},
                                "PACK-OFFLINE-SIZE-POSITIVE"),
    "offline_pad_cu_without_fixed_width": ({"set": {"dataset.offline_packing_specs.pad_cu_seqlens": True,
                                                    "dataset.dataset_kwargs": {}}},
                                           "PACK-OFFLINE-PAD-CU-FIXED-WIDTH"),
    "offline_cp2_per_sequence_loss": ({"world_size": 2, "set": {"model.context_parallel_size": 2,
                                                                "ddp.average_in_collective": False,
                                                                "dataset.offline_packing_specs.pad_seq_to_mult": 4}},
                                      "CP-FT-PER-TOKEN-LOSS"),
    "in_batch_mock_vlm": ({**_VLM, "set": {"dataset.enable_in_batch_packing": True, "train.micro_batch_size": 2}}, None),
    "in_batch_mock_vlm_mbs1": ({**_VLM, "set": {"dataset.enable_in_batch_packing": True}}, "PACK-IN-BATCH-MBS"),
}


@pytest.fixture(scope="module")
def answers(upstream):
    cases = [{"name": name, **case} for name, (case, _rule) in CASES.items()]
    return {a["name"]: a for a in upstream.call("config_dump.write", cases=cases, out_dir=str(upstream.path("dumps")))}


def _seqpack(answer: dict, world_size: int):
    return validate(ValidateOptions(path=answer["dump"], overrides=[f"dist.world_size={world_size}"]))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_seqpack_reads_bridges_dump_and_agrees(answers, compat, name):
    case, rule = CASES[name]
    answer = answers[name]
    report = _seqpack(answer, case.get("world_size", 1))
    errors = {f.rule_id for f in report.violations}
    assert answer["raises"] == (rule is not None), answer.get("message")  # the case is what it says upstream
    compat.check(FUNCTION, answer["raises"] == bool(errors),
                 detail=f"{name}: Bridge raises={answer['raises']} ({answer.get('message', '')[:200]}), seqpack {errors}")
    if rule is not None:
        assert rule in errors, (name, errors)


@pytest.mark.slow
def test_the_dump_is_bridges_form_and_only_packing_fields_are_read(answers):
    from pathlib import Path

    text = Path(answers["offline_template"]["dump"]).read_text(encoding="utf-8")
    data, _ = load_yaml(text)
    assert is_bridge_dump(data) and data["_target_"] == "megatron.bridge.training.config.ConfigContainer"
    assert {"optimizer", "logger", "checkpoint", "tokenizer", "scheduler", "rng"} <= set(data)  # ignored sections
    mapped, notes = from_bridge_dump(data)
    assert set(mapped) <= {"model", "dataset", "train", "validation", "ddp", "dist", "rerun_state_machine"}
    assert mapped["dataset"]["kind"] == "gpt_sft" and mapped["dataset"]["enable_offline_packing"] is True
    assert mapped["dataset"]["offline_packing_specs"]["packed_sequence_size"] == 2048
    assert any("world_size" in n for n in notes)


@pytest.mark.slow
def test_without_a_world_size_the_dp_rules_wait_for_it(answers):
    report = validate(ValidateOptions(path=answers["offline_template"]["dump"]))
    assert report.ok and report.resolved["data_parallel_size"] is None
    assert any(r["rule_id"] == "BATCH-GBS-DIVISIBLE" for r in report.resolved["unchecked_rules"])

"""seqpack's validator against megatron-bridge 0.6.2's own validation, run in the upstream lane.

Each case is one seqpack config, translated field by field into the ``ConfigContainer`` a user would
build (``lanes/upstream/seqpack_lane/bridge_config.py``) and run through ``runtime_config_update``
(which ends in ``ConfigContainer.validate()``). Agreement: Bridge raises (building a config class or
validating) exactly when ``validate_config(..., bridge_version="0.6.2")`` reports an error. When
both accept, the values Bridge derives must match seqpack's resolved ones (data-parallel size, the
in-batch collate multiple, the fixed width Bridge forces under PP/EP). Where seqpack refuses a
config Bridge accepts, every error rule must name the later upstream failure
(``differences.LATER_FAILURES``); the tests at the end run those failures with the released code
where it runs on CPU. A config Bridge refuses and seqpack accepts fails the test.

Cases: (i) every rule's trigger and fixed example; (ii) generated configs over the packing-relevant
fields (derandomized hypothesis, fixed counts).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack.config import RULES, validate_config
from seqpack.config.load import load_config
from seqpack.config.rules.dataset import KIND_CLASSES, MISSING_FIELDS
from seqpack.config.schema import DatasetConfig
from seqpack_lane.bridge_config import DATASET_CLASSES, bridge_spec
from seqpack_lane.differences import CONSTRUCT, LATER, LATER_FAILURES, VALIDATE
from seqpack.core.versions import BRIDGE_RELEASE

pytestmark = pytest.mark.slow

TARGET = BRIDGE_RELEASE
#: Rule examples the GPT provider cannot express (fields of a vision-language provider): (rule, example).
NOT_EXPRESSIBLE = {
    ("PACK-ENERGON-NO-CUDA-GRAPHS", "trigger"), ("VLM-VISION-GRAPH-PATCH-BUDGET", "trigger"),
    ("VLM-VISION-GRAPH-PATCH-BUDGET", "fixed"),
}


def _cases(upstream, configs: list, label: str) -> list[tuple]:
    """(config, seqpack report, Bridge answer) for each config; one lane request for all of them."""
    specs = [bridge_spec(cfg, str(upstream.path(f"validate/{label}/{i}"))) for i, cfg in enumerate(configs)]
    answers = upstream.call("validate.run", cases=[{"id": i, "spec": s.spec} for i, s in enumerate(specs)])
    reports = [validate_config(cfg, bridge_version=TARGET) for cfg in configs]
    return list(zip(configs, reports, answers, specs))


def _derived_problem(report, answer) -> str | None:
    """Where a config both sides accept, a value Bridge derived that seqpack resolves differently."""
    got, want = answer["derived"], report.resolved
    if want["data_parallel_size"] != got["data_parallel_size"]:
        return f"data-parallel size: seqpack {want['data_parallel_size']}, Bridge {got['data_parallel_size']}"
    kind = report.config["dataset"]["kind"]
    if want.get("packing_path") == "in_batch" and kind != "gpt_sft":
        if want["in_batch_packing_pad_to_multiple_of"] != got["dataset.in_batch_packing_pad_to_multiple_of"]:
            return (f"in-batch collate multiple: seqpack {want['in_batch_packing_pad_to_multiple_of']}, Bridge "
                    f"{got['dataset.in_batch_packing_pad_to_multiple_of']}")
    problem = _hybridep_problem(report, got)
    if problem:
        return problem
    if kind in ("direct_hf", "energon", "mock_vlm"):
        forced = bool(got["dataset.pad_to_max_length"]) and not report.config["dataset"]["pad_to_max_length"]
        warned = "PACK-FIXED-WIDTH-FORCED" in report.rule_ids
        if forced != warned:
            return f"Bridge forced pad_to_max_length={forced}, seqpack's PACK-FIXED-WIDTH-FORCED fired={warned}"
    return None


def _hybridep_problem(report, got: dict) -> str | None:
    """HybridEP's uneven-input padding as Bridge leaves it after validation vs seqpack's resolved value."""
    from seqpack.config.resolve import resolve

    cfg = load_config(report.config)
    m = cfg.model
    if not (m.num_moe_experts and m.moe_token_dispatcher_type == "flex" and m.moe_flex_dispatcher_backend == "hybridep"):
        return None
    ours = bool(resolve(cfg, TARGET).hybridep_padding())
    theirs = bool(got["model.moe_hybridep_pad_uneven_dispatch_inputs"])
    return None if ours == theirs else f"HybridEP uneven-input padding: seqpack {ours}, Bridge {theirs}"


def _record(compat, case, label: str) -> None:
    cfg, report, answer, _spec = case
    errors = [f.rule_id for f in report.violations]
    where = f"{label}: seqpack errors {errors}; Bridge {answer['stage']} {answer['type']}: {answer['message'][:300]}"
    if answer["raises"]:
        compat.check(CONSTRUCT if answer["stage"] == "construct" else VALIDATE, bool(errors),
                     detail=f"Bridge refuses a config seqpack accepts ({where})")
        return
    if not errors:
        problem = _derived_problem(report, answer)
        compat.check(VALIDATE, problem is None, detail=f"{label}: {problem}")
        return
    unexplained = [rule_id for rule_id in errors if rule_id not in LATER_FAILURES]
    if unexplained:
        pytest.fail(f"seqpack refuses a config Bridge accepts, and {unexplained} name no later upstream failure "
                    f"(differences.LATER_FAILURES) ({where})")
    compat.by_design(VALIDATE, LATER_FAILURES[errors[0]][0])


# --- (i) every rule's examples ---------------------------------------------------------------------------------


def _examples() -> list[tuple[str, str, dict]]:
    out = []
    for rule in RULES:
        out.append((rule.id, "trigger", dict(rule.trigger)))
        out.append((rule.id, "fixed", {**rule.trigger, **rule.fixed}))
    return out


def test_every_rule_example_agrees_with_bridge(upstream, compat):
    examples = _examples()
    configs = [load_config(None, list(overrides.items())) for _, _, overrides in examples]
    cases = _cases(upstream, configs, "examples")
    skipped = {(rid, which) for (rid, which, _), case in zip(examples, cases) if case[3].needs_vlm_provider}
    assert skipped == NOT_EXPRESSIBLE  # named here, not silently dropped
    for (rule_id, which, _), case in zip(examples, cases):
        if (rule_id, which) not in skipped:
            _record(compat, case, f"{rule_id} {which}")


def test_the_agreement_check_fails_on_a_disagreement(upstream, compat):
    # negative control: a Bridge-refused config (CP2 fine-tuning without per-token loss) against a report
    # from which that error was removed must fail, and a refused config with the error must pass
    cfg = load_config(None, [("model.context_parallel_size", 2), ("dist.world_size", 2)])
    (case,) = _cases(upstream, [cfg], "control")
    assert case[2]["raises"] and case[2]["type"] == "AssertionError"
    _record(compat, case, "control: refused by both")
    quiet = validate_config(cfg, bridge_version=TARGET, rules=[r for r in RULES if r.id != "CP-FT-PER-TOKEN-LOSS"])
    with pytest.raises(pytest.fail.Exception, match="Bridge refuses a config seqpack accepts"):
        _record(compat, (cfg, quiet, case[2], case[3]), "control")


# --- (ii) generated configs --------------------------------------------------------------------------------------

GOOD_PATHS = ["/data/packed/training_2048.idx.parquet", "/data/packed/training_*.idx.parquet", "/data/packed/train"]
BAD_PATHS = ["/data/sft/training.jsonl", "/data/packed/train.json"]


@st.composite
def configs(draw) -> list[tuple[str, object]]:
    """Dotted overrides over the packing-relevant fields: mostly a sound config of the kind's usual path, with
    one or two settings off at a time (so accepted, refused and seqpack-only-refused configs all occur)."""

    def pct(p: int) -> bool:
        return draw(st.integers(0, 99)) < p

    def pick(*values):
        return draw(st.sampled_from(values))

    kind = pick("gpt_sft", "gpt_sft", "gpt_sft", "direct_hf", "direct_hf", "energon", "mock_vlm", "pretrain")
    tp, cp, pp = pick(1, 1, 2, 4), pick(1, 1, 2, 2, 4, 3), pick(1, 1, 1, 2)
    sp = tp > 1 and pct(50)
    dp = pick(1, 2, 4, 8)
    world = tp * cp * pp * dp + (1 if pct(5) else 0)
    align = math.lcm(2 * cp if cp > 1 else 1, cp * tp if sp else 1)
    seq = pick(2048, 4096, 8192) if not pct(15) else pick(2046, 4095, 1000, 24, 4100)
    if pct(10):
        seq = None
    usual = {"gpt_sft": ["offline", "offline", "offline", "none", "in_batch"],
             "direct_hf": ["in_batch", "in_batch", "none"], "mock_vlm": ["in_batch", "in_batch", "none"],
             "energon": ["in_batch", "none", "native"], "pretrain": ["none"]}[kind]
    path = draw(st.sampled_from(usual)) if not pct(5) else pick("offline", "in_batch", "native")
    mbs = 1 if path in ("offline", "native") else pick(2, 4, 8) if path == "in_batch" else pick(1, 2)
    if pct(8):
        mbs = pick(1, 2, 4)
    steps = pick(1, 2, 4)
    gbs = mbs * dp * steps + (pick(1, 2) if pct(6) else 0)
    out: list[tuple[str, object]] = [
        ("dataset.kind", kind), ("model.tensor_model_parallel_size", tp), ("model.context_parallel_size", cp),
        ("model.pipeline_model_parallel_size", pp), ("dist.world_size", world), ("train.micro_batch_size", mbs),
        ("train.global_batch_size", gbs), ("model.seq_length", seq), ("model.sequence_parallel", sp),
        ("model.calculate_per_token_loss", not pct(10)), ("ddp.average_in_collective", pct(10)),
    ]
    if pct(8):
        out.append(("dataset.seq_length", pick(2048, 4096)))
    fixed_width = False
    if path == "offline":
        size = (seq or 2048) if not pct(15) else pick(2048, 4096, 1024, 2046, -1)
        out += [("dataset.enable_offline_packing", True),
                ("dataset.offline_packing_specs.packed_sequence_size", size),
                ("dataset.offline_packing_specs.pad_seq_to_mult", align if pct(70) else pick(1, 2, 4, 6, 8, None, 0))]
        if pct(20):
            out.append(("dataset.offline_packing_specs.max_single_sequence_length", pick(512, 2048, 4096, 0)))
        train_path = pick(*GOOD_PATHS) if pct(35) else pick(*BAD_PATHS) if pct(6) else None
        if train_path:
            out.append(("dataset.offline_packing_specs.packed_train_data_path", train_path))
            if pct(60):
                out.append(("dataset.offline_packing_specs.packed_metadata_path", "/data/packed/2048_metadata.jsonl"))
            if pct(15):
                out.append(("dataset.offline_packing_specs.packed_val_data_path", pick(*GOOD_PATHS, *BAD_PATHS)))
        fixed_width = pct(40)
        kwargs = {"pad_to_max_length": True} if fixed_width else {}
        if pct(15):
            kwargs["pad_seq_length_to_mult"] = pick(16, 6, 8)
        if kwargs:
            out.append(("dataset.dataset_kwargs", kwargs))
        if fixed_width and pct(40):
            out.append(("dataset.offline_packing_specs.pad_cu_seqlens", True))
        elif pct(5):
            out.append(("dataset.offline_packing_specs.pad_cu_seqlens", True))
    elif path == "in_batch":
        out.append(("dataset.enable_in_batch_packing", True))
        if pct(10):
            out.append(("dataset.in_batch_packing_pad_to_multiple_of", pick(8, 0)))
    elif path == "native":
        out.append(("dataset.packing_buffer_size", pick(16, 16, 0)))
    if kind in ("direct_hf", "energon", "mock_vlm"):
        if pct(30):
            fixed_width = True
            out.append(("dataset.pad_to_max_length", True))
        if pct(10):
            out.append(("dataset.pad_to_multiple_of", pick(64, 0)))
    if kind == "gpt_sft" and pct(5):
        out.append(("dataset.dataset_kwargs", {"max_num_samples": 10}))
    if kind == "gpt_sft" and pct(5):
        out.append(("dataset.hf_rewrite", True))
    if pct(5):  # a field the kind's class may not have
        out.append(pick(("dataset.pad_to_max_length", True), ("dataset.seed", 7), ("dataset.max_train_samples", 100),
                        ("dataset.micro_batch_size", mbs), ("dataset.dataset_kwargs", {"pad_to_max_length": True}),
                        ("dataset.defer_in_batch_packing_to_step", True)))
    if pct(25):
        loaders = {"energon": ["external", "external", "single"], "mock_vlm": ["single", "cyclic"]}
        out.append(("dataset.dataloader_type", pick(*loaders.get(kind, ["single", "cyclic", "batch"]))))
    if pct(5):
        out += [("train.num_epochs", 1)] + ([("dataset.dataloader_type", "batch")] if pct(60) else [])
    if pct(20):
        graph = pick("te-attn", "te-mlp", "te-all", "local-full", "local-full", "local")
        if graph.startswith("te"):
            out += [("model.cuda_graph_impl", "transformer_engine"),
                    ("model.cuda_graph_scope", {"te-attn": ["attn"], "te-mlp": ["mlp"], "te-all": []}[graph])]
        elif graph == "local-full":
            out += [("model.cuda_graph_impl", "local"), ("model.cuda_graph_scope", ["full_iteration"]),
                    ("rerun_state_machine.check_for_nan_in_loss", pct(15))]
        else:
            out.append(("model.cuda_graph_impl", "local"))
    if pct(12):
        out.append(("model.mtp_num_layers", pick(1, 1, 2)))
    if pct(30):
        experts = pick(4, 8)
        ep = pick(1, 2, 4) if (dp * cp) % 4 == 0 else pick(1, 2) if (dp * cp) % 2 == 0 else 1
        out += [("model.num_moe_experts", experts), ("model.expert_model_parallel_size", ep),
                ("model.moe_token_dispatcher_type", pick("alltoall", "alltoall", "alltoall", "allgather", "flex"))]
        if ep > 1 and pct(15):
            out.append(("model.overlap_moe_expert_parallel_comm", True))
        if pct(5):
            out.append(("model.moe_expert_capacity_factor", 1.0))
    elif pct(3):
        out.append(("model.expert_model_parallel_size", 2))
    if pct(6):
        out.append(("model.variable_seq_lengths", True))
    if pct(6):
        out += [("dist.eval_context_parallel_size", pick(1, 2)), ("dist.use_decentralized_pg", pct(50))]
    if pct(12):
        out.append(("validation.eval_global_batch_size", mbs * dp * pick(1, 2) + (1 if pct(20) else 0)))
    return out


GENERATED = 600


@settings(derandomize=True, database=None, deadline=None, max_examples=GENERATED,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(overrides=configs())
def test_generated_configs_agree_with_bridge(upstream, compat, overrides):
    cfg = load_config(None, overrides)
    (case,) = _cases(upstream, [cfg], "generated")
    assert not case[3].needs_vlm_provider
    _record(compat, case, f"generated {overrides}")


def test_hybridep_padding_as_bridge_leaves_it(upstream, compat):
    """megatron-bridge 0.6.2 (with the backport PR #5931) turns moe_hybridep_pad_uneven_dispatch_inputs on for
    every packed eager config, an explicit false included, and keeps the configured value under CUDA graphs or
    without packing: seqpack's resolved value (and so its dispatch width rule) equals Bridge's in every cell."""
    base = ["model.num_moe_experts=4", "model.expert_model_parallel_size=2", "dist.world_size=2",
            "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
            "model.seq_length=2048"]
    paths = {
        "offline": ["dataset.enable_offline_packing=true", "dataset.offline_packing_specs.packed_sequence_size=2048",
                    "dataset.dataset_kwargs.pad_to_max_length=true"],
        "in_batch": ["dataset.kind=direct_hf", "dataset.enable_in_batch_packing=true", "train.micro_batch_size=2"],
        "none": [],
        "none_direct_hf": ["dataset.kind=direct_hf"],
    }
    labels, configs = [], []
    for path, extra in paths.items():
        for padding in (None, False, True):
            for graphs in (False, True):
                over = base + extra + ([] if padding is None else
                                       [f"model.moe_hybridep_pad_uneven_dispatch_inputs={str(padding).lower()}"])
                if graphs:
                    over += ["model.cuda_graph_impl=transformer_engine", "model.cuda_graph_scope=moe_router"]
                labels.append((path, padding, graphs))
                configs.append(load_config(None, over))
    cases = _cases(upstream, configs, "hybridep")
    packed_false_eager = 0
    for (path, padding, graphs), case in zip(labels, cases):
        cfg, report, answer, _spec = case
        assert not answer["raises"], (path, padding, graphs, answer)
        theirs = bool(answer["derived"]["model.moe_hybridep_pad_uneven_dispatch_inputs"])
        from seqpack.config.resolve import resolve

        ours = bool(resolve(cfg, TARGET).hybridep_padding())
        compat.check(VALIDATE, ours == theirs, detail=f"HybridEP {path} set={padding} graphs={graphs}: seqpack {ours}, "
                     f"Bridge {theirs}")
        if path in ("offline", "in_batch") and padding is False and not graphs:
            packed_false_eager += 1
            assert theirs is True  # Bridge overrides the explicit false
            assert not any("HYBRIDEP" in f.rule_id for f in report.warnings)  # so no warning either
    assert packed_false_eager == 2


# --- the lane reads the facts the rules state -------------------------------------------------------------------


def test_dataset_field_table_is_the_releases(upstream):
    fields = upstream.call("validate.class_fields", names=[DATASET_CLASSES[k] for k in MISSING_FIELDS])
    specific = {"enable_offline_packing", "offline_packing_specs", "packing_buffer_size", "enable_in_batch_packing",
                "enable_global_batch_packing", "yields_unpacked_samples", "kind", "seq_length",
                "fold_alignment_padding"}  # the last: PACK-FOLD-ALIGNMENT-BRIDGE-VERSION (no 0.6.2 class has it)
    renamed = {"pretrain": {"seed"}, "mock_vlm": {"seed"}}  # both call it random_seed
    for kind, missing in MISSING_FIELDS.items():
        have = set(fields[DATASET_CLASSES[kind]])
        lacks = {f for f in DatasetConfig.__dataclass_fields__ if f not in have} - specific - renamed.get(kind, set())
        if kind == "gpt_sft":
            lacks -= {"in_batch_packing_pad_to_multiple_of"}  # reported by PACK-IN-BATCH-GPT-SFT-BRIDGE-VERSION
        assert set(missing) == lacks, (kind, KIND_CLASSES[kind])


def test_release_lacks_gpt_sft_in_batch_global_batch_and_has_no_energon_packing_hooks(upstream):
    fields = upstream.call("validate.class_fields", names=["GPTSFTDatasetConfig", "DirectHFSFTDatasetConfig",
                                                            "EnergonDatasetConfig", "MockVLMSFTDatasetConfig",
                                                            "GPTModelProvider"])
    assert "enable_in_batch_packing" not in fields["GPTSFTDatasetConfig"]  # Bridge PR #5493 is on main only
    for name in ("DirectHFSFTDatasetConfig", "EnergonDatasetConfig", "MockVLMSFTDatasetConfig"):
        assert "enable_in_batch_packing" in fields[name]
    assert not any("enable_global_batch_packing" in f for f in fields.values())  # Bridge PR #6127 is open
    assert "sequence_packing_scheduler" not in fields["GPTModelProvider"]  # megatron-core 0.19.2
    assert "max_seqlen_per_dp_cp_rank" in fields["GPTModelProvider"]
    for encoder in ("qwen_vl", "hf", "nemotron_omni"):
        assert upstream.call("later.energon_packing_hooks", encoder=encoder, packing_buffer_size=16)["type"] == \
            "AssertionError"


# --- the later failures, run with the released code ---------------------------------------------------------------


def _later(compat, rule_id: str, breaking: dict, fixed: dict) -> None:
    """The later upstream step raises for the breaking input and not for the fixed one (both recorded)."""
    assert breaking["raises"], (rule_id, breaking)
    assert not fixed["raises"], (rule_id, fixed)
    assert LATER_FAILURES[rule_id][1] == "reproduced"
    compat.equal(LATER, 2)


def test_energon_native_packing_fails_when_the_loader_is_built(upstream, compat):
    bad = upstream.call("later.energon_packing_hooks", encoder="qwen_vl", packing_buffer_size=16)
    ok = upstream.call("later.energon_packing_hooks", encoder="qwen_vl", packing_buffer_size=16, with_hooks=True)
    assert "select_samples_to_pack" in bad["message"]
    _later(compat, "PACK-ENERGON-NATIVE-BRIDGE-VERSION", bad, ok)


def test_null_pad_seq_to_mult_fails_in_the_packed_collate(upstream, compat):
    bad = upstream.call("later.packed_reader", workdir=str(upstream.path("later/null")), pad_seq_to_mult=None)
    ok = upstream.call("later.packed_reader", workdir=str(upstream.path("later/one")), pad_seq_to_mult=1)
    assert bad["type"] == "TypeError"
    _later(compat, "PACK-OFFLINE-PAD-MULT-NULL", bad, ok)


def test_pad_cu_seqlens_without_metadata_fails_in_the_reader(upstream, compat):
    kw = {"pad_seq_to_mult": 1, "pad_cu_seqlens": True, "pad_to_max_length": True}
    bad = upstream.call("later.packed_reader", workdir=str(upstream.path("later/nometa")), **kw)
    ok = upstream.call("later.packed_reader", workdir=str(upstream.path("later/meta")), metadata=True, **kw)
    assert "metadata" in bad["message"]
    _later(compat, "PACK-OFFLINE-PAD-CU-METADATA", bad, ok)


def test_a_sample_longer_than_the_pack_fails_the_fill_step(upstream, compat):
    bad = upstream.call("later.fill_packing", lengths=[5, 20, 7], pack_size=16)
    ok = upstream.call("later.fill_packing", lengths=[5, 16, 7], pack_size=16)
    assert bad["type"] == "KeyError"
    _later(compat, "PACK-OFFLINE-SEQ-LE-PACK", bad, ok)
    cfg = load_config(None, [("dataset.enable_offline_packing", True), ("model.seq_length", 4096),
                             ("dataset.offline_packing_specs.packed_sequence_size", 2048)])
    assert "PACK-OFFLINE-SEQ-LE-PACK" in validate_config(cfg).rule_ids


def test_the_batch_loader_cannot_split_an_in_batch_packed_row(upstream, compat):
    bad = upstream.call("later.split_packed_global_batch", rows=8, num_microbatches=2)
    ok = upstream.call("later.split_packed_global_batch", rows=8, num_microbatches=1)
    _later(compat, "PACK-IN-BATCH-DATALOADER", bad, ok)
    base = [("dataset.kind", "direct_hf"), ("dataset.enable_in_batch_packing", True), ("train.micro_batch_size", 4),
            ("dataset.dataloader_type", "batch"), ("dist.world_size", 2)]
    assert "PACK-IN-BATCH-DATALOADER" in validate_config(None, base + [("train.global_batch_size", 16)]).rule_ids
    assert "PACK-IN-BATCH-DATALOADER" not in validate_config(None, base + [("train.global_batch_size", 8)]).rule_ids


def test_deferred_packing_fails_in_the_vlm_step(upstream, compat):
    bad = upstream.call("later.vlm_step_deferred", enable_in_batch_packing=True, defer_in_batch_packing_to_step=True)
    ok = upstream.call("later.vlm_step_deferred", enable_in_batch_packing=True, defer_in_batch_packing_to_step=False)
    _later(compat, "PACK-IN-BATCH-DEFERRED", bad, ok)


def test_collate_packed_batches_fail_in_the_qwen3_vl_step(upstream, compat):
    bad = upstream.call("later.qwen3_vl_step_batch", collate_packed=True)
    ok = upstream.call("later.qwen3_vl_step_batch", collate_packed=False)
    _later(compat, "PACK-IN-BATCH-STEP-PACKER", bad, ok)


def test_packed_llava_fails_with_pp_or_cp(upstream, compat):
    for pp, cp in ((2, 1), (1, 2)):
        bad = upstream.call("later.llava_packed_parallelism", pp=pp, cp=cp)
        ok = upstream.call("later.llava_packed_parallelism", pp=1, cp=1)
        _later(compat, "PACK-LLAVA-PP-CP", bad, ok)


def test_the_micro_batch_calculator_refuses_an_indivisible_global_batch(upstream, compat):
    bad = upstream.call("later.microbatch_calculator", global_batch_size=12, micro_batch_size=1, data_parallel_size=8)
    ok = upstream.call("later.microbatch_calculator", global_batch_size=16, micro_batch_size=1, data_parallel_size=8)
    _later(compat, "BATCH-GBS-DIVISIBLE", bad, ok)


def test_a_ready_energon_loader_fails_under_another_loader_type(upstream, compat):
    bad = upstream.call("later.loader_over_ready_loader", dataloader_type="single")
    ok = upstream.call("later.loader_over_ready_loader", dataloader_type="external")
    _later(compat, "PACK-ENERGON-DATALOADER", bad, ok)


def test_every_later_failure_is_named_by_its_rule():
    from seqpack.config.rules import RULES_BY_ID

    for rule_id, (_difference, how) in LATER_FAILURES.items():
        rule = RULES_BY_ID[rule_id]
        assert rule.severity == "error" and rule.applies_to(TARGET), rule_id
        kinds = {c.kind for c in rule.upstream_check}
        if rule_id == "PACK-ENERGON-NATIVE-BRIDGE-VERSION":
            assert any(c.package == "megatron-energon" for c in rule.upstream_check)
        assert kinds & {"runtime", "kernel"}, (rule_id, kinds)
        if how == "not run":
            assert "Not reproduced in the upstream lane" in rule.note, rule_id

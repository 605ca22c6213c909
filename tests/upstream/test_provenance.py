"""Rule severities follow evidence: every error cites the upstream check or kernel constraint that fails.

A citation of a release (``megatron-bridge==0.6.2``, ``megatron-core==0.19.2``, ``megatron-energon==7.4.1``)
is re-read in the upstream lane, from the file the lane installed: the cited identifier (``anchor``) must be on
the cited line or within three lines of it. Citations of code no release has name a main commit or pull request
and are marked not checkable in the lane.
"""

from __future__ import annotations

import re

import pytest

from seqpack.config import RULES, validate_config
from seqpack.config.rules.evidence import LANE_PACKAGES, REPOS, UpstreamCheck
from seqpack.core.versions import BRIDGE_TARGETS

ERRORS = [r for r in RULES if r.severity == "error"]
CITATIONS = [(r.id, c) for r in RULES for c in r.upstream_check]
CHECKABLE = [(i, c) for i, c in CITATIONS if c.checkable]
WINDOW = 3


def test_every_error_rule_cites_an_upstream_check():
    missing = [r.id for r in ERRORS if not r.upstream_check]
    assert missing == []
    for rule in ERRORS:
        text = rule.describe()["upstream_check"]
        assert text and all(isinstance(c, UpstreamCheck) for c in rule.upstream_check), rule.id


def test_citations_are_well_formed():
    for rule_id, c in CITATIONS:
        assert c.anchor and c.fails, rule_id
        if c.version:  # a release: the one the lane installs, a path inside the installed package
            assert LANE_PACKAGES.get(c.package) == c.version, (rule_id, c.package, c.version)
            assert c.ref == "" and c.line > 0, rule_id
            assert re.fullmatch(r"megatron/(bridge|core|energon)/[\w./-]+\.py", c.path), (rule_id, c.path)
            assert f"{c.package}=={c.version}" in str(c) and "not checkable" not in str(c)
            continue
        # code no release has: a main commit or pull request, said to be outside the lane
        assert c.package in REPOS and re.fullmatch(r"(main|dev) [0-9a-f]{7,12}|PR #\d+( \([0-9a-f]{7}\))?", c.ref), \
            (rule_id, c.ref)
        assert "not checkable in the lane" in str(c), rule_id
        if c.kind == "documented":
            assert c.line == 0, rule_id
        else:
            assert c.line > 0 and re.fullmatch(r"[\w./-]+\.(py|cu|cpp|h)", c.path), (rule_id, c.path)


def test_release_rules_cite_the_release():
    # a rule checked for the release may cite main-only code only besides a citation of the release, or when
    # its failure is a kernel (Transformer Engine is never installed) or lives in a main-only module
    for rule in ERRORS:
        if not rule.applies_to(BRIDGE_TARGETS[0]):
            continue
        if not any(c.checkable for c in rule.upstream_check):
            assert all(c.package == "transformer-engine" for c in rule.upstream_check), rule.id


def test_documented_only_citations_are_the_global_batch_pull_request():
    documented = {rule_id for rule_id, c in CITATIONS if c.kind == "documented"}
    for rule_id in documented:
        rule = next(r for r in RULES if r.id == rule_id)
        assert rule.targets == ("main",) and 6127 in rule.prs, rule_id


def test_warnings_say_why_they_are_not_errors():
    for rule in RULES:
        if rule.severity == "warning":
            assert rule.source and rule.fix, rule.id


def test_every_rule_names_the_versions_it_holds_for():
    for rule in RULES:
        lines = rule.holds_for()
        assert lines and len(lines) == len(rule.targets), rule.id
        for target, line in zip(rule.targets, lines):
            assert ("megatron-bridge 0.6.2 / megatron-core 0.19.2: checked" in line) if target == "0.6.2" else \
                ("not checkable in the lane" in line), (rule.id, line)


def _problem(citation: UpstreamCheck, answer: dict) -> str | None:
    if "error" in answer:
        return answer["error"]
    if answer["version"] != citation.version:
        return f"installed {citation.package} is {answer['version']}, the citation names {citation.version}"
    if citation.anchor not in "\n".join(answer["lines"]):
        return f"{citation.anchor!r} not near {citation.path}:{citation.line}:\n" + "\n".join(answer["lines"])
    return None


def _read(upstream, citations: list[UpstreamCheck]) -> list[dict]:
    return upstream.call("evidence.read", citations=[{"package": c.package, "path": c.path, "line": c.line}
                                                     for c in citations], context=WINDOW)


def test_every_release_citation_holds_in_the_installed_release(upstream):
    answers = _read(upstream, [c for _, c in CHECKABLE])
    problems = [f"{rule_id}: {_problem(c, a)}" for (rule_id, c), a in zip(CHECKABLE, answers) if _problem(c, a)]
    assert problems == []
    assert len(CHECKABLE) >= 60  # most citations are of the release


def test_the_citation_check_rejects_a_wrong_line_path_or_version(upstream):
    good = next(c for _, c in CHECKABLE if c.package == "megatron-bridge")
    moved = UpstreamCheck(**{**good.__dict__, "line": good.line + 40})
    missing = UpstreamCheck(**{**good.__dict__, "path": "megatron/bridge/nope.py"})
    answers = _read(upstream, [good, moved, missing])
    assert _problem(good, answers[0]) is None
    assert "not near" in _problem(moved, answers[1])
    assert "FileNotFoundError" in _problem(missing, answers[2])
    older = UpstreamCheck(**{**good.__dict__, "version": "0.6.1"})
    assert "the citation names 0.6.1" in _problem(older, answers[0])


def test_facts_of_the_version_table_hold_in_the_release(upstream):
    # pad_between_seqs (Bridge PR #5610): not in the release's packed collate, a field of megatron-core's params
    assert not upstream.call("evidence.contains", package="megatron-bridge",
                             path="megatron/bridge/data/packing/gpt_sft.py", needle="pad_between_seqs")
    assert upstream.call("evidence.contains", package="megatron-core", path="megatron/core/packed_seq_params.py",
                         needle="pad_between_seqs")
    batch = upstream.call("later.packed_reader", workdir=str(upstream.path("provenance/reader")), pad_seq_to_mult=1)
    assert not batch["raises"] and "cu_seqlens_q" in batch["keys"] and "pad_between_seqs" not in batch["keys"]
    # the MoE padding-mask CUDA-graph guard (main's gpt_step): the release's step passes no padding mask
    assert not upstream.call("evidence.contains", package="megatron-bridge",
                             path="megatron/bridge/training/gpt_step.py", needle="padding_mask")
    # negative control of the reader: a needle that is there
    assert upstream.call("evidence.contains", package="megatron-bridge", path="megatron/bridge/training/gpt_step.py",
                         needle="packed_seq")


def test_the_mlp_only_cuda_graph_claim_is_what_the_release_does(upstream):
    # Bridge requires pad_cu_seqlens only when the captured graph holds attention (cuda-graphs.md)
    from seqpack.config.load import load_config
    from seqpack_lane.bridge_config import bridge_spec

    base = [("dataset.enable_offline_packing", True), ("dataset.offline_packing_specs.packed_sequence_size", 2048),
            ("model.seq_length", 2048), ("dataset.dataset_kwargs.pad_to_max_length", True),
            ("model.cuda_graph_impl", "transformer_engine")]
    configs = [load_config(None, base + [("model.cuda_graph_scope", scope)]) for scope in (["mlp"], ["attn"], [])]
    specs = [bridge_spec(cfg, str(upstream.path(f"provenance/graph{i}"))).spec for i, cfg in enumerate(configs)]
    mlp, attn, layer = upstream.call("validate.run", cases=[{"id": i, "spec": s} for i, s in enumerate(specs)])
    assert not mlp["raises"]
    assert attn["raises"] and "pad_cu_seqlens" in attn["message"]
    assert layer["raises"] and "pad_cu_seqlens" in layer["message"]
    assert [validate_config(c).ok for c in configs] == [True, False, False]


# --- the SP-only alignment case, re-graded ------------------------------------------------------------


NEMOTRON3_SUPER_LIKE = [
    ("dist.world_size", 8),
    ("model.tensor_model_parallel_size", 8),
    ("model.sequence_parallel", True),
    ("dataset.enable_offline_packing", True),
    ("dataset.offline_packing_specs.packed_sequence_size", 2048),
    ("dataset.offline_packing_specs.pad_seq_to_mult", 1),
    ("dataset.dataset_kwargs.pad_to_max_length", True),
]


def test_tp8_sp_cp1_pad1_is_a_warning_not_an_error():
    report = validate_config(None, NEMOTRON3_SUPER_LIKE)
    assert report.ok, [f.one_line() for f in report.violations]
    assert "PACK-OFFLINE-PAD-MULT-RECOMMENDED" in report.rule_ids
    assert "PACK-OFFLINE-PAD-MULT-TOPOLOGY" not in report.rule_ids


def test_cp_still_needs_2cp_per_sequence_and_sp_still_needs_an_aligned_width():
    cp = validate_config(None, NEMOTRON3_SUPER_LIKE + [("model.context_parallel_size", 2), ("dist.world_size", 16),
                                                       ("model.calculate_per_token_loss", True),
                                                       ("ddp.average_in_collective", False)])
    assert "PACK-OFFLINE-PAD-MULT-TOPOLOGY" in [f.rule_id for f in cp.violations]
    # 4 = 2*CP satisfies the kernel; the SP term of the lcm (CP*TP = 16) is only recommended
    cp4 = validate_config(None, NEMOTRON3_SUPER_LIKE + [("model.context_parallel_size", 2), ("dist.world_size", 16),
                                                        ("model.calculate_per_token_loss", True),
                                                        ("ddp.average_in_collective", False),
                                                        ("dataset.offline_packing_specs.pad_seq_to_mult", 4)])
    assert cp4.ok and "PACK-OFFLINE-PAD-MULT-RECOMMENDED" in cp4.rule_ids
    # a width that SP cannot split across TP8 is still an error (Megatron-Core's SP scatter fails)
    width = validate_config(None, NEMOTRON3_SUPER_LIKE + [("dataset.offline_packing_specs.packed_sequence_size", 2052),
                                                          ("model.seq_length", 2052)])
    assert "PACK-OFFLINE-WIDTH-ALIGNED" in [f.rule_id for f in width.violations]

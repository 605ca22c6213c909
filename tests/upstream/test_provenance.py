"""Rule severities follow evidence: every error cites the upstream check or kernel constraint that fails.

The citations are checked against the upstream snapshots when they are present: the file exists
at the cited commit and the anchor identifier occurs at (or within three lines of) the cited line.
"""

from __future__ import annotations

import re

import pytest
from upstream_snapshots import git_show, mirror, resolve_commit, skip_reason

from reference_impl.config import RULES, validate_config
from reference_impl.config.rules.evidence import BRIDGE, BRIDGE_PR5493, MCORE, MLM_DEV, REPOS, TE, UpstreamCheck

ERRORS = [r for r in RULES if r.severity == "error"]
CITATIONS = [(r.id, c) for r in RULES for c in r.upstream_check]
KNOWN_COMMITS = {BRIDGE, BRIDGE_PR5493, MCORE, MLM_DEV, TE}


def test_every_error_rule_cites_an_upstream_check():
    missing = [r.id for r in ERRORS if not r.upstream_check]
    assert missing == []
    for rule in ERRORS:
        text = rule.describe()["upstream_check"]
        assert text and all(isinstance(c, UpstreamCheck) for c in rule.upstream_check), rule.id


def test_citations_are_well_formed():
    for rule_id, c in CITATIONS:
        assert c.repo in REPOS, (rule_id, c.repo)
        assert c.anchor and c.fails, rule_id
        if c.kind == "documented":
            assert c.commit == "" and c.line == 0, rule_id
            continue
        assert c.commit in KNOWN_COMMITS, (rule_id, c.commit)
        assert c.line > 0 and re.fullmatch(r"[\w./-]+\.(py|cu|cpp|h)", c.path), (rule_id, c.path)


def test_documented_only_citations_are_the_global_batch_guide():
    # a check no snapshot carries may only back the global-batch rules (their Bridge code is not public yet)
    documented = {rule_id for rule_id, c in CITATIONS if c.kind == "documented"}
    for rule_id in documented:
        rule = next(r for r in RULES if r.id == rule_id)
        assert rule.family == "global_batch" or rule_id == "PACK-EXCLUSIVE-GLOBAL-BATCH", rule_id


def test_warnings_say_why_they_are_not_errors():
    for rule in RULES:
        if rule.severity == "warning":
            assert rule.source and rule.fix, rule.id


def _citation_problem(citation: UpstreamCheck) -> str | None:
    full = REPOS[citation.repo]
    if not resolve_commit(full, citation.commit):
        return f"{citation.commit} is not in the {full} snapshot"
    text = git_show(full, citation.commit, citation.path)
    if text is None:
        return f"{citation.path} does not exist at {citation.commit}"
    lines = text.splitlines()
    window = "\n".join(lines[max(0, citation.line - 4) : citation.line + 3])
    if citation.anchor not in window:
        return f"{citation.anchor!r} not near {citation.path}:{citation.line}:\n{window}"
    return None


CODE_CITATIONS = [(i, c) for i, c in CITATIONS if c.kind != "documented"]


@pytest.mark.parametrize("citation", [c for _, c in CODE_CITATIONS], ids=[f"{i}:{c.line}" for i, c in CODE_CITATIONS])
def test_citation_matches_the_snapshot(citation):
    if mirror(REPOS[citation.repo]) is None:
        pytest.skip(skip_reason(REPOS[citation.repo]))
    assert _citation_problem(citation) is None, _citation_problem(citation)


def test_citation_check_rejects_a_wrong_line_path_or_commit():
    if mirror(REPOS["Megatron-Bridge"]) is None:
        pytest.skip(skip_reason(REPOS["Megatron-Bridge"]))
    good = next(c for _, c in CODE_CITATIONS if c.repo == "Megatron-Bridge")
    assert _citation_problem(good) is None
    assert "not near" in _citation_problem(UpstreamCheck(**{**good.to_dict(), "line": good.line + 40}))
    assert "does not exist" in _citation_problem(UpstreamCheck(**{**good.to_dict(), "path": "src/nope.py"}))
    assert "not in the" in _citation_problem(UpstreamCheck(**{**good.to_dict(), "commit": "0123456789ab"}))


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


def test_the_mlp_only_cuda_graph_claim_is_what_upstream_code_and_tests_show():
    full = REPOS["Megatron-Bridge"]
    if mirror(full) is None:
        pytest.skip(skip_reason(full))
    config = git_show(full, BRIDGE, "src/megatron/bridge/training/config.py").splitlines()
    block = "\n".join(config[1300:1309])
    assert "captures_packed_attention" in block and '"attn" in cuda_graph_modules' in block
    assert "not pad_cu_seqlens" in block
    tests = git_show(full, BRIDGE, "tests/unit_tests/training/test_config.py").splitlines()
    assert "def test_mlp_only_cuda_graph_does_not_require_padded_cu_seqlens" in tests[1823]
    text = (__import__("pathlib").Path(__file__).parents[2] / "docs" / "cuda-graphs.md").read_text()
    assert "lines\n1301-1309" in text or "lines 1301-1309" in text
    assert "test_config.py\nline 1824" in text or "test_config.py line 1824" in text

"""Output schemas of the MCP tools: TypedDicts describing the ``to_dict()`` of each library result.

A tool returns exactly the dict the library's ``to_dict()`` gives (the CLI prints the same with
``--json``); these types only publish its shape as the tool's output schema. They allow extra keys
so a field added to a result later still reaches the client.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

_OPEN = ConfigDict(extra="allow")


@with_config(_OPEN)
class AlignmentOut(TypedDict):
    """Per-sequence alignment of a TP/CP/SP topology (``pad_seq_to_mult``) and why."""

    tp: int
    cp: int
    sp: bool
    eval_cp: int | None
    cp_multiple: int
    sp_multiple: int
    pad_seq_to_mult: int
    seq_length_multiple: int
    explanation: str


@with_config(_OPEN)
class FindingOut(TypedDict):
    """One broken rule, with the offending field values and the fix."""

    rule_id: str
    severity: str
    family: str
    title: str
    message: str
    fix: str
    fields: dict[str, Any]
    provenance: str
    source: str


@with_config(_OPEN)
class ValidationOut(TypedDict):
    """Validation report: ``ok`` is false when an error-severity rule is broken."""

    ok: bool
    violations: list[FindingOut]
    warnings: list[FindingOut]
    resolved: dict[str, Any]
    rules_checked: int
    config: dict[str, Any]


@with_config(_OPEN)
class RuleOut(TypedDict):
    """A rule of the registry in full, with a config that breaks it and the nearby fix."""

    id: str
    family: str
    family_title: str
    severity: str
    title: str
    fields: list[str]
    provenance: str
    source: str
    fix: str
    note: str
    upstream_check: str
    example_trigger: dict[str, Any]
    example_fixed: dict[str, Any]


@with_config(_OPEN)
class ExplainOut(TypedDict):
    """Rules matching a rule id (exactly one) or keywords (up to ``limit``)."""

    query: str
    matched_by: str
    total_matches: int
    rules: list[RuleOut]


@with_config(_OPEN)
class RuleSummaryOut(TypedDict):
    """One line of the rule list."""

    id: str
    severity: str
    family: str
    provenance: str
    title: str


@with_config(_OPEN)
class RuleListOut(TypedDict):
    """The registry (optionally one family), one line per rule, plus the family titles."""

    families: dict[str, str]
    count: int
    rules: list[RuleSummaryOut]


@with_config(_OPEN)
class PlanRowOut(TypedDict):
    """One candidate pack length."""

    pack_len: int
    global_batch_size: int | None
    token_slots: int
    valid: bool
    reasons: list[str]
    sample_cap: int
    too_long: int
    truncated: int
    rejected: int
    tokens_lost: int
    packed_samples: int
    packs: int
    lower_bound: int
    packs_over_lower_bound: int
    packing_efficiency: float
    token_efficiency: float
    padding_waste_share: float
    alignment_padding_share: float
    tail_padding_share: float
    max_seqs_in_pack: int
    mean_seqs_per_pack: float
    steps_per_epoch: float | None
    full_steps_per_epoch: int | None
    notes: list[str]


@with_config(_OPEN)
class LengthSummaryOut(TypedDict):
    """The lengths the plan was computed on."""

    source: str
    num_samples: int
    total_tokens: int
    min: int
    mean: float
    p50: int
    p90: int
    p99: int
    max: int
    details: dict[str, Any] | None


@with_config(_OPEN)
class PlanOut(TypedDict):
    """Equal-token-slot plan: one row per candidate, the recommendation and the rule behind it."""

    recommended_pack_len: int | None
    recommendation: str
    rule: str
    rows: list[PlanRowOut]
    lengths: LengthSummaryOut
    token_slots: int
    dp: int
    pad_seq_to_mult: int
    algorithm: str
    seed: int
    max_seqs_per_pack: int | None
    truncation: str


@with_config(_OPEN)
class BinOut(TypedDict):
    """One bin of a simulated packing: item indices (placement order), their lengths, the tokens."""

    bin: int
    tokens: int
    items: list[int]
    lengths: list[int]


@with_config(_OPEN)
class SimulationOut(TypedDict):
    """Packing statistics plus a window of bins (``bin_offset`` .. ``bin_offset + bins_returned``)."""

    stats: dict[str, Any]
    oversize: list[int]
    truncated: list[int]
    bins: list[BinOut]
    bin_offset: int
    bins_returned: int
    has_more: bool


@with_config(_OPEN)
class SupportOut(TypedDict):
    """Recorded support of one model family for one packing path."""

    family: str
    path: str
    status: str
    note: str
    evidence: str
    known_family: bool


@with_config(_OPEN)
class ModelSupportOut(TypedDict):
    """Support per packing path (status: supported, opt_out, caveat or unknown) with the evidence."""

    query: str
    known_family: bool
    results: list[SupportOut]


@with_config(_OPEN)
class PreparedOut(TypedDict):
    """Where the packs were written (or reused) and how every input row was accounted for."""

    root: str
    files: dict[str, str]
    metadata_path: str
    manifest_path: str
    reused: bool
    fingerprint: str
    splits: dict[str, Any]


@with_config(_OPEN)
class InspectOut(TypedDict):
    """Integrity issues, statistics and (given a topology) whether the packs fit it."""

    path: str
    files: list[str]
    ok: bool
    issues: list[dict[str, Any]]
    issue_count: int
    stats: dict[str, Any]
    settings: dict[str, Any]
    topology: dict[str, Any] | None


@with_config(_OPEN)
class ServerInfoOut(TypedDict):
    """Server version, allowed roots, skill bundle location and which heavy modules are loaded."""

    name: str
    version: str
    roots: list[str]
    skill_dir: str | None
    heavy_modules_loaded: dict[str, bool]


@with_config(_OPEN)
class SmokeCheckOut(TypedDict):
    """One smoke-test check: passed (true/false) or skipped (null), with the measured value."""

    name: str
    passed: bool | None
    value: Any
    threshold: Any
    message: str
    fix: str | None
    rule_id: str | None


@with_config(_OPEN)
class SmokeOut(TypedDict):
    """Packing smoke test report: ok is false when any check failed."""

    path: str
    ok: bool
    checks: list[SmokeCheckOut]
    config: dict[str, Any]
    data: dict[str, Any]
    timings: dict[str, float]
    faults: list[str]

"""The report dataclasses of the verbs whose work needs numpy or pyarrow, importable without them.

:func:`~seqpack.verbs.planning.plan_pack_length`, :func:`~seqpack.verbs.inspection.inspect_packed_dataset`,
:func:`~seqpack.packing.offline.prepare.prepare_packed_dataset` and
:func:`~seqpack.packing.energon.prepare.prepare_energon_dataset` return these (their modules
re-export them). Keeping the types here lets the MCP server publish their output schemas, and a
caller type-check against them, without loading the numeric stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack.core.errors import UsageError
from seqpack.core.results import Result

__all__ = ["ImageTokens", "MRopeLayout", "InspectReport", "LengthSummary", "PackPlan", "PlanRow", "PreparedEnergonDataset",
           "PreparedPacks"]


@dataclass(frozen=True)
class LengthSummary(Result):
    """What the plan was computed on."""

    source: str
    num_samples: int
    total_tokens: int
    min: int
    mean: float
    p50: int
    p90: int
    p99: int
    max: int
    details: dict[str, Any] | None = None


@dataclass(frozen=True)
class PlanRow(Result):
    """One candidate pack size of the equal-token-slot table.

    ``pack_len`` repeats ``pack_size`` under its old name for one release (deprecated: read ``pack_size``).
    ``accounting`` (JSONL input): every row as ``seqpack pack`` at this size would count it (packed, truncated,
    skipped by reason), from the same tokenization, truncation and skip rules.
    """

    pack_size: int
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
    notes: list[str] = field(default_factory=list)
    dispatch: dict[str, Any] | None = None
    pack_len: int | None = None
    accounting: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pack_len", self.pack_size)


@dataclass(frozen=True)
class PackPlan(Result):
    """Result of :func:`plan_pack_length`: the table, the recommendation and its reason.

    ``recommended_pack_len`` repeats ``recommended_pack_size`` under its old name for one release
    (deprecated: read ``recommended_pack_size``). ``tokenizer`` names the tokenizer of JSONL input
    (``byte (default)`` when none was given); ``suggestions``: when no candidate is valid for the DP,
    token-slot counts (and their global batch sizes) that would make a candidate valid; ``warnings``:
    rows of natural language measured in bytes.
    """

    rows: list[PlanRow]
    recommended_pack_size: int | None
    recommendation: str
    rule: str
    lengths: LengthSummary
    token_slots: int
    dp: int
    pad_seq_to_mult: int
    algorithm: str
    seed: int
    max_seqs_per_pack: int | None
    truncation: str
    moe: dict[str, Any] | None = None
    recommended_pack_len: int | None = None
    #: Which multiple ``pad_seq_to_mult`` is (``reports``: recommended or given) and the offline path's required
    #: and recommended values (:func:`seqpack.core.alignment.alignment_requirement`); None from the library call.
    alignment: dict[str, Any] | None = None
    tokenizer: str | None = None
    suggestions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "recommended_pack_len", self.recommended_pack_size)

    def row(self, pack_size: int) -> PlanRow:
        """The row of one candidate pack size."""
        for r in self.rows:
            if r.pack_size == pack_size:
                return r
        raise UsageError(f"pack size {pack_size} is not a candidate of this plan", field="pack_size")


@dataclass
class InspectReport(Result):
    """Result of :func:`inspect_packed_dataset`."""

    path: str
    files: list[str]
    ok: bool
    issues: list[dict[str, Any]]
    issue_count: int
    stats: dict[str, Any]
    settings: dict[str, Any]
    topology: dict[str, Any] | None = None

    @property
    def manifest(self) -> dict[str, Any] | None:
        """The seqpack manifest next to the files, if any (not in the JSON form; its fingerprint is in ``settings``)."""
        return self.attached("manifest")


@dataclass(frozen=True)
class PreparedPacks(Result):
    """Result of :func:`prepare_packed_dataset`: where the packs are and how every row was accounted for.

    ``splits`` is the manifest's per-split summary (files, packs, accounting); the whole manifest
    is :attr:`manifest` (not part of the JSON form). ``reused``: an existing pack of the same
    fingerprint verified against its manifest (sizes, hashes, row counts) was returned;
    ``rebuilt``: why an existing pack of seqpack's own was written again (null otherwise).
    ``pack_dir`` is the fingerprinted folder inside the output root that holds the packs (what
    ``inspect`` and a training config's ``dataset_root`` read); ``root`` repeats it under its old name
    for one release (deprecated: read ``pack_dir``). ``tokenizer`` names the tokenizer (``byte (default)``
    when none was given); ``warnings`` are what the run found worth saying (rows of natural language
    measured in bytes).
    """

    pack_dir: Path
    files: dict[str, Path]
    metadata_path: Path
    manifest_path: Path
    reused: bool
    fingerprint: str
    splits: dict[str, Any]
    rebuilt: str | None = None
    root: Path | None = None
    tokenizer: str | None = None
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", self.pack_dir)

    @property
    def manifest(self) -> dict[str, Any]:
        """The seqpack manifest written next to the packs."""
        return self.attached("manifest", {})

    @classmethod
    def from_manifest(
        cls, root: Path, files: dict[str, Path], metadata_path: Path, manifest_path: Path,
        manifest: dict[str, Any], *, reused: bool, rebuilt: str | None = None,
    ) -> PreparedPacks:
        """The result for packs described by ``manifest``."""
        result = cls(root, files, metadata_path, manifest_path, reused, manifest["fingerprint"], manifest["splits"],
                     rebuilt)
        return result.attach(manifest=manifest)


@dataclass(frozen=True)
class PreparedEnergonDataset(Result):
    """Result of :func:`prepare_energon_dataset` (also what :func:`read_manifest` returns).

    ``seconds`` is the preparation time (reading, sharding, indexing), without importing energon,
    rounded to 0.1 ms. ``skipped`` counts input rows left out by reason (empty completion, ...;
    the manifest's ``accounting`` has their first locations). The whole manifest is
    :attr:`manifest` (not part of the JSON form).
    """

    root: Path
    samples: dict[str, int]
    shards: dict[str, list[str]]
    schema: str
    media: dict[str, Any] | None
    fingerprint: str
    seconds: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    tokenizer: str | None = None

    @property
    def manifest(self) -> dict[str, Any]:
        """The dataset's manifest (``seqpack_energon.json``)."""
        return self.attached("manifest", {})


@dataclass(frozen=True)
class ImageTokens(Result):
    """Result of :func:`seqpack.verbs.vision.image_tokens`: how an image (or ``frames`` frames of
    one size) becomes patches and language-model tokens under a vision preset."""

    vision: str
    height: int
    width: int
    frames: int
    resized_height: int
    resized_width: int
    grid_t: int
    grid_h: int
    grid_w: int
    patch_rows: int
    patch_dim: int
    merge_size: int
    tokens: int
    sequence_tokens: int
    explanation: str


@dataclass(frozen=True)
class MRopeLayout(Result):
    """Result of :func:`seqpack.verbs.vision.mrope_positions`: the M-RoPE ids of a described layout.

    ``blocks``: per item of every sequence its kind, sequence, row offsets ``[start, end)`` and the
    (t, h, w) ids of its first and last token; ``sequences``: per sequence its physical start, real
    length and the id one past its largest; ``position_ids``: ``[3, T]`` when ``T`` is at most
    :data:`~seqpack.core.limits.MAX_MROPE_TOKENS_SHOWN`, else None.
    """

    layout: str
    merge_size: int
    model: str
    text_after_vision: str
    pad_seq_to_mult: int
    total_tokens: int
    blocks: list[dict[str, Any]]
    sequences: list[dict[str, Any]]
    position_ids: list[list[int]] | None

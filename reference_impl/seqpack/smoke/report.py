"""The smoke test's results (:class:`Check`, :class:`SmokeReport`), its names (checks, faults, statuses) and
the reference model and default config it runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from seqpack.core.limits import SMOKE_ROWS
from seqpack.core.packing_paths import get_path, path_names
from seqpack.core.results import Result

log = logging.getLogger(__name__)
TOLERANCE = 1e-9
SIZES = SMOKE_ROWS
FAULTS = ("no_boundaries", "shift_loss_mask", "drop_sample", "no_position_reset", "misaligned_image_tokens",
          "mrope_no_restart", "router_counts_padding", "mtp_cross_boundary", "wrong_padding_mask")
CHECK_NAMES = (
    "config_valid",
    "samples_exactly_once",
    "loss_tokens_preserved",
    "position_ids_restart",
    "packed_equals_unpacked",
    "no_cross_sequence_leakage",
    "cp_matches_cp1",
)
CHECK_STATUSES = ("passed", "failed", "skipped")
#: A run whose tokenization rejected more than this share of the rows is incomplete, never a pass.
MOST_ROWS = 0.5
RESULTS = ("pass", "fail", "incomplete")
def model_config(**options: Any) -> Any:
    """The reference model of the smoke test: the byte tokenizer's vocabulary, two heads (multi-head
    attention at half the attention work of the default four), and ``options`` (fields of
    :class:`~seqpack.training.model.TinyGPTConfig`, e.g. a model option's flag)."""
    from seqpack.data import ByteTokenizer
    from seqpack.training.model import TinyGPTConfig

    return TinyGPTConfig(**{"vocab_size": ByteTokenizer().vocab_size, "num_heads": 2, **options})
def default_config(path: str) -> dict[str, Any]:
    """The default smoke config of a registered path (CP=2, per-token loss): a fresh copy."""
    import copy

    return copy.deepcopy(dict(get_path(path).smoke_config))
def __getattr__(name: str) -> Any:
    # the path registry is the source; these names stay for callers of the first version
    if name == "PATHS":
        return path_names()
    if name == "DEFAULT_CONFIGS":
        return {p: default_config(p) for p in path_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Check", "SmokeReport"]


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


@dataclass
class Check(Result):
    """One check: passed, failed or skipped (``passed`` True/False/None), with numbers.

    ``status`` spells the outcome out; a skipped check carries the ``reason`` it did not run.
    """

    name: str
    passed: bool | None
    value: Any
    threshold: Any
    message: str
    fix: str | None = None
    rule_id: str | None = None
    reason: str | None = None
    status: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.status = {True: "passed", False: "failed", None: "skipped"}[self.passed]
        if self.passed is None and not self.reason:
            self.reason = self.message


@dataclass
class SmokeReport(Result):
    """Result of :func:`run_packing_smoke_test`.

    ``result`` is ``pass`` only when every check ran and passed on most of the rows, ``fail`` when one
    failed, and ``incomplete`` when none failed but some were skipped (``skipped`` names them) or more
    than half the rows were rejected by tokenization (``notes`` says so); ``ok`` is ``result == "pass"``.
    """

    path: str
    ok: bool
    checks: list[Check]
    config: dict[str, Any]
    data: dict[str, Any]
    timings: dict[str, float]
    faults: list[str] = field(default_factory=list)
    result: str = field(init=False, default="")
    skipped: list[str] = field(init=False, default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.skipped = [c.name for c in self.checks if c.passed is None]
        failed = any(c.passed is False for c in self.checks)
        rows, rejected = int(self.data.get("rows", 0)), int(self.data.get("rows_rejected", 0))
        mostly_rejected = rows > 0 and rejected > rows * MOST_ROWS
        if mostly_rejected:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.data.get("rejected", {}).items()))
            self.notes.append(
                f"{rejected} of {rows} rows were rejected{f' ({reasons})' if reasons else ''}, so the checks ran on "
                f"{rows - rejected} row(s) only: raise seq_length (now {self.config.get('seq_length')}) or check the "
                "rows; the run is incomplete, not a pass")
        self.result = "fail" if failed else ("incomplete" if self.skipped or mostly_rejected else "pass")
        self.ok = self.result == "pass"

    def check(self, name: str) -> Check:
        """The check with this name."""
        return next(c for c in self.checks if c.name == name)

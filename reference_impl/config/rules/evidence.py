"""Where upstream fails: the checks and kernel constraints that back error-severity rules.

An ``error`` rule names the upstream check (or kernel constraint) that a breaking config runs into,
as an :class:`UpstreamCheck`: repository, commit, file, line, an identifier found at that line
(``anchor``) and, in our own words, what fails there. The snapshots were read with ``git show``;
no upstream code is copied. ``tests/test_rules_provenance.py`` checks every citation against the
snapshots when they are present (``fetch`` puts them under ``/work/.mirror``).

``kind``:

* ``check``: an upstream validation raises (ValueError / AssertionError / RuntimeError / TypeError);
* ``kernel``: a kernel or tensor-shape constraint fails at run time (Transformer Engine, Megatron-Core);
* ``documented``: the upstream packed-sequences guide states that its config validation rejects it,
  but no snapshot (main or any branch) carries that code yet (the global-batch packing path).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

#: Snapshot commits the citations refer to (first 12 hex digits).
BRIDGE = "067f987df03b"  # NVIDIA-NeMo/Megatron-Bridge main, 2026-08-22
BRIDGE_PR5493 = "84275f53bf4f"  # Megatron-Bridge feat/gpt-sft-in-batch-packing (PR #5493), 2026-08-17
MCORE = "d98e8a64ddf3"  # NVIDIA/Megatron-LM main (Megatron-Core), 2026-08-22
MLM_DEV = "d48bd6be0a85"  # NVIDIA/Megatron-LM dev, 2026-08-21
TE = "d0067d0da6cb"  # NVIDIA/TransformerEngine main, 2026-08-22

REPOS: dict[str, str] = {
    "Megatron-Bridge": "NVIDIA-NeMo/Megatron-Bridge",
    "Megatron-LM": "NVIDIA/Megatron-LM",
    "TransformerEngine": "NVIDIA/TransformerEngine",
}

Kind = Literal["check", "kernel", "documented"]


@dataclass(frozen=True)
class UpstreamCheck:
    """One upstream place that fails for a config breaking the rule."""

    repo: str
    commit: str
    path: str
    line: int
    anchor: str
    fails: str
    kind: Kind = "check"

    def __str__(self) -> str:
        if self.kind == "documented":
            return f"{self.repo} {self.path} (documented; {self.anchor}): {self.fails}"
        return f"{self.repo}@{self.commit} {self.path}:{self.line} ({self.anchor}): {self.fails}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


_BRIDGE_CONFIG = "src/megatron/bridge/training/config.py"


def bridge(path: str, line: int, anchor: str, fails: str, *, commit: str = BRIDGE) -> UpstreamCheck:
    """A Megatron-Bridge check (``path`` relative to ``src/megatron/bridge/`` unless absolute)."""
    full = path if path.startswith(("src/", "docs/", "scripts/")) else f"src/megatron/bridge/{path}"
    return UpstreamCheck("Megatron-Bridge", commit, full, line, anchor, fails)


def bridge_cc(line: int, anchor: str, fails: str) -> UpstreamCheck:
    """A check in Megatron-Bridge's ``ConfigContainer.validate`` (training/config.py)."""
    return UpstreamCheck("Megatron-Bridge", BRIDGE, _BRIDGE_CONFIG, line, anchor, fails)


def mcore(path: str, line: int, anchor: str, fails: str, *, kind: Kind = "check", commit: str = MCORE) -> UpstreamCheck:
    """A Megatron-Core (Megatron-LM repository) check."""
    return UpstreamCheck("Megatron-LM", commit, path, line, anchor, fails, kind)


def te_partition(fails: str) -> UpstreamCheck:
    """Transformer Engine's THD context-parallel partition: every boundary divisible by 2*CP."""
    return UpstreamCheck(
        "TransformerEngine", TE, "transformer_engine/common/fused_attn/context_parallel.cu", 103, "world_size * 2",
        fails, "kernel",
    )


def sp_scatter(fails: str) -> UpstreamCheck:
    """Megatron-Core's sequence-parallel scatter: the token dimension divisible by TP."""
    return mcore("megatron/core/tensor_parallel/mappings.py", 73, "dim_size % world_size", fails, kind="kernel")


def bridge_guide(section: str, fails: str) -> UpstreamCheck:
    """A validation the Megatron-Bridge packed-sequences guide documents (no code in any snapshot)."""
    return UpstreamCheck(
        "Megatron-Bridge", "", "docs/training/packed-sequences.md", 0, section, fails, "documented"
    )


GLOBAL_BATCH_GUIDE = "Global-Batch Online Packing, Configuration"

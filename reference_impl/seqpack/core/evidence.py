"""Where upstream fails: the checks and kernel constraints that back error-severity rules and alignment.

Pure (base layer): the rule registry (``seqpack.config.rules``) and the alignment requirements
(:mod:`seqpack.core.alignment`) cite upstream with the same :class:`UpstreamCheck`.

An ``error`` rule names the upstream check (or kernel constraint) that a breaking config runs into,
as an :class:`UpstreamCheck`: the package and release (``megatron-bridge==0.6.2``), the file as it
sits inside the installed package (``megatron/bridge/training/config.py``), a line, an identifier
found at that line (``anchor``) and, in our own words, what fails there. No upstream code is copied.

A citation of a release is *checkable*: the upstream lane installs exactly that release, and
``tests/upstream/test_provenance.py`` reads the cited line of the installed file there (the anchor
must be on it or within three lines). Behaviour that no release has yet is cited by the main commit
or pull request that has it (``ref``); the lane cannot check those, and the citation says so.

``kind``:

* ``check``: an upstream validation raises (ValueError / AssertionError / RuntimeError / TypeError),
  in ``ConfigContainer.validate`` or when a config class is built;
* ``runtime``: upstream code raises later, while building the data pipeline or in the training step;
* ``kernel``: a kernel or tensor-shape constraint fails at run time (Transformer Engine, collectives);
* ``documented``: an upstream guide or pull request states the validation, no release carries its code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from seqpack.core.versions import (BRIDGE_MAIN_COMMIT, BRIDGE_RELEASE, ENERGON_RELEASE, MCORE_MAIN_COMMIT,
                                     MCORE_RELEASE)

#: PyPI packages the lane installs, and the release of each that checkable citations name.
LANE_PACKAGES: dict[str, str] = {
    "megatron-bridge": BRIDGE_RELEASE,
    "megatron-core": MCORE_RELEASE,
    "megatron-energon": ENERGON_RELEASE,
}
#: Repositories of code cited at a commit or pull request (not installed in the lane).
REPOS: dict[str, str] = {
    "megatron-bridge": "NVIDIA-NeMo/Megatron-Bridge",
    "megatron-core": "NVIDIA/Megatron-LM",
    "transformer-engine": "NVIDIA/TransformerEngine",
}

BRIDGE_MAIN_REF = f"main {BRIDGE_MAIN_COMMIT[:7]}"  # Megatron-Bridge main, 2026-08-22
BRIDGE_PR5493 = "PR #5493 (84275f5)"  # GPT-SFT in-batch packing, merged on main after 0.6.2
BRIDGE_PR6127 = "PR #6127"  # global-batch online packing, open (2026-09-16)
MCORE_MAIN = f"main {MCORE_MAIN_COMMIT[:8]}"  # Megatron-LM main, 2026-08-22
MLM_DEV = "dev d48bd6be"  # Megatron-LM dev, 2026-08-21
TE_MAIN = "main d0067d0d"  # TransformerEngine main, 2026-08-22 (never installed: no usable CPU wheel)

Kind = Literal["check", "runtime", "kernel", "documented"]


@dataclass(frozen=True)
class UpstreamCheck:
    """One upstream place that fails for a config breaking the rule."""

    package: str
    version: str
    path: str
    line: int
    anchor: str
    fails: str
    kind: Kind = "check"
    ref: str = ""

    @property
    def checkable(self) -> bool:
        """True when the cited release is the one the upstream lane installs (its line is re-read there)."""
        return bool(self.version) and LANE_PACKAGES.get(self.package) == self.version

    def where(self) -> str:
        """``megatron-bridge==0.6.2 megatron/bridge/training/config.py:1464`` (or the commit / PR form)."""
        if self.version:
            return f"{self.package}=={self.version} {self.path}:{self.line}"
        if self.kind == "documented":
            return f"{self.package} {self.ref} {self.path}"
        return f"{self.package} {self.ref} {self.path}:{self.line}"

    def __str__(self) -> str:
        lane = "" if self.checkable else "; not checkable in the lane"
        return f"{self.where()} ({self.anchor}{lane}): {self.fails}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {**asdict(self), "checkable": self.checkable}


def bridge(path: str, line: int, anchor: str, fails: str, *, kind: Kind = "check") -> UpstreamCheck:
    """A check in the megatron-bridge release (``path`` relative to ``megatron/bridge/``)."""
    return UpstreamCheck("megatron-bridge", BRIDGE_RELEASE, f"megatron/bridge/{path}", line, anchor, fails, kind)


def bridge_cc(line: int, anchor: str, fails: str) -> UpstreamCheck:
    """A check in the megatron-bridge release's ``ConfigContainer.validate`` (training/config.py)."""
    return bridge("training/config.py", line, anchor, fails)


def bridge_main(path: str, line: int, anchor: str, fails: str, *, ref: str = BRIDGE_MAIN_REF,
                kind: Kind = "check") -> UpstreamCheck:
    """Megatron-Bridge code no release has: ``path`` relative to ``src/megatron/bridge/`` at ``ref``."""
    return UpstreamCheck("megatron-bridge", "", f"src/megatron/bridge/{path}", line, anchor, fails, kind, ref)


def mcore(path: str, line: int, anchor: str, fails: str, *, kind: Kind = "check") -> UpstreamCheck:
    """A check in the megatron-core release (``path`` inside the package, ``megatron/core/...``)."""
    return UpstreamCheck("megatron-core", MCORE_RELEASE, path, line, anchor, fails, kind)


def mcore_main(path: str, line: int, anchor: str, fails: str, *, ref: str = MCORE_MAIN,
               kind: Kind = "check") -> UpstreamCheck:
    """Megatron-LM code no megatron-core release has (repository path at ``ref``)."""
    return UpstreamCheck("megatron-core", "", path, line, anchor, fails, kind, ref)


def energon(path: str, line: int, anchor: str, fails: str, *, kind: Kind = "runtime") -> UpstreamCheck:
    """A check in the megatron-energon release megatron-bridge pins (``path`` inside the package)."""
    return UpstreamCheck("megatron-energon", ENERGON_RELEASE, f"megatron/energon/{path}", line, anchor, fails, kind)


def te_partition(fails: str) -> UpstreamCheck:
    """Transformer Engine's THD context-parallel partition: every boundary divisible by 2*CP (a CUDA kernel:
    it cannot run in the CPU lane)."""
    return UpstreamCheck("transformer-engine", "", "transformer_engine/common/fused_attn/context_parallel.cu", 103,
                         "world_size * 2", fails, "kernel", TE_MAIN)


def sp_scatter(fails: str) -> UpstreamCheck:
    """Megatron-Core's sequence-parallel scatter: the token dimension divisible by TP."""
    return mcore("megatron/core/tensor_parallel/mappings.py", 73, "dim_size % world_size", fails, kind="kernel")


def bridge_guide(section: str, fails: str) -> UpstreamCheck:
    """A validation the global-batch packing pull request documents (no release and no main commit has it)."""
    return UpstreamCheck("megatron-bridge", "", "docs/training/packed-sequences.md", 0, section, fails, "documented",
                         BRIDGE_PR6127)


GLOBAL_BATCH_GUIDE = "Global-Batch Online Packing, Configuration"

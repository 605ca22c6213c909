"""The upstream versions seqpack's claims hold for: the released pair the lane checks, and main.

Pure constants (base layer). ``upstream_lane/pins.py`` installs exactly :data:`BRIDGE_RELEASE` and
:data:`MCORE_RELEASE`; rules, model-support records, docs and eval tasks name these versions (or a
main commit / PR for what no release has yet).
"""

from __future__ import annotations

#: The newest Megatron-Bridge release the upstream lane checks (PyPI ``megatron-bridge``).
BRIDGE_RELEASE = "0.6.2"
#: The Megatron-Core release installed with it (PyPI ``megatron-core``).
MCORE_RELEASE = "0.19.2"
#: The Megatron-Bridge main commit seqpack's main-only statements were read at (2026-08-22).
BRIDGE_MAIN_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
#: The Megatron-LM (Megatron-Core) main commit read at the same date.
MCORE_MAIN_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"

BRIDGE_PACKAGE = f"megatron-bridge=={BRIDGE_RELEASE}"
MCORE_PACKAGE = f"megatron-core=={MCORE_RELEASE}"
ENERGON_RELEASE = "7.4.1"  # the megatron-energon release megatron-bridge 0.6.2 pins (~=7.0)
ENERGON_PACKAGE = f"megatron-energon=={ENERGON_RELEASE}"

# --- targets of the validator ------------------------------------------------------------------
#: ``seqpack validate --bridge-version`` values: the releases the lane checks, then ``main``.
BRIDGE_MAIN = "main"
BRIDGE_TARGETS: tuple[str, ...] = (BRIDGE_RELEASE, BRIDGE_MAIN)
#: The default target: the newest release the lane checks.
DEFAULT_BRIDGE_TARGET = BRIDGE_RELEASE
#: What each target means, in one line (docs, ``seqpack rules``, the validation report).
TARGET_MEANING: dict[str, str] = {
    BRIDGE_RELEASE: f"megatron-bridge {BRIDGE_RELEASE} with megatron-core {MCORE_RELEASE} (PyPI): checked in the "
    "upstream lane, which runs both",
    BRIDGE_MAIN: f"Megatron-Bridge main as read at {BRIDGE_MAIN_COMMIT[:7]} (2026-08-22), plus the pull requests merged "
    "after it that a rule names; with Megatron-LM main at "
    f"{MCORE_MAIN_COMMIT[:8]}: read, not checkable in the lane",
}

#: Upstream pull requests seqpack's version-dependent statements name (repository, number, state, what it does).
BRIDGE_PRS: dict[int, tuple[str, str]] = {
    5131: ("merged 2026-08-05 on main", "MegatronMIMO packs in-batch at step time (megatron_mimo_step)"),
    5213: ("merged 2026-07-31 on main", "the packed collate keeps the loss where the input is EOS"),
    5470: ("merged 2026-08-12 on main", "padding_mask from the offline packed collate"),
    5493: ("merged after 0.6.2 on main", "GPT-SFT in-batch packing (GPTSFTDatasetConfig.enable_in_batch_packing)"),
    5541: ("merged 2026-08-17 on main", "chat loss masks of GLM-5.2, Kimi-K3 and MiniMax-M3 templates; None content"),
    5612: ("merged 2026-08-17 on main", "Gemma 4 chat loss mask after inline tool responses"),
    5625: ("merged 2026-08-17 on main", "legacy prompt template with a repeated truncation field"),
    5633: ("merged 2026-08-19 on main", "GLM historical answers supervised in chat loss masks"),
    5737: ("merged 2026-08-22 on main", "prompt/completion preprocessing refuses a non-empty completion left without "
           "a supervised token"),
    5931: ("in 0.6.2 (backport of #5915)", "HybridEP uneven-input padding on for packed eager configs, in config "
           "validation"),
    6113: ("open (2026-09-15)", "Nemotron Omni passes padding_mask to its language model (MoE router statistics)"),
    5610: ("merged after 0.6.2 on main", "pad_between_seqs batch key; supervised terminal EOS counts in the packed "
           "collate's logical length"),
    5744: ("merged 2026-08-23 on main", "padding_mask for GPT-SFT in-batch packing"),
    5990: ("merged 2026-09-07 on main", "Energon native packing accepts MTP"),
    6127: ("open (2026-09-16)", "global-batch online packing (dataset.enable_global_batch_packing)"),
}


def bridge_pr(number: int) -> str:
    """``Megatron-Bridge PR #N`` for messages."""
    return f"Megatron-Bridge PR #{number}"


def check_target(target: str) -> str:
    """``target`` if it is a known ``--bridge-version`` value; else ValueError naming the choices."""
    if target not in BRIDGE_TARGETS:
        raise ValueError(f"unknown Megatron-Bridge version {target!r}; choose one of {', '.join(BRIDGE_TARGETS)}")
    return target


def resolve_target(target: str | None) -> str:
    """``target`` checked (None: :data:`DEFAULT_BRIDGE_TARGET`); a UsageError naming the choices otherwise."""
    from seqpack.core.errors import UsageError

    try:
        return check_target(DEFAULT_BRIDGE_TARGET if target is None else target)
    except ValueError as err:
        raise UsageError(str(err), field="bridge_version") from None

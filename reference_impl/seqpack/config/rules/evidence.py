"""The rules' citations of upstream: :mod:`seqpack.core.evidence` (one definition, shared with the alignment
requirements), under the name the rule modules import."""

from seqpack.core.evidence import (  # noqa: F401
    BRIDGE_MAIN_REF,
    BRIDGE_PR5493,
    BRIDGE_PR6127,
    GLOBAL_BATCH_GUIDE,
    LANE_PACKAGES,
    MCORE_MAIN,
    MLM_DEV,
    REPOS,
    TE_MAIN,
    Kind,
    UpstreamCheck,
    bridge,
    bridge_cc,
    bridge_guide,
    bridge_main,
    energon,
    mcore,
    mcore_main,
    sp_scatter,
    te_partition,
)

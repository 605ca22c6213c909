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

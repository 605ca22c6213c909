"""What the upstream lane installs: the released Megatron-Bridge and Megatron-Core, pinned.

The lane is seqpack's oracle (``scripts/setup_upstream.sh`` builds it): the releases users install from PyPI,
run on CPU in a second virtual environment on Python 3.12. These pins are the one place that names
them; every "checked in the lane" claim in the docs, rules and evals refers to these versions.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from seqpack.core.versions import BRIDGE_RELEASE as BRIDGE_VERSION  # Python 3.12 only
from seqpack.core.versions import MCORE_RELEASE as MCORE_VERSION  # the cp312 wheel

TORCH_VERSION = "2.13.0"
ENERGON_VERSION = "7.4.1"
TRANSFORMERS_VERSION = "5.12.1"
#: The interpreter series the lane needs (megatron-bridge 0.6.2 requires Python >= 3.12).
PYTHON_SERIES = (3, 12)

#: Installed in this order, one ``pip install`` each. Megatron-Bridge comes without its declared
#: dependencies (flashinfer, transformer-engine, wandb, mlflow, ...: GPU or training services the lane
#: never reaches); the packages after it are the ones its data, config and recipe modules import.
#: Transformer Engine is never installed: its PyPI wheels hold only the core library, and with it
#: present megatron-core fails to import (see ``te_shim.py``).
STEPS: tuple[tuple[tuple[str, ...], bool], ...] = (
    ((f"torch=={TORCH_VERSION}",), False),
    ((f"megatron-core=={MCORE_VERSION}",), False),
    ((f"megatron-bridge=={BRIDGE_VERSION}",), True),  # --no-deps
    ((f"transformers=={TRANSFORMERS_VERSION}", "datasets", "omegaconf", "pyarrow", "einops", "tqdm", "pyyaml",
      "rich", f"megatron-energon=={ENERGON_VERSION}", "multi-storage-client~=0.50"), False),
    (("tensorboard", "diffusers", "nvidia-modelopt"), False),  # imported by megatron.bridge.recipes
)

HERE = Path(__file__).resolve().parent
#: Versions of everything else, as resolved when the lane was first built (pip ``-c``).
CONSTRAINTS = HERE / "constraints.txt"
SHIM = HERE / "te_shim.py"


def fingerprint() -> str:
    """sha256 over the pins, the constraints and the shim: a lane built from other inputs is rebuilt."""
    digest = hashlib.sha256(repr(STEPS).encode())
    for path in (CONSTRAINTS, SHIM):
        digest.update(path.read_bytes())
    return digest.hexdigest()

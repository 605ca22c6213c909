"""Where seqpack and the released upstream differ on purpose, per upstream function.

The differential tests (``tests/upstream/test_diff_*.py``) compare seqpack with the upstream
function running in the lane, case by case. A case either comes out equal, or differs in a way
listed here (the test names the entry), or fails. ``docs/compatibility.md`` shows the table of
cases per function, generated from a lane run (``tests/upstream/compat.py``) and these entries.
Pure data: no upstream code, no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from reference_impl.upstream_lane.pins import BRIDGE_VERSION, MCORE_VERSION

BRIDGE = f"megatron-bridge {BRIDGE_VERSION}"
MCORE = f"megatron-core {MCORE_VERSION}"

#: Upstream functions the lane compares against: key -> (qualified name, package it ships in).
FUNCTIONS: dict[str, tuple[str, str]] = {}


def function(key: str, qualname: str, package: str = BRIDGE) -> str:
    """Register an upstream function compared in the lane; returns ``key``."""
    FUNCTIONS[key] = (qualname, package)
    return key


@dataclass(frozen=True)
class Difference:
    """One documented, deliberate difference between seqpack and an upstream function."""

    id: str
    function: str
    summary: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


DIFFERENCES: dict[str, Difference] = {}


def difference(id: str, function_key: str, summary: str, reason: str) -> Difference:
    """Register a documented difference (ids are unique; the function must be registered)."""
    if id in DIFFERENCES:
        raise ValueError(f"duplicate difference id {id}")
    if function_key not in FUNCTIONS:
        raise ValueError(f"difference {id}: unknown upstream function {function_key}")
    DIFFERENCES[id] = Difference(id, function_key, summary, reason)
    return DIFFERENCES[id]


# --- offline preparation (prepare_gpt_sft_packed_data) ---------------------------------------------

# --- packed readers (GPTSFTPackedParquetDataset, collate_fn) ----------------------------------------

# --- in-batch packing (THD builders, prompt/completion collator) -----------------------------------

# --- PackedSeqParams and context-parallel partition ------------------------------------------------

# --- schedulers (BalancedCPScheduler) ---------------------------------------------------------------

# --- configuration validation (ConfigContainer.validate, runtime_config_update, recipes) -----------
# Bridge's own config dump and its recipe functions (tests/upstream/test_config_dump.py, test_recipes.py): a case
# is equal when Bridge's runtime_config_update raises exactly when seqpack validate, reading the dump Bridge wrote
# (ConfigContainer.to_yaml, the run_config.yaml form), reports an error.
function("config_dump.to_yaml", "megatron.bridge.training.config.ConfigContainer.to_yaml + runtime_config_update")
function("recipes.runtime_config_update", "megatron.bridge.recipes.*_config + training.config.runtime_config_update")
difference(
    "recipes-later-upstream-failure", "recipes.runtime_config_update",
    "seqpack rejects a packing recipe that runtime_config_update accepts",
    "the failure comes later, outside the config update: nemotron_3_super_sft_16gpu_h100_bf16_32k_config packs "
    "offline into 2048-token bins while tokenizing up to seq_length 32768, so Bridge's offline fill step "
    "(data/packing/algorithms.py fill_packing_strategy) raises on any sample longer than the pack "
    "(reproduced in the lane: tests/upstream/test_recipes.py), and with CP2 and pad_seq_to_mult=1 the packed "
    "segments break Transformer Engine's THD partition rule (a CUDA kernel; seqpack's reference partition shows it)",
)
difference(
    "recipes-bridge-rejects-outside-packing", "recipes.runtime_config_update",
    "runtime_config_update rejects a packing recipe for a setting seqpack does not check",
    "the rejected setting is not a packing one: megatron-bridge 0.6.2's DeepSeek-V4 packed SFT recipe lists "
    "'mhc' in recompute_modules, which megatron-core 0.19.2's TransformerConfig does not accept; seqpack "
    "validates packing, so it reports nothing there (the test lists each such recipe with Bridge's message)",
)

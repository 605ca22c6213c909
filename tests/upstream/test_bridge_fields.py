"""The committed field list of Megatron-Bridge's config dataclasses (reference_impl/seqpack/config/
bridge_fields_062.json, what ``seqpack validate`` accepts) is what the release in the lane has."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_committed_bridge_field_list_is_the_lanes(upstream) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import regen_bridge_fields as regen
    finally:
        sys.path.pop(0)
    fresh = regen.bridge_fields(upstream)
    committed = json.loads(regen.TARGET.read_text(encoding="utf-8"))
    assert fresh["versions"] == committed["versions"] == {"megatron-bridge": "0.6.2", "megatron-core": "0.19.2"}
    drift = {path: sorted(set(fresh["sections"].get(path, [])) ^ set(committed["sections"].get(path, [])))
             for path in set(fresh["sections"]) | set(committed["sections"])}
    assert not {p: d for p, d in drift.items() if d}, "run scripts/regen_bridge_fields.py"
    assert regen.render(fresh) == regen.TARGET.read_text(encoding="utf-8")
    # the walk reaches what a recipe sets: the dataset's packing fields and the training loop's
    assert {"dataset_root", "enable_offline_packing"} <= set(fresh["sections"]["dataset"])
    assert "train_iters" in fresh["sections"]["train"] and "lr" in fresh["sections"]["optimizer"]

"""``validate_config(recipe())``: a live megatron-bridge 0.6.2 ``ConfigContainer`` validates like its YAML dump.

Every 0.6.2 recipe function that turns packing on (``tests/upstream/recipes/index.json``) is built in a
subprocess of the lane's interpreter (``live_recipes.py``) and handed, as the object, to seqpack's
``validate_config`` (:mod:`seqpack.config.bridge_live`, no megatron import); the seqpack config it reads and
the findings must equal those of the committed ``ConfigContainer.to_yaml`` dump of the same recipe with the
same world size. Negative control: an offline recipe with ``train.micro_batch_size = 2`` set on the live
object fails ``PACK-OFFLINE-MBS1`` in seqpack and makes Bridge's own ``runtime_config_update`` raise.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from seqpack.config.validate import validate_config
from seqpack_lane.client import OPS, lane_environment

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INDEX = json.loads((HERE / "recipes" / "index.json").read_text(encoding="utf-8"))


def _packing_recipes() -> list[dict]:
    return [e for e in INDEX["recipes"] if e.get("path") not in (None, "none")]


@pytest.fixture(scope="module")
def live(upstream, tmp_path_factory) -> dict:
    entries = _packing_recipes()
    offline = next(e for e in entries if e["path"] == "offline" and not e["bridge"]["raises"])
    work = tmp_path_factory.mktemp("live-recipes")
    out = work / "answers.json"
    env = lane_environment(work)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "reference_impl"), str(OPS)])
    args = [str(upstream.status.python), str(HERE / "live_recipes.py"), str(out),
            *(f"{e['function']}={e['world_size']}" for e in entries), "--mutate", offline["function"]]
    done = subprocess.run(args, env=env, cwd=work, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(out.read_text(encoding="utf-8"))
    answers["offline"] = offline
    return answers


def test_every_packing_recipe_validates_live_as_its_dump(live):
    entries = _packing_recipes()
    assert len(entries) >= 130 and len(live["recipes"]) == len(entries)
    for e in entries:
        ours = live["recipes"][e["function"]]
        dump = validate_config(HERE / "recipes" / e["file"], [("dist.world_size", e["world_size"])])
        assert ours["config"] == dump.config, e["recipe"]
        assert ours["rule_ids"] == sorted(f.rule_id for f in dump.violations + dump.warnings), e["recipe"]
        assert ours["ok"] == dump.ok, e["recipe"]
    assert live["megatron_imported_by_seqpack"] == []


def test_a_mutated_live_recipe_fails_on_both_sides(live):
    mutated = live["mutated"]
    assert mutated["recipe"] == live["offline"]["function"]
    assert "PACK-OFFLINE-MBS1" in mutated["seqpack"]["rule_ids"] and not mutated["seqpack"]["ok"]
    assert mutated["bridge"]["raises"], mutated["bridge"]
    assert "micro" in mutated["bridge"]["message"].lower(), mutated["bridge"]

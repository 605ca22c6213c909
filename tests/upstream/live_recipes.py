"""Run in the upstream lane's interpreter (never by pytest itself): build megatron-bridge 0.6.2's packing recipe
functions and hand each *live* ``ConfigContainer`` to seqpack's ``validate_config``.

``tests/upstream/test_live_config.py`` starts this script in a subprocess of the lane's Python with seqpack's
package and the lane's ops folder on ``PYTHONPATH`` (the lane's worker itself never imports seqpack). Usage::

    python live_recipes.py OUT.json RECIPE_FUNCTION=WORLD_SIZE [...]

For every recipe: the report of ``validate_config(cfg, [("dist.world_size", N)])`` on the live object (ok,
rule ids, the seqpack config it read). Negative control (``--mutate NAME``): that recipe with
``train.micro_batch_size = 2`` set on the live object, validated by seqpack and then by Bridge's own
``runtime_config_update`` (whether it raises, and how).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)


def _report(cfg, world: int) -> dict:
    from seqpack.config.validate import validate_config

    rep = validate_config(cfg, [("dist.world_size", world)])
    return {"ok": rep.ok, "rule_ids": sorted(f.rule_id for f in rep.violations + rep.warnings),
            "config": rep.config}


def _build(functions: dict, qualname: str):
    import recipes as lane_recipes

    notes: list[str] = []
    cwd = os.getcwd()
    with lane_recipes._stand_in_gpu(qualname, notes):
        os.chdir(tempfile.mkdtemp(prefix="live-recipe-", dir=cwd))  # inside the test's work folder
        try:
            return functions[qualname]()
        finally:
            os.chdir(cwd)


def _bridge_update(cfg, qualname: str, world: int) -> dict:
    import recipes as lane_recipes
    from megatron.bridge.training.config import runtime_config_update

    environ = dict(os.environ)
    os.environ["WORLD_SIZE"] = str(world)
    lane_recipes._transformer_engine_off(cfg)
    try:
        with lane_recipes._stand_in_gpu(qualname, []):
            runtime_config_update(cfg)
        return {"raises": False}
    except Exception as exc:  # noqa: BLE001 - Bridge's verdict is the answer
        return {"raises": True, "type": type(exc).__name__, "message": str(exc)[:500]}
    finally:
        os.environ.clear()
        os.environ.update(environ)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    mutate = None
    items = []
    rest = argv[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--mutate":
            mutate = rest.pop(0)
            continue
        name, _, world = arg.partition("=")
        items.append((name, int(world)))
    import _standins
    import recipes as lane_recipes

    functions = lane_recipes._recipe_functions()
    _standins.write_cache(lane_recipes._pinned_revisions())
    os.environ.setdefault("MEGATRON_CONFIG_LOCK_DIR", str(Path(os.environ["HF_HOME"]) / "locks"))
    answers: dict = {"recipes": {}, "mutated": None, "megatron_imported_by_seqpack": None}
    before = set(sys.modules)
    for qualname, world in items:
        cfg = _build(functions, qualname)
        answers["recipes"][qualname] = _report(cfg, world)
    if mutate is not None:
        world = dict(items)[mutate]
        cfg = _build(functions, mutate)
        cfg.train.micro_batch_size = 2
        answers["mutated"] = {"recipe": mutate, "seqpack": _report(cfg, world),
                              "bridge": _bridge_update(cfg, mutate, world)}
    # seqpack read live objects without importing anything of megatron itself (the recipes already had)
    answers["megatron_imported_by_seqpack"] = sorted(m for m in set(sys.modules) - before
                                                     if m.startswith("seqpack") and "megatron" in m)
    out.write_text(json.dumps(answers), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Record megatron-bridge 0.6.2's own verdict on the configs of the diagnosis tasks (``evals/bridge_verdicts.json``).

A non-explicit task whose config is for the release is graded on what upstream does (does 0.6.2's
``runtime_config_update`` start it?) instead of seqpack's rule ids and severity labels. The build cannot run
upstream code, so the verdicts are recorded here, through the upstream lane (``validate.run`` on the
``ConfigContainer`` :func:`~seqpack_lane.bridge_config.bridge_spec` builds), and
``tests/test_evals_verdicts.py`` re-runs them in the lane and compares::

    python -m seqpack_evals.verdicts        # writes evals/bridge_verdicts.json, then: seqpack eval build
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Mapping

from seqpack_evals.builder import VERDICTS_FILE


def bridge_verdicts(configs: Mapping[str, dict[str, Any]], lane: Any) -> dict[str, dict[str, Any]]:
    """megatron-bridge 0.6.2's verdict on each config (task id -> config dict), in one lane call."""
    from seqpack.config.load import load_config
    from seqpack_lane.bridge_config import bridge_spec

    ids = sorted(configs)
    cases = [{"id": i, "spec": bridge_spec(load_config(configs[i]), str(lane.path(f"verdict-{i}"))).spec} for i in ids]
    answers = lane.call("validate.run", cases=cases)
    return {i: {"config": configs[i], "raises": bool(a["raises"]), "type": a.get("type", ""),
                "message": " ".join(str(a.get("message", "")).split())[:160]} for i, a in zip(ids, answers)}


def collect_configs() -> dict[str, dict[str, Any]]:
    """The configs of every task that needs a verdict (a build in a scratch folder that records them)."""
    from seqpack_evals import dataset
    from seqpack_evals.builder import GenContext

    collected: dict[str, dict[str, Any]] = {}
    original = GenContext.__init__

    def init(self, *args, **kwargs):  # every context of this build collects instead of grading
        original(self, *args, **kwargs)
        self.collect = collected

    GenContext.__init__ = init
    try:
        with tempfile.TemporaryDirectory(prefix="seqpack-verdicts-") as tmp:
            dataset.build_dataset(Path(tmp) / "evals")
    finally:
        GenContext.__init__ = original
    return collected


def main() -> int:
    """Write ``evals/bridge_verdicts.json`` (needs the upstream lane)."""
    from seqpack_evals.tasks import default_evals_dir
    from seqpack_lane.client import UpstreamLane
    from seqpack.core.versions import BRIDGE_PACKAGE, MCORE_PACKAGE

    configs = collect_configs()
    with UpstreamLane() as lane:
        verdicts = bridge_verdicts(configs, lane)
    doc = {"about": f"{BRIDGE_PACKAGE} / {MCORE_PACKAGE}: runtime_config_update on each diagnosis task's config "
                    "(python -m seqpack_evals.verdicts; checked by tests/test_evals_verdicts.py)",
           "verdicts": verdicts}
    target = default_evals_dir() / VERDICTS_FILE
    target.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(verdicts)} verdicts to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

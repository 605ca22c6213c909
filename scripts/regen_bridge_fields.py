"""Regenerate reference_impl/seqpack/config/bridge_fields_062.json from Megatron-Bridge run in the upstream lane.

    .venv/bin/python scripts/regen_bridge_fields.py [--check]

The lane op ``config_fields.bridge`` walks ``ConfigContainer``'s dataclasses (and every subclass Bridge's
packages define) and answers every field name by section; this writes that answer, with the versions, as
the product's data file (``--check``: exit 1 when the committed file differs). Needs the lane
(scripts/setup_upstream.sh); tests/upstream/test_bridge_fields.py makes the same comparison.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "reference_impl" / "seqpack" / "config" / "bridge_fields_062.json"


def bridge_fields(lane) -> dict:
    """The data file's content from the lane's answer."""
    answer = lane.call("config_fields.bridge", timeout=900)
    return {
        "made_by": "lane op config_fields.bridge (scripts/regen_bridge_fields.py): dataclasses.fields of every "
                   "dataclass reachable from ConfigContainer's annotations, and of their subclasses in Bridge's packages",
        "versions": answer["versions"],
        "sections": answer["sections"],
    }


def render(data: dict) -> str:
    """The file's text (stable: sorted keys, one name a line)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    from seqpack_lane.client import UpstreamLane

    argv = sys.argv[1:] if argv is None else argv
    lane = UpstreamLane()
    try:
        text = render(bridge_fields(lane))
    finally:
        lane.close()
    if "--check" in argv:
        same = TARGET.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{TARGET} differs from the lane")
        return 0 if same else 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

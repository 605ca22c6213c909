"""Megatron-Bridge's recipe functions (megatron-bridge 0.6.2), run in the upstream lane, as committed test data.

    python scripts/regen_recipes.py            # rewrite tests/upstream/recipes/ from the lane
    python scripts/regen_recipes.py --check    # exit 1 if the committed files differ from what the lane writes now

The lane (``lanes/upstream/seqpack_lane/ops/recipes.py``) calls every public recipe function of
the installed wheel offline (hub ids resolve to a stand-in ``config.json``), writes Bridge's own
config dump of each (``ConfigContainer.to_yaml``, the ``run_config.yaml`` form) and runs
``runtime_config_update`` on it. Every recipe that turns packing on (offline, in-batch, Energon
``packing_buffer_size``) is committed as that dump, headed with the recipe's name, function,
source line and the package version; ``index.json`` lists every recipe found with Bridge's verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from seqpack.core.versions import BRIDGE_PACKAGE, MCORE_PACKAGE

HERE = Path(__file__).resolve().parent
OUT = HERE / "recipes"
INDEX = "index.json"


def packing_path(packing: dict[str, Any] | None) -> str:
    """The packing path Bridge's built dataset turns on: offline, in_batch, in_batch_deferred, energon or none."""
    if not packing:
        return "none"
    if packing.get("offline"):
        return "offline"
    if packing.get("in_batch"):
        return "in_batch_deferred" if packing.get("deferred") else "in_batch"
    if packing.get("energon_packing_buffer_size") is not None:
        return "energon"
    return "none"


def run(lane: Any) -> dict[str, Any]:
    """Run every recipe in the lane; returns the op's answer, with each recipe's source and dump text."""
    sources = {e["recipe"]: e["source"] for e in lane.call("recipes.list", timeout=1800)}
    dumps = lane.path("recipes")
    answer = lane.call("recipes.run", out_dir=str(dumps), timeout=3600)
    for entry in answer["recipes"]:
        entry["source"] = sources[entry["recipe"]]
        if entry.get("dump"):
            entry["dump_text"] = (dumps / entry["dump"]).read_text(encoding="utf-8")
    return answer


def header(entry: dict[str, Any]) -> str:
    """The comment lines heading a committed dump."""
    lines = [
        f"# Megatron-Bridge recipe {entry['name']} ({BRIDGE_PACKAGE})",
        f"# function: {entry['recipe']} ({entry['source']})",
        "# Bridge's own config dump (ConfigContainer.to_yaml), written in the upstream lane by",
        "# scripts/regen_recipes.py: do not edit by hand. Model dimensions come from a stand-in config.json",
        "# (lanes/upstream/seqpack_lane/ops/_standins.py); packing settings are the recipe's own.",
    ]
    return "\n".join(lines) + "\n"


def _verdict(entry: dict[str, Any]) -> dict[str, Any]:
    if not entry.get("built"):
        return {"built": False, "error": entry.get("build_error", "")}
    if not entry.get("raises"):
        return {"raises": False}
    first = (entry.get("message") or "").strip().splitlines()
    return {"raises": True, "type": entry.get("type"), "message": first[0][:300] if first else ""}


def render(answer: dict[str, Any]) -> dict[str, str]:
    """File name -> text of every committed file (the packing recipes' dumps and index.json)."""
    files: dict[str, str] = {}
    index = []
    for entry in answer["recipes"]:
        path = packing_path(entry.get("packing"))
        row: dict[str, Any] = {"recipe": entry["name"], "function": entry["recipe"], "source": entry["source"],
                               "path": path, "bridge": _verdict(entry)}
        if entry.get("built"):
            row["world_size"] = entry["world_size"]
            row["adjusted"] = [a for a in entry["adjusted"] if not a.startswith("WORLD_SIZE=")]
        if path != "none" and entry.get("dump_text"):
            row["file"] = f"{entry['name']}.yaml"
            files[row["file"]] = header(entry) + entry["dump_text"]
        index.append(row)
    summary = {
        "package": BRIDGE_PACKAGE,
        "megatron_core": MCORE_PACKAGE,
        "recipes_found": len(index),
        "built": sum(1 for r in index if r["bridge"].get("built", True)),
        "packing": sum(1 for r in index if r["path"] != "none"),
        "committed": len(files),
        "standin_problems": answer.get("standin_problems", {}),
        "recipes": index,
    }
    files[INDEX] = json.dumps(summary, indent=1, sort_keys=False) + "\n"
    return files


def write(files: dict[str, str], out: Path = OUT, check: bool = False) -> list[str]:
    """Write (or, with ``check``, only compare) the files; returns the names that differ or are extra."""
    stale = []
    existing = {p.name for p in out.glob("*")} if out.is_dir() else set()
    for name, text in files.items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
            if not check:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    for name in sorted(existing - set(files)):
        stale.append(name)
        if not check:
            (out / name).unlink()
    return stale


def main(argv: list[str] | None = None) -> int:
    """Regenerate (or check) tests/upstream/recipes from the lane."""
    from seqpack_lane.build import LaneError
    from seqpack_lane.client import UpstreamLane

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files are stale")
    args = parser.parse_args(argv)
    try:
        with UpstreamLane() as lane:
            files = render(run(lane))
    except LaneError as exc:
        print(f"upstream lane: {exc}", file=sys.stderr)
        return 2
    stale = write(files, check=args.check)
    for name in stale:
        print(("stale: " if args.check else "wrote: ") + name, file=sys.stderr)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())

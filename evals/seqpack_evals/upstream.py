"""Ground truth that does not come from seqpack: facts read from Megatron-Bridge's source and the seed documents.

Each :class:`Anchor` (an entry of ``evals/data/upstream_anchors.yaml``) records where a fact lives, a regular expression that finds it there, and the value that
expression yields. Most anchors hold in the release users install, megatron-bridge 0.6.2: their ``path`` is the
file inside the installed package and ``line`` its line there, and ``tests/test_evals_upstream.py`` re-derives
each one from the installed file in the upstream lane (op ``grading.source_files``), with a negative control (the
pattern fails on the text with the value changed). Anchors marked ``release=False`` were read on Bridge main at
:data:`~seqpack.core.versions.BRIDGE_MAIN_COMMIT` and are absent from 0.6.2; the lane checks that they are
absent there (so the tasks built on them must say they rest on main), which is all the lane can check of them.
Seed anchors record the seed document's id and the value read from it; no test reads the seeds.

The dataset templates (``templates_upstream``) build tasks from the recorded values, so a build needs no
network and no upstream install. The patterns quote a few words of the upstream text to find the spot; no
upstream code is copied into this repository.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from seqpack.core.errors import UsageError
from seqpack.core.versions import BRIDGE_MAIN_COMMIT, BRIDGE_PACKAGE, MCORE_PACKAGE
from seqpack_evals import tables

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
BRIDGE_COMMIT = BRIDGE_MAIN_COMMIT
CONVERTERS = ("str", "int", "bool", "list", "present")


@dataclass(frozen=True)
class Anchor:
    """A fact at a place: derive it with ``pattern`` (first group, converted) from ``path``.

    ``path`` is relative to site-packages (``megatron/bridge/...``); ``line`` is the line in megatron-bridge 0.6.2
    (``release``) or, for a main-only anchor, at the main commit (whose file lives under ``src/`` there).
    """

    id: str
    kind: str  # "upstream" or "seed"
    path: str
    pattern: str
    value: Any
    convert: str = "str"
    line: int | None = None
    release: bool = True
    note: str = ""

    def source(self) -> dict[str, Any]:
        """The ``source`` record of a task built on this anchor (it names the version the fact holds for)."""
        if self.kind == "seed":
            return {"kind": "seed", "seed": self.path, "anchor": self.id,
                    "rests_on": "a seed document (recorded value; not re-read by any test)"}
        if self.release:
            return {"kind": "upstream", "package": BRIDGE_PACKAGE, "megatron_core": MCORE_PACKAGE, "path": self.path,
                    "line": self.line, "anchor": self.id,
                    "checked_in_lane": "re-derived from the installed file (tests/test_evals_upstream.py)"}
        return {"kind": "upstream", "repo": BRIDGE, "commit": BRIDGE_COMMIT, "path": "src/" + self.path,
                "line": self.line, "anchor": self.id,
                "rests_on": f"Megatron-Bridge main {BRIDGE_COMMIT[:7]}; absent from {BRIDGE_PACKAGE} (checked in the lane)"}


def derive(anchor: Anchor, text: str) -> Any:
    """The value ``anchor.pattern`` yields in ``text`` (None when it does not match)."""
    m = re.search(anchor.pattern, text, re.S | re.M)
    if m is None:
        return None
    if anchor.convert == "present":
        return True
    raw = m.group(1)
    if anchor.convert == "int":
        return int(raw.replace(",", ""))
    if anchor.convert == "bool":
        return raw == "True"
    if anchor.convert == "list":
        return sorted(str(x) for x in ast.literal_eval("[" + raw.strip("[]{}") + "]"))
    return raw


def line_of(anchor: Anchor, text: str) -> int | None:
    """1-based line where the pattern's match starts."""
    m = re.search(anchor.pattern, text, re.S | re.M)
    return None if m is None else text.count("\n", 0, m.start()) + 1


_VALUE_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "list": (list,),
                                              "present": (bool,)}


def _anchor(data: Any, where: str) -> Anchor:
    """One entry of ``upstream_anchors.yaml`` as an :class:`Anchor`, checked."""
    d = tables.entry(data, where, ("id", "kind", "path", "pattern", "value", "note"), ("line", "release", "convert"))
    where = f"upstream_anchors.yaml: {d['id']}"
    convert = d.get("convert", "str")
    if d["kind"] not in ("upstream", "seed") or convert not in CONVERTERS:
        raise UsageError(f"{where}: kind must be upstream or seed and convert one of {', '.join(CONVERTERS)}")
    value = d["value"]
    if not isinstance(value, _VALUE_TYPES[convert]) or (convert == "int" and isinstance(value, bool)):
        raise UsageError(f"{where}: value {value!r} is not what convert {convert} yields")
    tables.patterns([d["pattern"]], where)
    return Anchor(d["id"], d["kind"], d["path"], d["pattern"], value, convert, d.get("line"), d.get("release", True),
                  d["note"])


ANCHORS: tuple[Anchor, ...] = tuple(_anchor(a, f"upstream_anchors.yaml: anchors[{i}]")
                                    for i, a in enumerate(tables.table("upstream_anchors", "anchors", list)))
ANCHORS_BY_ID: dict[str, Anchor] = {a.id: a for a in ANCHORS}


def anchor(anchor_id: str) -> Anchor:
    """The anchor with this id (KeyError names the unknown id)."""
    return ANCHORS_BY_ID[anchor_id]


__all__ = ["ANCHORS", "ANCHORS_BY_ID", "Anchor", "BRIDGE", "BRIDGE_COMMIT", "anchor", "derive", "line_of"]

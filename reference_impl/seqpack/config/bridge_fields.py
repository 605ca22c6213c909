"""Megatron-Bridge 0.6.2's config field names, by section: what a real Bridge config may hold.

``bridge_fields_062.json`` (next to this module) is generated from the release running in the upstream
lane (``scripts/regen_bridge_fields.py``, lane op ``config_fields.bridge``; ``tests/upstream/test_bridge_fields.py``
fails when it drifts): every field of ``ConfigContainer``'s dataclasses and of their subclasses in Bridge's
packages, merged per dotted section (``""`` is ``ConfigContainer`` itself, then ``model``, ``dataset``,
``dataset.offline_packing_specs``, ``train``, ``optimizer``, ...). The config loader accepts these keys
and ignores those no rule reads; a key Bridge does not know either is an error, with a suggestion drawn
from both seqpack's and Bridge's names.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

__all__ = ["HYDRA_KEYS", "bridge_section", "bridge_sections", "bridge_version_of_fields"]

DATA = Path(__file__).with_name("bridge_fields_062.json")
#: Instantiation keys of Bridge's YAML (OmegaConf/Hydra); never fields, accepted in any section.
HYDRA_KEYS = frozenset({"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def bridge_sections() -> dict[str, frozenset[str]]:
    """Dotted section -> the field names Bridge's dataclasses give it (``""``: the top level)."""
    return {path: frozenset(names) for path, names in _data()["sections"].items()}


def bridge_section(path: str) -> frozenset[str] | None:
    """The field names of section ``path`` (dotted; ``""`` the top level), None when Bridge has no such section."""
    return bridge_sections().get(path)


def bridge_version_of_fields() -> str:
    """The Megatron-Bridge release the field list comes from."""
    return str(_data()["versions"]["megatron-bridge"])

"""Forbidden claims: dangerous advice a packing answer must not give, each with an example that trips it.

A claim is a :class:`~seqpack_evals.tasks.Forbidden`: a check pattern, what it means, and an example
sentence. The patterns, meanings and examples are data (``evals/data/claims.yaml``); this module fills
in the values the templates pass, which come from the rule registry or the task's computed truth. The
checks look for *advice* (``set X to V``, ``turn on Y``, ``keep these packs``), so quoting a config
back or warning against the mistake ("never set micro_batch_size above 1") does not count;
:func:`~seqpack_evals.answers.forbidden_hits` also ignores matches in negated clauses.

:func:`path_claims` gives the claims every task on a packing path carries; templates add
task-specific ones (a topology the packs do not fit, a wrong alignment).
"""

from __future__ import annotations

from typing import Any, Iterable

from seqpack.core.errors import UsageError
from seqpack_evals import tables
from seqpack_evals.tasks import Forbidden

_FILE = "claims"


def claim(name: str, **params: Any) -> Forbidden:
    """Claim ``name`` of ``claims.yaml`` with its ``{placeholders}`` filled from the fragments and ``params``."""
    defs = tables.table(_FILE, "claims")
    if name not in defs:
        raise UsageError(f"claims.yaml: no claim {name!r}")
    where = f"claims.yaml: {name}"
    d = tables.entry(defs[name], where, ("check", "claim", "example"))
    values = {**tables.table(_FILE, "fragments"), **params}
    return Forbidden(*(tables.fill(d[k], f"{where}: {k}", values) for k in ("check", "claim", "example")))


def listed(items: Any, where: str) -> list[Forbidden]:
    """Claims written in a table as a list of ``{claim: NAME, PARAM: value, ...}``."""
    if not isinstance(items, list):
        raise UsageError(f"{where} must be a list of {{claim: NAME, ...params}}")
    out = []
    for item in items:
        d = tables.entry(item, where, ("claim",), ("path_words", "value", "cp"))
        out.append(claim(d["claim"], **{k: v for k, v in d.items() if k != "claim"}))
    return out


def mbs_above_one(path_words: str) -> Forbidden:
    """Advice to use a micro-batch size above 1 on a path that needs exactly 1."""
    return claim("mbs_above_one", path_words=path_words)


def mbs_one_in_batch() -> Forbidden:
    """Advice to keep micro-batch size 1 with in-batch packing (nothing would be packed)."""
    return claim("mbs_one_in_batch")


def offline_plus_in_batch() -> Forbidden:
    """Advice to turn on in-batch packing next to offline packs (the paths are exclusive)."""
    return claim("offline_plus_in_batch")


def cp_loss_settings() -> Forbidden:
    """Advice that breaks CP fine-tuning loss: per-token loss off, or averaging in the collective on."""
    return claim("cp_loss_settings")


def pad_mult(value: int) -> Forbidden:
    """Advice to use a wrong ``pad_seq_to_mult`` (a value the topology does not allow)."""
    return claim("pad_mult", value=value)


def reuse_packs() -> Forbidden:
    """Advice to keep packs after changing the topology (they must be rebuilt)."""
    return claim("reuse_packs")


def usable_with_cp(cp: int) -> Forbidden:
    """Claim that packs work with a CP size they are not aligned for."""
    return claim("usable_with_cp", cp=cp)


def dataloader_batch() -> Forbidden:
    """Advice to use the ``batch`` dataloader with in-batch or global-batch packing."""
    return claim("dataloader_batch")


def pipeline_ok(path_words: str) -> Forbidden:
    """Claim that pipeline parallelism is fine on a path that refuses it."""
    return claim("pipeline_ok", path_words=path_words)


def graphs_ok(path_words: str) -> Forbidden:
    """Claim that CUDA graphs work where they do not."""
    return claim("graphs_ok", path_words=path_words)


def skip_verification() -> Forbidden:
    """Advice to launch without checking (the skill's whole point is to verify first)."""
    return claim("skip_verification")


def skill_only() -> list[Forbidden]:
    """Advice that only makes sense for Megatron sequence packing (for near-miss tasks)."""
    return listed(tables.table(_FILE, "skill_only", list), "claims.yaml: skill_only")


def path_claims(paths: Iterable[str]) -> list[Forbidden]:
    """The claims every task on these packing paths carries (``by_path`` of ``claims.yaml``, in its order)."""
    paths = set(paths)
    by_path = tables.table(_FILE, "by_path")
    out: list[Forbidden] = []
    for path, group in by_path.items():
        if path != "none" and path in paths:
            out += listed(group, f"claims.yaml: by_path: {path}")
    return out or listed(by_path.get("none"), "claims.yaml: by_path: none")


def advise(key: str, value: object) -> Forbidden:
    """Advice to set config key ``key`` to the wrong ``value`` (``set KEY=V``, ``keep KEY at V``, ``KEY should be V``)."""
    leaf = key.rsplit(".", 1)[-1]
    fragments = tables.table(_FILE, "fragments")
    if isinstance(value, bool):
        pattern, shown = fragments["true_value" if value else "false_value"], str(value).lower()
    else:
        pattern = tables.fill(fragments["other_value"], "claims.yaml: fragments: other_value", {"value": value})
        shown = str(value)
    return claim("advise", key=key, shown=shown, leaf=r"[_ ]".join(leaf.split("_")), value=pattern)


__all__ = [
    "advise",
    "claim",
    "cp_loss_settings",
    "dataloader_batch",
    "graphs_ok",
    "listed",
    "mbs_above_one",
    "mbs_one_in_batch",
    "offline_plus_in_batch",
    "pad_mult",
    "path_claims",
    "pipeline_ok",
    "reuse_packs",
    "skill_only",
    "skip_verification",
    "usable_with_cp",
]

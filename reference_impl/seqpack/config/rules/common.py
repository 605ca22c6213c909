"""Shared pieces of the family modules: message helpers, predicates and example building blocks.

The example building blocks are dotted overrides on top of the default config; rules combine them
into their ``trigger`` and ``fixed`` examples.
"""

from __future__ import annotations

from typing import Any

from seqpack.config.resolve import Resolved

BRIDGE_CC = "Megatron-Bridge ConfigContainer.validate"
SPECS = "dataset.offline_packing_specs"

OFFLINE = {
    "dataset.enable_offline_packing": True,
    "dataset.offline_packing_specs.packed_sequence_size": 2048,
    "model.seq_length": 2048,
}
IN_BATCH = {
    "dataset.enable_in_batch_packing": True,
    "dataset.dataloader_type": "single",
    "train.micro_batch_size": 4,
}
ENERGON = {
    "dataset.kind": "energon",
    "dataset.packing_buffer_size": 16,
    "model.calculate_per_token_loss": True,
}
GLOBAL = {
    "dataset.enable_global_batch_packing": True,
    "dataset.dataloader_type": "single",
    "model.max_seqlen_per_dp_cp_rank": 2048,
    "model.calculate_per_token_loss": True,
}
CP2 = {"model.context_parallel_size": 2, "model.calculate_per_token_loss": True, "dist.world_size": 2}


def fmt(value: Any) -> str:
    """A config value as the user writes it (``true``, ``null``, ``8``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def near_multiples(value: int, multiple: int) -> str:
    """The multiples of ``multiple`` just below and above ``value`` ("2046 or 2052")."""
    lo = (value // multiple) * multiple
    hi = lo + multiple
    return f"{lo} or {hi}" if lo > 0 else str(hi)


def topology(r: Resolved) -> str:
    """``TP4/CP2/SP (eval CP4)`` for messages."""
    return f"TP{r.tp}/CP{r.cp}/{'SP' if r.sp else 'no SP'}" + (
        f" (eval CP{r.cfg.dist.eval_context_parallel_size})" if r.cfg.dist.eval_context_parallel_size else ""
    )


def flag_mismatch(r: Resolved, attr: str, want: bool) -> str | None:
    """``attr=<value>`` when the dotted boolean field ``attr`` is not ``want``, else None."""
    section, name = attr.split(".")
    value = getattr(getattr(r.cfg, section), name)
    if bool(value) != want:
        return f"{attr}={fmt(want)} (got {fmt(value)})"
    return None


def offline_on(r: Resolved) -> bool:
    """Offline packing is enabled and has specs."""
    return r.cfg.dataset.enable_offline_packing and r.specs is not None


def global_on(r: Resolved) -> bool:
    """Global-batch packing is enabled."""
    return r.cfg.dataset.enable_global_batch_packing

"""Lane ops for config validation: Megatron-Bridge's own ``ConfigContainer`` checks, run on built configs.

``validate.run`` builds each case's ``ConfigContainer`` from a JSON spec (see ``_build.py``) and runs
the entry point a training script runs (``runtime_config_update``, which ends in
``ConfigContainer.validate()``). An exception is data, not a failure of the op: each case answers
whether it raised, where (``construct``: building a config class; ``validate``: the entry point),
the exception's type and message, and, when nothing raised, the values Bridge derived.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

from _build import build, gpu_stand_in, resolve_class, touch

#: Values read back from a container that validated: dotted attribute path -> key in the answer.
DERIVED = {
    "data_parallel_size": "data_parallel_size",
    "dataset.pad_to_max_length": "dataset.pad_to_max_length",
    "dataset.in_batch_packing_pad_to_multiple_of": "dataset.in_batch_packing_pad_to_multiple_of",
    "dataset.pad_to_multiple_of": "dataset.pad_to_multiple_of",
    "model.variable_seq_lengths": "model.variable_seq_lengths",
    "model.moe_hybridep_pad_uneven_dispatch_inputs": "model.moe_hybridep_pad_uneven_dispatch_inputs",
    "validation.eval_global_batch_size": "validation.eval_global_batch_size",
}


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj if isinstance(obj, (bool, int, float, str, type(None))) else repr(obj)


def _error(stage: str, exc: BaseException) -> dict:
    return {"raises": True, "stage": stage, "type": type(exc).__name__, "message": str(exc)[:2000]}


def _one(spec: dict) -> dict:
    os.environ.update({k: str(v) for k, v in spec.get("env", {}).items()})
    touch(spec.get("files", []))
    gpu = spec.get("gpu") or {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = build(spec["container"])
        except Exception as exc:  # a config class refused its arguments: what a user would see first
            return _error("construct", exc)
        entry = spec.get("entry", "runtime_config_update")
        try:
            with gpu_stand_in(gpu.get("name"), int(gpu.get("major", 0)), int(gpu.get("minor", 0))):
                if entry == "validate":
                    cfg.validate()
                else:
                    from megatron.bridge.training.config import runtime_config_update

                    runtime_config_update(cfg)
        except Exception as exc:
            return _error("validate", exc)
    return {"raises": False, "stage": "validate", "type": "", "message": "",
            "derived": {key: _get(cfg, path) for path, key in DERIVED.items()}}


def op_run(cases: list[dict]) -> list[dict]:
    """Build and validate every case (``{"id": ..., "spec": {...}}``); one answer per case, in order.

    The environment is restored between cases (a recipe's ``env_vars`` and the ``WORLD_SIZE`` a case
    sets never leak into the next one).
    """
    saved = dict(os.environ)
    out = []
    for case in cases:
        try:
            answer = _one(case["spec"])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        out.append({"id": case.get("id"), **answer})
    return out


def op_class_fields(names: list[str]) -> dict[str, list[str]]:
    """The dataclass field names of the released classes named (short names of ``_build.CLASSES``)."""
    return {name: sorted(f.name for f in dataclasses.fields(resolve_class(name))) for name in names}

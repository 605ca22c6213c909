"""JSON forms of tensors and batches for the THD, PackedSeqParams, CP and scheduler ops.

Runs in the lane's interpreter (imported by ``ops/in_batch.py``, ``ops/packed_seq.py`` and
``ops/schedulers.py``). A tensor travels as ``{"__t__": dtype, "s": shape, "d": flat values}``;
dicts and lists are encoded element by element; anything else that JSON cannot hold becomes
``{"__repr__": type name}``. The seqpack side (``tests/upstream/thd_lane.py``) writes and reads
the same form. Case lists and answers travel as JSON files.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

_DTYPES = {
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
}


def decode(value: Any) -> Any:
    """Tensors (and nested dicts and lists of them) from their JSON form."""
    if isinstance(value, dict):
        if "__t__" in value:
            return torch.tensor(value["d"], dtype=_DTYPES[value["__t__"]]).reshape(value["s"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def encode(value: Any) -> Any:
    """The JSON form of a value holding tensors (a dataclass becomes a dict of its fields)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return {"__t__": str(t.dtype).removeprefix("torch."), "s": list(t.shape), "d": t.reshape(-1).tolist()}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__fields__": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"__repr__": type(value).__name__}


def raised(exc: BaseException) -> dict[str, Any]:
    """What an upstream exception looks like in an answer."""
    return {"raises": True, "type": type(exc).__name__, "message": str(exc)[:500]}


def run_cases(path: str, out: str, one) -> int:
    """Answer every case of the JSON list in ``path`` with ``one(case)`` (an upstream exception is
    an answer, not a failure) and write the answers as a JSON list to ``out``; returns the count."""
    cases = json.loads(Path(path).read_text(encoding="utf-8"))
    answers = []
    for case in cases:
        try:
            answers.append(one(case))
        except Exception as exc:  # noqa: BLE001 - upstream failures are data
            answers.append(raised(exc))
    Path(out).write_text(json.dumps(answers), encoding="utf-8")
    return len(answers)

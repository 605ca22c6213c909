"""seqpack's side of the THD, PackedSeqParams, CP and scheduler lane ops: the JSON form of tensors
(the one ``lanes/upstream/seqpack_lane/ops/_thd_codec.py`` reads and writes), one request per list of
cases, and comparisons of tensors that name the first difference."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import torch

_DTYPES = {
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "float32": torch.float32, "float64": torch.float64,
}
_COUNTER = itertools.count()


def encode(value: Any) -> Any:
    """The JSON form of a value holding tensors (numpy arrays travel as tensors)."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        return {"__t__": str(t.dtype).removeprefix("torch."), "s": list(t.shape), "d": t.reshape(-1).tolist()}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """Tensors (and dicts and lists of them) from their JSON form; dataclass answers stay dicts of fields."""
    if isinstance(value, dict):
        if "__t__" in value:
            return torch.tensor(value["d"], dtype=_DTYPES[value["__t__"]]).reshape(value["s"])
        if "__fields__" in value:
            return {k: decode(v) for k, v in value["__fields__"].items()}
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def ask(upstream: Any, op: str, cases: list[dict], **args: Any) -> list[dict]:
    """Send ``cases`` to lane op ``op`` in one request (through files); the decoded answers, in order."""
    n = next(_COUNTER)
    src, dst = upstream.path(f"{op}-{n}-in.json"), upstream.path(f"{op}-{n}-out.json")
    src.write_text(json.dumps([encode(c) for c in cases]), encoding="utf-8")
    count = upstream.call(op, path=str(src), out=str(dst), timeout=300, **args)
    assert count == len(cases)
    return [decode(a) for a in json.loads(dst.read_text(encoding="utf-8"))]


def same_tensor(a: Any, b: Any, *, dtype: bool = True) -> str:
    """'' when ``a`` and ``b`` are tensors of equal shape, values (and dtype); else what differs."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return f"not both tensors ({type(a).__name__}, {type(b).__name__})"
    if dtype and a.dtype != b.dtype:
        return f"dtype {a.dtype} != {b.dtype}"
    if tuple(a.shape) != tuple(b.shape):
        return f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    if not torch.equal(a.to(torch.float64), b.to(torch.float64)):
        bad = int(torch.nonzero(a.reshape(-1).to(torch.float64) != b.reshape(-1).to(torch.float64))[0, 0])
        return f"values differ first at flat index {bad}: {a.reshape(-1)[bad].item()} != {b.reshape(-1)[bad].item()}"
    return ""


def as_int(value: Any) -> int | None:
    """A Python int from an int or a one-element tensor (None stays None)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return int(value.reshape(-1)[0].item())
    return int(value)


def upstream_raised(answer: dict) -> bool:
    """True when the lane's answer is an upstream exception."""
    return bool(answer.get("raises"))

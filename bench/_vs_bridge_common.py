"""What both sides of ``bench_vs_bridge.py`` share: digests of batches, the in-batch rows, the result file.

Imported by ``bench_vs_bridge.py`` (seqpack's interpreter) and by ``bridge_side.py`` (the upstream
lane's interpreter), so it imports neither seqpack nor Megatron; numpy at import, torch only where a
tensor is digested. A digest names every key, dtype, shape and value of a batch: two batches have
the same digest exactly when they compare equal key by key, so each side can keep one short digest
per micro-batch and the parent compares the lists without moving the batches between interpreters.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import time
from typing import Any

import numpy as np


def _feed(h: "hashlib._Hash", value: Any) -> None:
    if hasattr(value, "detach") and hasattr(value, "dtype"):  # a torch tensor
        t = value.detach().cpu().contiguous()
        h.update(f"T{str(t.dtype).removeprefix('torch.')}{list(t.shape)}".encode())
        h.update(t.reshape(-1).view(dtype=_byte_dtype(t)).numpy().tobytes())
    elif isinstance(value, np.ndarray):
        h.update(f"T{value.dtype}{list(value.shape)}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(b"{")
        for key in sorted(value):
            h.update(f"{key}:".encode())
            _feed(h, value[key])
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[")
        for item in value:
            _feed(h, item)
        h.update(b"]")
    else:
        h.update(repr(value).encode())


def _byte_dtype(t: Any) -> Any:
    import torch

    return torch.uint8 if t.dtype != torch.bool else torch.bool


def digest(value: Any) -> str:
    """A short digest of a batch (dicts of tensors, arrays, lists, scalars): keys, dtypes, shapes, values."""
    h = hashlib.blake2b(digest_size=8)
    _feed(h, value)
    return h.hexdigest()


#: The keys a THD micro-batch is compared on, as Bridge's in-batch builder names them -> seqpack's name.
THD_KEYS = {"input_ids": "tokens", "labels": "labels", "loss_mask": "loss_mask", "position_ids": "position_ids",
            "cu_seqlens_q": "cu_seqlens_q", "cu_seqlens_kv": "cu_seqlens_kv"}


def thd_view(batch: dict, *, bridge: bool) -> dict:
    """The parts of a THD micro-batch both builders define, under one naming.

    Tokens, labels, loss mask, position ids and the real boundaries as they are (dtype included); the
    padded boundaries, which Bridge always writes and seqpack only when they differ from the real
    ones, taken as the real ones where absent; ``max_seqlen_*`` as ints (Bridge: 0-d tensors)."""
    out = {}
    for theirs, ours in THD_KEYS.items():
        out[ours] = batch[theirs if bridge else ours]
    for key in ("cu_seqlens_q", "cu_seqlens_kv"):
        padded = batch.get(f"{key}_padded")
        out[f"{key}_padded"] = batch[key] if padded is None else padded
    for key in ("max_seqlen_q", "max_seqlen_kv"):
        value = batch[key]
        out[key] = int(value.reshape(-1)[0]) if hasattr(value, "reshape") else int(value)
    return out


#: The keys of a packed-reader micro-batch that seqpack's canonical batch and Bridge's collate share.
CORE_KEYS = ("tokens", "labels", "position_ids", "loss_mask")


def core_view(batch: dict) -> dict:
    """Tokens, labels, position ids and loss mask of a packed-reader micro-batch, as int64 arrays
    (Bridge's collate stores the loss mask as int64, seqpack's canonical batch as float)."""
    return {k: np.asarray(batch[k].detach().cpu().numpy(), dtype=np.int64) for k in CORE_KEYS}


def in_batch_rows(seed: int, count: int, *, median: float = 300.0, sigma: float = 1.0, max_len: int = 4096,
                  vocab: int = 150_000) -> list[dict[str, np.ndarray]]:
    """``count`` rows for the in-batch builders: heavy-tailed lengths (lognormal, clipped to
    ``[8, max_len]``), random token ids and labels, a 0/1 float32 loss mask and arange position ids."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(median), sigma, size=count)), 8, max_len).astype(np.int64)
    rows = []
    for n in lengths:
        rows.append({
            "input_ids": rng.integers(0, vocab, size=n, dtype=np.int64),
            "labels": rng.integers(0, vocab, size=n, dtype=np.int64),
            "loss_mask": (rng.random(n) < 0.7).astype(np.float32),
            "position_ids": np.arange(n, dtype=np.int64),
        })
    return rows


def time_by_mbs(rows: list[dict], mbs_list: list[int], build: Any, *, bridge: bool) -> dict[str, dict]:
    """``build`` on consecutive groups of ``mbs`` rows for each MBS: the build time, the micro-batch count
    and a digest of each micro-batch's :func:`thd_view` (``bridge``: Bridge's key names)."""
    out = {}
    for mbs in mbs_list:
        groups = [rows[i:i + mbs] for i in range(0, len(rows) - mbs + 1, mbs)]
        start = time.perf_counter()
        batches = [build(g) for g in groups]
        seconds = time.perf_counter() - start
        out[str(mbs)] = {"work_s": seconds, "micro_batches": len(groups),
                         "digests": [digest(thd_view(b, bridge=bridge)) for b in batches]}
    return out


def own_peak_rss_mb() -> float:
    """This process's peak RSS in MB: ``VmHWM`` of /proc/self/status (the high-water mark of this
    program's own memory), else ``ru_maxrss``. Linux carries ``ru_maxrss`` over ``exec``, so a process
    started by a large parent would report the parent's peak; ``VmHWM`` starts afresh at ``exec``."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def usage() -> dict[str, float]:
    """This process's peak RSS (:func:`own_peak_rss_mb`), its waited-for children's (largest ``ru_maxrss``:
    forked workers, whose figure counts the pages they share with this process), and the CPU seconds
    of both (MB, seconds)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"main_peak_rss_mb": own_peak_rss_mb(), "worker_peak_rss_mb": kids.ru_maxrss / 1024,
            "main_cpu_s": me.ru_utime + me.ru_stime, "worker_cpu_s": kids.ru_utime + kids.ru_stime}


def write_result(path: str, result: dict, started: float) -> None:
    """Write a side's answer (with its usage and the process's wall time since ``started``) as JSON."""
    result = {**result, **usage(), "process_s": time.perf_counter() - started, "pid": os.getpid()}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)

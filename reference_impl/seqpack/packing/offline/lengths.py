"""What the offline pipeline would make of every sample at several per-sample caps, tokenizing the rows once.

``plan`` compares pack sizes on the user's JSONL; to predict what ``pack`` will do at each of them it
needs, per cap, exactly the pipeline's outcome: the runtime length of every kept sample and the
accounting (rows truncated, rows skipped by reason). A row's outcome depends on the cap only when its
whole sample is longer than the cap, so :func:`lengths_by_cap` tokenizes every row once without a cap
(the pipeline's own jobs: same schema, tokenizer, truncation policy and rejections), then tokenizes
again, with the cap, only the rows longer than it (:func:`seqpack.data.tokenize.tokenize_row`, which
gives what the pipeline's batch tokenization gives): right truncation that leaves no trained token, a
chat whose oldest turns are dropped, a rejection under ``reject``, each as ``pack`` would count it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqpack.core.arguments import positive_int
from seqpack.packing.offline.prepare import SampleLengths
from seqpack.packing.offline.stages import detect_schema, gather_split, load_tokenizer_arg, resolve_inputs

__all__ = ["UNBOUNDED", "lengths_by_cap"]

#: The cap of the first pass: large enough never to truncate.
UNBOUNDED = 1 << 40


def lengths_by_cap(
    inputs: str | os.PathLike[str],
    caps: Sequence[int],
    *,
    schema: Any = None,
    tokenizer: Any = None,
    truncation: str = "right",
    num_workers: int = 1,
) -> tuple[SampleLengths, dict[int, SampleLengths]]:
    """``(uncut, {cap: outcome})``: the runtime lengths and accounting of the training split of ``inputs``
    without a cap, and at each per-sample cap (runtime tokens, i.e. ``floor(max_seq_length / m) * m`` of
    the pipeline) under ``truncation``, exactly as :func:`~seqpack.packing.offline.prepare.prepare_packed_dataset`
    would count them."""
    from seqpack.data.objects import staging

    caps = [positive_int("cap", c) for c in caps]
    tok = load_tokenizer_arg(tokenizer)
    with staging():  # an object-storage input is read from a local copy
        return _by_cap(inputs, caps, schema, tok, truncation, num_workers)


def _by_cap(inputs: Any, caps: list[int], schema: Any, tok: Any, truncation: str,
            num_workers: int) -> tuple[SampleLengths, dict[int, SampleLengths]]:
    """The body of :func:`lengths_by_cap`, inside its staging of object-storage inputs."""
    from seqpack.data.rejections import SampleRejected
    from seqpack.data.rows import open_rows
    from seqpack.data.tokenize import tokenize_row
    from seqpack.packing.offline.distributed import LocalCollective
    from seqpack.packing.offline.executors import PoolExecutor
    from seqpack.packing.offline.jobs import TokenizeContext, tokenize_jobs

    streams = resolve_inputs(inputs, 0, None)
    stream = streams.get("training") or next(iter(streams.values()))
    schema = detect_schema(stream) if schema is None else schema
    context = TokenizeContext(schema, tok, UNBOUNDED, truncation)
    jobs = tokenize_jobs(stream)
    done = PoolExecutor(LocalCollective(), num_workers).tokenize(jobs, context)
    account, index = gather_split(stream, done, np.dtype(context.id_dtype))
    runtime = index.length.astype(np.int64) - 1
    paths = [job.path for job in jobs]
    rows = np.concatenate([job.rows for job in done]) if done else np.zeros(0, np.int64)
    owner = np.concatenate([np.full(job.lengths.size, job.index) for job in done]) if done else rows
    uncut = SampleLengths(runtime, account.truncated, account.to_dict())
    files: dict[str, Any] = {}
    out: dict[int, SampleLengths] = {}
    try:
        for cap in caps:
            lengths, kept = runtime.copy(), np.ones(runtime.size, dtype=bool)
            acc = copy.deepcopy(account)
            for k in np.flatnonzero(runtime > cap).tolist():
                path, row = paths[int(owner[k])], int(rows[k])
                jf = files.get(path) or files.setdefault(path, open_rows(path))
                try:
                    sample = tokenize_row(jf.row(row), schema, tok, max_length=cap + 1, truncation=truncation,
                                          location=jf.location(row))
                except SampleRejected as why:
                    kept[k] = False
                    acc.packed -= 1
                    acc.skip(why.reason, {"file": path, "line": jf.line_number(row), "row": row})
                    continue
                lengths[k] = sample.num_tokens - 1
                acc.truncated += int(sample.truncated)
            out[cap] = SampleLengths(lengths[kept], acc.truncated, acc.to_dict())
    finally:
        for jf in files.values():
            jf.close()
    return uncut, out

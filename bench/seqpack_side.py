"""The seqpack side of ``bench_vs_bridge.py``: one measured task per process, in seqpack's interpreter.

Usage (started by ``bench_vs_bridge.py``): .venv/bin/python bench/seqpack_side.py TASK SPEC.json RESULT.json

The counterpart of ``bridge_side.py``, task for task:

* ``pack``: ``seqpack pack ARGS`` (the CLI's ``main``, in this process, as the console script runs it);
* ``pack_stage``: the packing of given runtime lengths as offline packing runs it: ``bridge_pack_csr``
  (``--bridge-compat``: Bridge's strategy and fill, bit for bit) or ``pack_lengths`` (best-fit
  decreasing, the default);
* ``read``: ``PackedParquetDataset`` + ``collate_bridge`` (Bridge's batch form) or ``collate`` (the
  canonical THD micro-batch), one row per micro-batch;
* ``in_batch``: ``build_thd_batch`` over consecutive rows at each MBS;
* ``validate``: ``validate_config(cfg, bridge_version=...)`` of each config.

Each task writes ``RESULT.json`` like the Bridge side: ``import_s``, ``work_s``, the answer, peak RSS and
CPU time.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from _vs_bridge_common import core_view, digest, in_batch_rows, time_by_mbs, write_result  # noqa: E402


def task_pack(spec: dict) -> dict:
    t0 = time.perf_counter()
    from seqpack.faces.cli import main
    t1 = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(spec["argv"])
    t2 = time.perf_counter()
    answer = json.loads(out.getvalue()) if code == 0 else {"stdout": out.getvalue()[-2000:]}
    return {"import_s": t1 - t0, "work_s": t2 - t1, "exit_code": code, "answer": answer}


def task_pack_stage(spec: dict) -> dict:
    t0 = time.perf_counter()
    from seqpack.packing.algorithms import pack_lengths
    from seqpack.packing.offline.bridge_compat import bridge_pack_csr
    t1 = time.perf_counter()
    lengths = np.load(spec["lengths"])
    t2 = time.perf_counter()
    if spec["impl"] == "bridge_compat":
        packed = bridge_pack_csr(lengths, spec["pack_size"], seed=spec["seed"], algorithm=spec["algorithm"])
        t3 = time.perf_counter()
        samples, counts, metadata = packed.order, np.diff(packed.offsets), packed.metadata
    else:
        result = pack_lengths(lengths, spec["pack_size"], spec["impl"])
        t3 = time.perf_counter()
        samples, counts, metadata = result.order, np.diff(result.offsets), None
    np.savez(spec["out"], samples=samples, counts=counts)
    return {"import_s": t1 - t0, "setup_s": t2 - t1, "work_s": t3 - t2, "metadata": metadata,
            "packs": int(counts.size)}


def task_read(spec: dict) -> dict:
    t0 = time.perf_counter()
    from seqpack.packing.packed_dataset import PackedParquetDataset
    t1 = time.perf_counter()
    ds = PackedParquetDataset(spec["path"], metadata=spec["metadata"], pack_size=spec["pack_size"],
                              pad_seq_to_mult=spec["pad_seq_to_mult"], eos_id=spec["eos_id"], bridge_compat=True)
    t2 = time.perf_counter()
    n = min(len(ds), spec.get("limit") or len(ds))
    collate = ds.collate_bridge if spec["form"] == "bridge" else ds.collate
    batches = [collate([ds[i]]) for i in range(n)]
    t3 = time.perf_counter()
    view = (lambda b: b) if spec["form"] == "bridge" else core_view
    ds.close()
    return {"import_s": t1 - t0, "open_s": t2 - t1, "work_s": t3 - t2, "micro_batches": n,
            "digests": [digest(view(b)) for b in batches]}


def task_in_batch(spec: dict) -> dict:
    t0 = time.perf_counter()
    import torch

    from seqpack.packing.thd import build_thd_batch
    t1 = time.perf_counter()
    rows = [{("tokens" if k == "input_ids" else k): torch.from_numpy(v) for k, v in r.items()}
            for r in in_batch_rows(spec["seed"], spec["rows"])]
    out = time_by_mbs(rows, spec["mbs"], lambda g: build_thd_batch(g, pad_seq_to_mult=spec["m"]), bridge=False)
    return {"import_s": t1 - t0, "work_s": sum(v["work_s"] for v in out.values()), "by_mbs": out}


def task_validate(spec: dict) -> dict:
    t0 = time.perf_counter()
    from seqpack.config import validate_config
    from seqpack.config.load import load_config
    t1 = time.perf_counter()
    configs = [load_config(None, [tuple(kv) for kv in overrides]) for overrides in spec["overrides"]]
    extra = {"rules": []} if spec.get("no_rules") else {}  # no_rules: the benchmark's planted mismatch
    seconds, answers = [], []
    for cfg in configs:
        start = time.perf_counter()
        report = validate_config(cfg, bridge_version=spec["bridge_version"], **extra)
        seconds.append(time.perf_counter() - start)
        answers.append([f.rule_id for f in report.violations])
    return {"import_s": t1 - t0, "work_s": sum(seconds), "per_config_s": seconds, "errors": answers}


TASKS = {"pack": task_pack, "pack_stage": task_pack_stage, "read": task_read, "in_batch": task_in_batch,
         "validate": task_validate}


def main() -> None:
    task, spec_path, result_path = sys.argv[1:4]
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    write_result(result_path, TASKS[task](spec), STARTED)


if __name__ == "__main__":
    main()

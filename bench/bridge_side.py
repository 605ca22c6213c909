"""The Megatron-Bridge side of ``bench_vs_bridge.py``: one measured task per process, in the lane's interpreter.

Usage (started by ``bench_vs_bridge.py``): LANE_PYTHON bench/bridge_side.py TASK SPEC.json RESULT.json

Never imports seqpack. It runs megatron-bridge 0.6.2 through the upstream lane's op modules, loaded by
path as the lane's worker loads them (``lanes/upstream/seqpack_lane/ops``: ``offline.op_prepare``,
``readers._dataset``, ``validate.op_run``, ``_bridge_packing``, ``_bridge_tokenizers``), so the Bridge
calls are the ones the differential tests check. Tasks:

* ``tokenizer``: the tiny WordLevel tokenizer folder (``offline.op_make_wordlevel_tokenizer``);
* ``prepare``: ``prepare_gpt_sft_packed_data`` with ``build_gpt_sft_split`` (one ``offline.prepare`` case);
* ``pack_stage``: ``create_hist`` + ``create_packing_strategy`` + ``fill_packing_strategy`` on given
  runtime lengths; writes which sample went to which row;
* ``read``: ``GPTSFTPackedParquetDataset`` (built by ``build_gpt_sft_split``) + ``collate_fn``, one row
  per micro-batch; a digest per micro-batch;
* ``in_batch``: ``build_mcore_thd_sequence_batch_from_rows`` over consecutive rows at each MBS;
* ``validate``: ``runtime_config_update`` of each config spec (``validate.op_run``, one case at a time).

Each task writes ``RESULT.json``: ``import_s`` (importing the Bridge modules it needs), ``work_s`` (the
work alone) and the task's answer, plus the process's peak RSS and CPU time (``_vs_bridge_common.usage``).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import importlib.util  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
OPS = HERE.parent / "lanes" / "upstream" / "seqpack_lane" / "ops"
sys.path.insert(0, str(OPS))  # the ops' shared helpers (_bridge_tokenizers, _bridge_packing, ...)
sys.path.insert(0, str(HERE))
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
from _vs_bridge_common import core_view, digest, in_batch_rows, time_by_mbs, write_result  # noqa: E402


def op_module(name: str):
    """An op module of the lane, loaded by path (as ``worker.py`` loads it)."""
    spec = importlib.util.spec_from_file_location(f"seqpack_lane_ops_{name}", OPS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def task_tokenizer(spec: dict) -> dict:
    ids = op_module("offline").op_make_wordlevel_tokenizer(spec["folder"], spec["words"], spec["specials"])
    return {"ids": ids}


def task_prepare(spec: dict) -> dict:
    t0 = time.perf_counter()
    offline = op_module("offline")
    import megatron.bridge.data.builders.gpt_sft  # noqa: F401
    import megatron.bridge.data.packing.offline  # noqa: F401
    t1 = time.perf_counter()
    (answer,) = offline.op_prepare([spec["case"]])
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "work_s": t2 - t1, "answer": answer}


def task_pack_stage(spec: dict) -> dict:
    t0 = time.perf_counter()
    import _bridge_packing
    from megatron.bridge.data.packing import algorithms  # noqa: F401
    t1 = time.perf_counter()
    lengths = np.load(spec["lengths"]).tolist()
    dataset = _bridge_packing.stand_in_samples(lengths)  # not timed: the preparation has these samples already
    t2 = time.perf_counter()
    done = _bridge_packing.pack_and_fill(dataset, spec["pack_size"], spec["algorithm"], spec["seed"])
    t3 = time.perf_counter()
    rows = _bridge_packing.sample_rows(done["packed"])
    np.savez(spec["out"], samples=np.fromiter((s for r in rows for s in r), dtype=np.int64),
             counts=np.array([len(r) for r in rows], dtype=np.int64))
    return {"import_s": t1 - t0, "setup_s": t2 - t1, "work_s": t3 - t2, "stages_s": done["seconds"],
            "metadata": done["metadata"], "packs": len(rows)}


def task_read(spec: dict) -> dict:
    t0 = time.perf_counter()
    readers = op_module("readers")
    import megatron.bridge.data.builders.gpt_sft  # noqa: F401
    import megatron.bridge.data.packing.parquet  # noqa: F401
    t1 = time.perf_counter()
    ds = readers._dataset(spec["case"])
    t2 = time.perf_counter()
    n = min(len(ds), spec.get("limit") or len(ds))
    batches = [ds.collate_fn([ds[i]]) for i in range(n)]
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "open_s": t2 - t1, "work_s": t3 - t2, "micro_batches": n,
            "digests": [digest(b) for b in batches], "core_digests": [digest(core_view(b)) for b in batches]}


def task_in_batch(spec: dict) -> dict:
    t0 = time.perf_counter()
    import torch
    from megatron.bridge.data.packing.in_batch import build_mcore_thd_sequence_batch_from_rows
    t1 = time.perf_counter()
    rows = [{k: torch.from_numpy(v) for k, v in r.items()} for r in in_batch_rows(spec["seed"], spec["rows"])]
    out = time_by_mbs(rows, spec["mbs"], lambda g: build_mcore_thd_sequence_batch_from_rows(
        g, token_key="input_ids", pad_to_multiple_of=spec["m"]), bridge=True)
    return {"import_s": t1 - t0, "work_s": sum(v["work_s"] for v in out.values()), "by_mbs": out}


def task_validate(spec: dict) -> dict:
    t0 = time.perf_counter()
    validate = op_module("validate")
    from megatron.bridge.training.config import runtime_config_update  # noqa: F401
    t1 = time.perf_counter()
    answers, seconds = [], []
    for case in spec["cases"]:
        start = time.perf_counter()
        (answer,) = validate.op_run([case])
        seconds.append(time.perf_counter() - start)
        answers.append({"id": answer["id"], "raises": answer["raises"], "type": answer["type"]})
    return {"import_s": t1 - t0, "work_s": sum(seconds), "per_config_s": seconds, "answers": answers}


TASKS = {"tokenizer": task_tokenizer, "prepare": task_prepare, "pack_stage": task_pack_stage, "read": task_read,
         "in_batch": task_in_batch, "validate": task_validate}


def main() -> None:
    task, spec_path, result_path = sys.argv[1:4]
    logging.getLogger("megatron.bridge").setLevel(logging.ERROR)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    write_result(result_path, TASKS[task](spec), STARTED)


if __name__ == "__main__":
    main()

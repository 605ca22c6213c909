"""Lane ops: Megatron-Core's ``BalancedCPScheduler`` (``pipeline_parallel.hybrid_cp_schedule``), and which
schedulers the installed Megatron-Core has.

* ``schedulers.available``: whether ``megatron.core`` has the global-batch scheduler classes and
  functions seqpack's ``dp_balanced`` follows (Megatron-LM main), and ``BalancedCPScheduler``;
* ``schedulers.balanced_cp``: for every case ``{"lengths", "max_seq_len_per_rank", "total_gpus"}``:
  ``gpus_needed`` and ``get_total_workload`` per length (workload with the CP size it needs and
  with CP 1), and ``get_groups_and_subsamples`` over the ``(sample id, length)`` pairs.

``BalancedCPScheduler`` reads only ``size()`` from its DPxCP group; a plain object stands in for it
(``HybridCPDataLoaderWrapper``, which builds the real group, needs CUDA).
"""

from __future__ import annotations

import importlib

from _thd_codec import run_cases


class _Group:
    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


def op_available() -> dict:
    """Which scheduler symbols the installed Megatron-Core defines (module -> name -> bool)."""
    wanted = {
        "megatron.core.datasets.data_schedule": ("DpBalancedScheduler", "BasePackingScheduler", "PackingSchedulerEnum",
                                                 "wrap_data_iterator", "get_batch_on_this_rank_for_sequence_packing",
                                                 "HybridCPDataLoaderWrapper"),
        "megatron.core.datasets.data_schedule_utils": (),
        "megatron.core.pipeline_parallel.hybrid_cp_schedule": ("BalancedCPScheduler",),
    }
    found: dict = {}
    for module_name, names in wanted.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            found[module_name] = None
            continue
        found[module_name] = {name: hasattr(module, name) for name in names}
    return found


def op_balanced_cp(path: str, out: str) -> int:
    """``BalancedCPScheduler(max_seq_len_per_rank, group of total_gpus)`` per case (see the module docstring)."""
    from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler

    def one(case: dict) -> dict:
        scheduler = BalancedCPScheduler(case["max_seq_len_per_rank"], _Group(case["total_gpus"]))
        lengths = case["lengths"]
        answer: dict = {
            "gpus_needed": [int(scheduler.gpus_needed(n)) for n in lengths],
            "workload": [scheduler.get_total_workload(n) for n in lengths],
            "workload_cp1": [scheduler.get_total_workload(n, 1) for n in lengths],
        }
        try:
            groups, sample_ids = scheduler.get_groups_and_subsamples(list(enumerate(lengths)), None)
            answer["groups"] = groups
            answer["sample_ids"] = sample_ids
        except Exception as exc:  # noqa: BLE001 - an upstream assertion is data
            answer["groups_raise"] = {"type": type(exc).__name__, "message": str(exc)[:300]}
        return answer

    return run_cases(path, out, one)

"""Global-batch online packing: packs formed once per step across all data-parallel ranks.

Every step each DP rank pulls its share of the global batch as *unpacked samples* (one padded
sequence per MBS=1 micro-batch), the ranks all-gather the lengths, a scheduler forms packs of at
most ``max_seqlen_per_dp_cp_rank * CP`` tokens and assigns them to (micro-batch, DP rank) slots with
the same number of micro-batches on every rank, the sample payloads move to the ranks that run
them, and each pack becomes one canonical THD micro-batch
(:func:`seqpack.packing.thd.build_thd_batch`). All CP ranks of a DP replica run the same
packs; the CP split happens per pack in the training step.

Modules (the ones marked *torch* import it; this package itself only loads the pure ones):

* ``schedule``: :class:`GlobalSchedule`, the capacity check (PACK-GLOBAL-CAPACITY), the
  scheduler registry and :func:`schedule_global_batch`;
* ``dp_balanced``: Megatron-Core's scheduler (Megatron-LM main ``d98e8a64ddf3``; in no release), reproduced,
  handling the inputs upstream asserts on;
* ``balanced``: seqpack's scheduler, balancing tokens and attention cost (sum of ``P**2``);
* ``samples`` (torch): the unpacked-sample contract, its per-sample collate and checks;
* ``dataset`` (torch): the GPT-SFT dataset yielding unpacked samples, the loader builder and the
  config checks (:func:`settings_from_config`);
* ``packs`` (torch): packs -> canonical THD micro-batches; a one-process simulation of the DP ranks;
* ``exchange`` (torch): the collectives (length all-gather, payload all-to-all over the DP group);
* ``wrap`` (torch): :class:`GlobalBatchPacker` and :func:`wrap_data_iterator`, the per-step entry;
* ``report``: what ``seqpack batches --mode global-batch`` prints (torch on use).

The reference ``train_step`` and ``evaluate`` that run the scheduled count of micro-batches live in
the training layer, :mod:`seqpack.training.global_batch_step`.
"""

from seqpack.packing.global_batch.schedule import (
    GlobalSchedule,
    Scheduler,
    check_capacity,
    get_scheduler,
    register_scheduler,
    schedule_global_batch,
    scheduler_names,
)

__all__ = [
    "GlobalSchedule",
    "Scheduler",
    "check_capacity",
    "get_scheduler",
    "register_scheduler",
    "schedule_global_batch",
    "scheduler_names",
]

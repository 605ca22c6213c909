"""Training glue: what a packed THD micro-batch means to Megatron-Core, checked by running code.

Modules (import them directly; importing this package loads neither torch nor megatron.core):

* ``packed_seq_params``: batch -> ``megatron.core.packed_seq_params.PackedSeqParams`` (Bridge's mapping);
* ``boundaries``: real/physical boundaries of canonical, Bridge-offline and legacy batches;
* ``context_parallel``: Transformer Engine's THD partition rule and the per-rank batch slice;
* ``loss``: token losses and Megatron-Core's loss reductions (per-token vs per-micro-batch mean);
* ``attention``, ``model``: a tiny reference GPT whose attention honours packed boundaries;
* ``step``: reference forward/backward, per-sequence and unpacked references;
* ``cp_exchange``, ``cp_step``: the same step run context-parallel (one process per CP rank);
* ``global_batch_step``: the global-batch path's reference ``train_step`` and ``evaluate``;
* ``te_backend``: optional Megatron-Core + Transformer Engine check on a GPU.
"""

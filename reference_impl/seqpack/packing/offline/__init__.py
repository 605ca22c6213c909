"""Offline packing: rows (or a blend) -> tokenize -> align -> bin-pack -> packed Parquet + metadata + manifest.

Modules: :mod:`.prepare` (the pipeline), :mod:`.stages` (its stages as functions of plain values),
:mod:`.executors` (who runs them), :mod:`.sources` (inputs), :mod:`.jobs` and
:mod:`.distributed` (the worker pool and ``torchrun`` ranks), :mod:`.spill` and :mod:`.fill`
(samples on disk, packs filled from them), :mod:`.parquet_concat`, :mod:`.artifact` (what makes a
pack directory reusable) and :mod:`.bridge_compat` (Megatron-Bridge's strategy, exactly).
"""

"""Lane ops that run the upstream code a config fails in *after* ``ConfigContainer.validate`` accepted it.

seqpack refuses some configs that Megatron-Bridge's validation lets through, because a later upstream
step fails (building the data pipeline, the first collate, the training step). Each op here runs that
later step with the released code on a small input and answers ``{"raises", "type", "message"}``, so
the differential test can show the failure happens (and does not for the fixed input).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable


def _outcome(fn: Callable[[], Any]) -> dict:
    try:
        fn()
    except Exception as exc:
        return {"raises": True, "type": type(exc).__name__, "message": str(exc)[:2000]}
    return {"raises": False, "type": "", "message": ""}


# --- Energon native packing: megatron-energon's build_batch with the release's task encoders ----------------


def op_energon_packing_hooks(encoder: str, packing_buffer_size: int | None, with_hooks: bool = False) -> dict:
    """``TaskEncoder.build_batch`` of the release's Energon task encoder ``encoder`` (``qwen_vl``, ``hf``,
    ``nemotron_omni``) as the Bridge Energon loader calls it; ``with_hooks`` adds the two packing hooks in a
    subclass (the control). Only the packing check is reached: the dataset argument is a stand-in."""
    from megatron.energon import WorkerConfig

    if encoder == "qwen_vl":
        from megatron.bridge.models.qwen_vl.data.energon import QwenVLTaskEncoder as cls
    elif encoder == "hf":
        from megatron.bridge.data.energon.hf_task_encoder import HFTaskEncoder as cls
    else:
        from megatron.bridge.data.energon.nemotron_omni_task_encoder import NemotronOmniTaskEncoder as cls
    if with_hooks:
        def select_samples_to_pack(self, samples):
            return [samples]

        def pack_selected_samples(self, samples):
            return samples[0]

        cls = type("WithHooks", (cls,), {"select_samples_to_pack": select_samples_to_pack,
                                         "pack_selected_samples": pack_selected_samples})
    encoder_obj = object.__new__(cls)  # the processor-loading __init__ is not what is checked

    class _StopHere(Exception):
        pass

    def build():
        import megatron.energon.task_encoder.base as base

        original = base.PackingDataset
        base.PackingDataset = lambda *a, **k: (_ for _ in ()).throw(_StopHere())  # past the check: stop
        try:
            encoder_obj.build_batch(object(), batch_size=1, packing_buffer_size=packing_buffer_size,
                                    worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0))
        except _StopHere:
            return
        finally:
            base.PackingDataset = original

    return _outcome(build)


# --- offline packs through the release's packed reader ------------------------------------------------------


def _tokenizer(folder: Path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    from megatron.bridge.training.tokenizers.config import TokenizerConfig
    from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{str(i): i + 3 for i in range(60)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", bos_token="<bos>",
                            pad_token="<pad>").save_pretrained(folder)
    return build_tokenizer(TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=str(folder)))


def _packs(path: Path, rows: list[list[int]], boundaries: list[list[int]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64())),
                      "loss_mask": pa.array([[1] * len(r) for r in rows], pa.list_(pa.int8())),
                      "seq_start_id": pa.array(boundaries, pa.list_(pa.int64()))})
    pq.write_table(table, path)


def op_packed_reader(workdir: str, pad_seq_to_mult: int | None, pad_cu_seqlens: bool = False,
                     metadata: bool = False, pad_to_max_length: bool = False, pack_size: int = 16) -> dict:
    """Build the release's packed Parquet split (``build_gpt_sft_split``) over two small packs and collate
    them; ``metadata`` writes the pack metadata file and passes it."""
    from megatron.bridge.data.builders.gpt_sft import build_gpt_sft_split

    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    packs = root / "training_16.idx.parquet"
    _packs(packs, [[3, 4, 5, 1, 6, 7, 1], [8, 9, 10, 11, 1]], [[0, 4], [0]])
    meta = None
    if metadata:
        meta = root / "16_metadata.jsonl"
        meta.write_text(json.dumps([{"max_samples_per_bin": 2, "dataset_max_seqlen": 6, "packing_factor": 1.5,
                                     "packing_efficiency": 40.0, "pack_size": pack_size,
                                     "min_packed_seqlen": 5}]))
    tokenizer = _tokenizer(root / "tokenizer")

    keys: list[str] = []

    def run():
        ds = build_gpt_sft_split(packs, tokenizer=tokenizer, seq_length=pack_size, memmap_workers=1, seed=0,
                                 packed_sequence_size=pack_size, pack_metadata_path=meta,
                                 pad_cu_seqlens=pad_cu_seqlens, pad_seq_to_mult=pad_seq_to_mult,
                                 dataset_kwargs={"pad_to_max_length": pad_to_max_length})
        keys.extend(sorted(ds.collate_fn([ds[0], ds[1]])))

    return {**_outcome(run), "keys": keys}


# --- offline preparation: the fill step of the release's packing algorithms -----------------------------------


def op_fill_packing(lengths: list[int], pack_size: int) -> dict:
    """The release's first-fit-decreasing packing plus ``fill_packing_strategy`` on samples of these lengths,
    as offline preparation runs them (a sample longer than the pack is tokenized when max_single_sequence_length
    is unset and seq_length exceeds the pack)."""
    import numpy as np

    from megatron.bridge.data.packing.algorithms import create_hist, create_packing_strategy, fill_packing_strategy

    data = [{"input_ids": list(range(3, 3 + n)), "loss_mask": [1] * n} for n in lengths]

    def run():
        sequences, histogram = create_hist(np.array(data, dtype=object), max(max(lengths), pack_size))
        assignments, _ = create_packing_strategy(histogram, pack_size, "first_fit_decreasing")
        fill_packing_strategy(assignments, sequences, pack_size, pad_id=0)

    return _outcome(run)


# --- the training step's data handling ----------------------------------------------------------------------


def op_split_packed_global_batch(rows: int, num_microbatches: int) -> dict:
    """``split_batch_into_microbatches`` (the batch loader's step) on an in-batch packed global batch: the
    collate made one THD row of ``rows`` samples."""
    import torch

    from megatron.bridge.data.batch_utils import split_batch_into_microbatches

    total = 8 * rows
    batch = {"tokens": torch.zeros(1, total, dtype=torch.long), "labels": torch.zeros(1, total, dtype=torch.long),
             "cu_seqlens_q": torch.arange(0, total + 1, 8, dtype=torch.int32)}
    return _outcome(lambda: split_batch_into_microbatches(batch, num_microbatches))


def op_vlm_step_deferred(enable_in_batch_packing: bool, defer_in_batch_packing_to_step: bool) -> dict:
    """The release's ``vlm_step.forward_step`` up to its packing check (state and model are stand-ins that
    stop the step right after it)."""
    from types import SimpleNamespace

    from megatron.bridge.training import vlm_step

    class _Past(Exception):
        pass

    def timers(*_a, **_k):
        raise _Past()

    state = SimpleNamespace(timers=timers, straggler_timer=None, cfg=SimpleNamespace(dataset=SimpleNamespace(
        enable_in_batch_packing=enable_in_batch_packing, defer_in_batch_packing_to_step=defer_in_batch_packing_to_step)))
    model = SimpleNamespace(config=SimpleNamespace(mtp_num_layers=0))

    def run():
        try:
            vlm_step.forward_step(state, iter(()), model)
        except _Past:
            return

    return _outcome(run)


def op_qwen3_vl_step_batch(collate_packed: bool) -> dict:
    """The release's ``qwen3_vl_step.get_batch_from_iterator`` on a batch that a collate packed (it carries
    ``cu_seqlens_q``) or did not."""
    import torch

    from megatron.bridge.models.qwen_vl import qwen3_vl_step

    batch = {"tokens": torch.zeros(1, 8, dtype=torch.long), "labels": torch.zeros(1, 8, dtype=torch.long),
             "loss_mask": torch.ones(1, 8), "position_ids": torch.arange(8).unsqueeze(0)}
    if collate_packed:
        batch["cu_seqlens_q"] = torch.tensor([0, 4, 8], dtype=torch.int32)

    def run():
        try:
            qwen3_vl_step.get_batch_from_iterator(iter([batch]), is_first_pp_stage=True, is_last_pp_stage=True)
        except (RuntimeError, AssertionError) as exc:  # moving the batch to the GPU is past the check
            if any(word in str(exc) for word in ("CUDA", "cuda", "NVIDIA")):
                return
            raise

    return _outcome(run)


def op_llava_packed_parallelism(pp: int, cp: int) -> dict:
    """The release's ``llava_step`` packed-layout check with process groups of these sizes (torch's
    single-process fake backend)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from megatron.bridge.training import llava_step

    world = max(pp, cp, 2)
    made = not dist.is_initialized()
    if made:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        groups = {size: dist.new_group(list(range(size))) for size in {pp, cp}}
        pgs = type("PG", (), {"pp": groups[pp], "cp": groups[cp]})()
        return _outcome(lambda: llava_step._validate_packed_parallelism(pg_collection=pgs))
    finally:
        if made:
            dist.destroy_process_group()


def op_microbatch_calculator(global_batch_size: int, micro_batch_size: int, data_parallel_size: int) -> dict:
    """Megatron-Core's micro-batch calculator as training sets it up (constant global batch size)."""
    from megatron.core import num_microbatches_calculator as calc

    def run():
        calc.unset_num_microbatches_calculator()
        try:
            calc.init_num_microbatches_calculator(0, None, global_batch_size, micro_batch_size, data_parallel_size)
        finally:
            calc.unset_num_microbatches_calculator()

    return _outcome(run)


def op_loader_over_ready_loader(dataloader_type: str) -> dict:
    """The release's ``build_pretraining_data_loader`` handed a ready torch DataLoader (what the Energon
    builder returns: Energon's loaders subclass it), then the first batch drawn."""
    import torch
    from torch.utils.data import DataLoader

    from megatron.bridge.data.samplers import build_pretraining_data_loader

    ready = DataLoader([torch.zeros(4) for _ in range(8)], batch_size=1)

    def run():
        loader = build_pretraining_data_loader(ready, 0, dataloader_type, 1, 0, True, data_parallel_rank=0,
                                               data_parallel_size=1, global_batch_size=1, drop_last=True, seed=0)
        next(iter(loader))

    os.environ.setdefault("WORLD_SIZE", "1")
    return _outcome(run)

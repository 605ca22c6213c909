"""Lane ops for packed readers: Megatron-Bridge 0.6.2's ``GPTSFTPackedParquetDataset``, its ``collate_fn``,
``get_packed_seq_params`` on the batches, and its statistics of a packed file, run as is.

Runs in the upstream interpreter (see ``worker.py``); never imports seqpack. Every op takes a list
of cases and answers one result per case. Tensors travel in ``_thd_codec``'s JSON form; a case that
makes the upstream code raise answers ``{"raises": True, "type", "message"}``.
"""

from __future__ import annotations

import dataclasses
import logging

from _thd_codec import encode, raised

logging.getLogger("megatron.bridge").setLevel(logging.ERROR)


def _dataset(case: dict):
    """The packed dataset Bridge's builder makes for a packed Parquet path (``build_gpt_sft_split``)."""
    from megatron.bridge.data.builders.gpt_sft import build_gpt_sft_split

    import _bridge_tokenizers

    return build_gpt_sft_split(
        case["path"],
        tokenizer=_bridge_tokenizers.bridge_tokenizer(case["tokenizer"], case.get("eod")),
        seq_length=case["seq_length"],
        memmap_workers=1,
        seed=case.get("seed", 1234),
        packed_sequence_size=case["packed_sequence_size"],
        pack_metadata_path=case.get("metadata_path"),
        pad_cu_seqlens=case.get("pad_cu_seqlens", False),
        pad_seq_to_mult=case.get("pad_seq_to_mult"),
        dataset_kwargs=case.get("dataset_kwargs"),
    )


def _params(batch: dict) -> dict:
    """``get_packed_seq_params`` of a one-row batch, every dataclass field in JSON form."""
    from megatron.bridge.training.utils.packed_seq_utils import get_packed_seq_params

    params = get_packed_seq_params(batch)
    return {f.name: encode(getattr(params, f.name)) for f in dataclasses.fields(params)}


def op_collate(cases: list[dict]) -> list[dict]:
    """Build the dataset of each case and collate its ``batches`` (lists of indices, negative = padding).

    A case: ``path`` (packed Parquet), ``tokenizer`` (HF folder), ``seq_length``,
    ``packed_sequence_size``, ``metadata_path``, ``pad_cu_seqlens``, ``pad_seq_to_mult``, ``seed``,
    ``dataset_kwargs`` (e.g. ``pad_to_max_length``, ``pad_seq_length_to_mult``, ``ceil_to_power_2``,
    ``return_cu_seqlen``, ``answer_only_loss``, ``max_num_samples``), ``batches`` and ``params``
    (also answer ``get_packed_seq_params`` of every one-row batch). Answers ``len`` (the dataset's
    length), ``order`` (the physical row of every index, from ``samples_mapping``), ``batches``
    (each collated batch, or the upstream error) and ``params``.
    """
    out = []
    for case in cases:
        try:
            ds = _dataset(case)
        except Exception as exc:  # noqa: BLE001 - an upstream failure is this case's answer
            out.append(raised(exc))
            continue
        mapping = getattr(ds, "samples_mapping", None)
        answer = {"raises": False, "len": len(ds), "order": None if mapping is None else [int(i) for i in mapping],
                  "batches": [], "params": []}
        for indices in case.get("batches", []):
            try:
                batch = ds.collate_fn([ds[i] for i in indices])
            except Exception as exc:  # noqa: BLE001
                answer["batches"].append(raised(exc))
                answer["params"].append(None)
                continue
            answer["batches"].append({k: encode(v) for k, v in batch.items()})
            if case.get("params") and "cu_seqlens_q" in batch and len(indices) == 1:
                try:
                    answer["params"].append(_params(batch))
                except Exception as exc:  # noqa: BLE001
                    answer["params"].append(raised(exc))
            else:
                answer["params"].append(None)
        out.append(answer)
    return out


def op_statistics(cases: list[dict]) -> list[dict]:
    """``megatron.bridge.data.packing.algorithms.calculate_avg_seqlen`` of a packed file per case.

    A case: ``path``, ``gbs``, ``max_seq_len``, ``drop_remainder``. Answers the four averages.
    """
    from megatron.bridge.data.packing.algorithms import calculate_avg_seqlen

    out = []
    for case in cases:
        try:
            values = calculate_avg_seqlen(case["path"], case["gbs"], case["max_seq_len"], case["drop_remainder"])
        except Exception as exc:  # noqa: BLE001
            out.append(raised(exc))
            continue
        keys = ("avg_seqlen_count", "avg_seqlen_total", "avg_seqlen_sq_individual", "avg_seqlen_sq_per_row")
        out.append({"raises": False, **dict(zip(keys, (float(v) for v in values)))})
    return out

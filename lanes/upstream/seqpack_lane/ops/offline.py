"""Lane ops for offline packing: Megatron-Bridge 0.6.2's own preparation and bin-packing code, run as is.

Runs in the upstream interpreter (see ``worker.py``); never imports seqpack. Every op takes a list
of cases and answers one result per case, so a test sends few requests. A case that makes the
upstream code raise answers ``{"raises": True, "type": ..., "message": ...}`` instead of failing the
whole request. Bulk data travels as files: the JSONL the preparation reads, the packed Parquet it
writes, the metadata JSON array it appends to.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
from _thd_codec import raised

logging.getLogger("megatron.bridge").setLevel(logging.ERROR)
os.environ.setdefault("TQDM_DISABLE", "1")


def op_make_wordlevel_tokenizer(folder: str, words: list[str], specials: dict) -> dict:
    """Save a WordLevel tokenizer over ``words`` (whitespace pre-tokenizer) with ``save_pretrained``.

    ``specials`` maps ``bos_token``/``eos_token``/``pad_token``/``unk_token`` to token strings; they
    get the first ids. Returns the ids Bridge reads after loading the folder back with its own
    ``build_tokenizer``.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    import _bridge_tokenizers

    names = [specials[k] for k in ("pad_token", "bos_token", "eos_token", "unk_token") if specials.get(k)]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(names + list(words)))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials.get("unk_token")))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, **{k: v for k, v in specials.items() if v})
    Path(folder).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(folder)
    return _bridge_tokenizers.describe(_bridge_tokenizers.bridge_tokenizer(folder))


def op_tokenizer_info(folder: str, eod: int | None = None) -> dict:
    """The ids Bridge's data code reads from the tokenizer ``build_tokenizer`` makes of ``folder``."""
    import _bridge_tokenizers

    return _bridge_tokenizers.describe(_bridge_tokenizers.bridge_tokenizer(folder, eod))


def _dataset_kwargs(kwargs: dict | None) -> dict | None:
    """JSON dataset_kwargs -> Bridge's: a ``prompt_completion_config`` dict becomes the dataclass."""
    if kwargs is None:
        return None
    out = dict(kwargs)
    pc = out.get("prompt_completion_config")
    if isinstance(pc, dict):
        from megatron.bridge.data.sft_processing import PromptCompletionSFTPreprocessingConfig

        out["prompt_completion_config"] = PromptCompletionSFTPreprocessingConfig(**pc)
    return out


def op_prepare(cases: list[dict]) -> list[dict]:
    """``megatron.bridge.data.packing.offline.prepare_gpt_sft_packed_data`` once per case.

    A case holds the function's arguments (paths as strings; ``tokenizer``: an HF tokenizer folder,
    ``eod``: optional distinct end-of-document id) and always uses Bridge's own dataset builder,
    ``megatron.bridge.data.builders.gpt_sft.build_gpt_sft_split``, with one tokenizer worker unless the
    case sets ``num_tokenizer_workers``.
    Answers ``{"raises": False, "metadata": <the metadata file's JSON after the call>}``; the packed
    rows are in ``output_path`` (Parquet when it ends in ``.parquet``, as Bridge writes it).
    """
    from megatron.bridge.data.builders.gpt_sft import build_gpt_sft_split
    from megatron.bridge.data.packing.offline import prepare_gpt_sft_packed_data

    import _bridge_tokenizers

    out = []
    for case in cases:
        metadata = case.get("output_metadata_path")
        try:
            prepare_gpt_sft_packed_data(
                input_path=Path(case["input_path"]),
                output_path=Path(case["output_path"]),
                output_metadata_path=None if metadata is None else Path(metadata),
                packed_sequence_size=case["packed_sequence_size"],
                tokenizer=_bridge_tokenizers.bridge_tokenizer(case["tokenizer"], case.get("eod")),
                max_seq_length=case["max_seq_length"],
                seed=case.get("seed", 0),
                packing_algorithm=case.get("packing_algorithm", "first_fit_shuffle"),
                dataset_kwargs=_dataset_kwargs(case.get("dataset_kwargs")),
                pad_seq_to_mult=case.get("pad_seq_to_mult", 1),
                num_tokenizer_workers=case.get("num_tokenizer_workers", 1),
                dataset_builder=build_gpt_sft_split,
            )
        except Exception as exc:  # noqa: BLE001 - an upstream failure is this case's answer
            out.append(raised(exc))
            continue
        answer: dict = {"raises": False, "metadata": None}
        if metadata is not None:
            answer["metadata"] = json.loads(Path(metadata).read_text())
        out.append(answer)
    return out


def op_builder_prepare(cases: list[dict]) -> list[dict]:
    """A ``GPTSFTDatasetConfig`` as a recipe writes it, prepared and built by Bridge's ``GPTSFTDatasetBuilder``.

    A case gives ``dataset_root`` (holding ``training.jsonl`` and ``validation.jsonl``),
    ``tokenizer``, ``seq_length``, ``seed``, ``preprocessing`` (PromptCompletionSFTPreprocessingConfig
    fields), ``specs`` (PackedSequenceSpecs fields) and ``dataset_kwargs``. Answers the packed files'
    and the metadata file's paths, and the metadata.
    """
    from megatron.bridge.data.builders.gpt_sft import GPTSFTDatasetBuilder, GPTSFTDatasetConfig
    from megatron.bridge.data.packing.config import PackedSequenceSpecs
    from megatron.bridge.data.sft_processing import PromptCompletionSFTPreprocessingConfig

    import _bridge_tokenizers

    out = []
    for case in cases:
        try:
            config = GPTSFTDatasetConfig(
                seq_length=case["seq_length"], dataset_root=case["dataset_root"], seed=case["seed"],
                preprocessing=PromptCompletionSFTPreprocessingConfig(**case["preprocessing"]),
                enable_offline_packing=True, offline_packing_specs=PackedSequenceSpecs(**case["specs"]),
                dataset_kwargs=case.get("dataset_kwargs"), do_test=False,
            )
            builder = GPTSFTDatasetBuilder(config, _bridge_tokenizers.bridge_tokenizer(case["tokenizer"]))
            builder.prepare_data()
        except Exception as exc:  # noqa: BLE001
            out.append(raised(exc))
            continue
        out.append({
            "raises": False,
            "training": str(builder.train_path_packed),
            "validation": str(builder.validation_path_packed),
            "metadata_path": str(builder.pack_metadata),
            "metadata": json.loads(Path(builder.pack_metadata).read_text()),
        })
    return out


def op_algorithms(cases: list[dict]) -> list[dict]:
    """``megatron.bridge.data.packing.algorithms`` functions, one call per case.

    ``{"fn": "first_fit" | "first_fit_decreasing" | "first_fit_shuffle", "seqlens", "pack_size", "seed"?}``
    answers ``{"bins"}``; ``{"fn": "create_packing_strategy", "histogram", "pack_size", "algorithm"?,
    "seed"?}`` answers ``{"bins", "metadata"}``; ``{"fn": "pack_and_fill", "lengths", "pack_size",
    "algorithm", "seed"}`` runs ``create_hist`` + ``create_packing_strategy`` + ``fill_packing_strategy``
    on samples whose token ids name their dataset index, as the preparation does between its seed and
    restore, and answers ``{"rows": [[sample index per segment] per row], "metadata"}``. A seed is
    applied to the global numpy RNG (as Bridge's preparation does) and the caller's state restored.
    """
    from megatron.bridge.data.packing import algorithms as alg

    import _bridge_packing

    out = []
    for case in cases:
        state = np.random.get_state()
        if case.get("seed") is not None:
            np.random.seed(case["seed"])
        try:
            fn = case["fn"]
            if fn in ("first_fit", "first_fit_decreasing", "first_fit_shuffle"):
                out.append({"raises": False, "bins": getattr(alg, fn)(list(case["seqlens"]), case["pack_size"])})
            elif fn == "create_packing_strategy":
                args = [list(case["histogram"]), case["pack_size"]]
                if case.get("algorithm") is not None:
                    args.append(case["algorithm"])
                bins, metadata = alg.create_packing_strategy(*args)
                out.append({"raises": False, "bins": bins, "metadata": metadata})
            elif fn == "pack_and_fill":
                done = _bridge_packing.pack_and_fill(_bridge_packing.stand_in_samples(case["lengths"]), case["pack_size"],
                                                     case["algorithm"], None, case.get("max_seq_length"))
                out.append({"raises": False, "metadata": done["metadata"],
                            "rows": _bridge_packing.sample_rows(done["packed"])})
            else:
                raise KeyError(f"unknown algorithms case {fn!r}")
        except Exception as exc:  # noqa: BLE001
            out.append(raised(exc))
        finally:
            np.random.set_state(state)
    return out

"""Lane ops: Megatron-Bridge's in-batch THD builders and its prompt/completion collator.

Each op reads a JSON list of cases from ``path`` and writes one answer per case to ``out``
(``_thd_codec``): the batch Bridge built, or ``{"raises": true, "type", "message"}``.

* ``in_batch.rows``: ``megatron.bridge.data.packing.in_batch.build_mcore_thd_sequence_batch_from_rows``;
* ``in_batch.right_padded``: ``pack_right_padded_sequence_batch_to_mcore_thd`` (the batch it mutates);
* ``in_batch.prompt_completion``: ``megatron.bridge.data.collators.sft.text_prompt_completion_collate_fn``
  with ``enable_in_batch_packing=True``, over a local Hugging Face tokenizer folder.
"""

from __future__ import annotations

from typing import Any

from _thd_codec import decode, encode, run_cases

_TOKENIZERS: dict[str, Any] = {}


def op_rows(path: str, out: str) -> int:
    """``build_mcore_thd_sequence_batch_from_rows(rows, **kwargs)`` for every case ``{"rows", "kwargs"}``."""
    from megatron.bridge.data.packing.in_batch import build_mcore_thd_sequence_batch_from_rows

    def one(case: dict) -> dict:
        return {"batch": encode(build_mcore_thd_sequence_batch_from_rows(decode(case["rows"]), **case["kwargs"]))}

    return run_cases(path, out, one)


def op_right_padded(path: str, out: str) -> int:
    """``pack_right_padded_sequence_batch_to_mcore_thd(batch, **kwargs)`` for every case ``{"batch", "kwargs"}``;
    the answer is the mutated batch."""
    from megatron.bridge.data.packing.in_batch import pack_right_padded_sequence_batch_to_mcore_thd

    def one(case: dict) -> dict:
        batch = decode(case["batch"])
        pack_right_padded_sequence_batch_to_mcore_thd(batch, **case["kwargs"])
        return {"batch": encode(batch)}

    return run_cases(path, out, one)


def _tokenizer(folder: str) -> Any:
    if folder not in _TOKENIZERS:
        from transformers import PreTrainedTokenizerFast

        _TOKENIZERS[folder] = PreTrainedTokenizerFast.from_pretrained(folder)
    return _TOKENIZERS[folder]


def op_prompt_completion(path: str, out: str, tokenizer_dir: str) -> int:
    """``text_prompt_completion_collate_fn(examples, tokenizer, preprocessing=..., enable_in_batch_packing=True,
    **kwargs)`` for every case ``{"examples", "preprocessing", "kwargs"}``."""
    from megatron.bridge.data.collators.sft import text_prompt_completion_collate_fn
    from megatron.bridge.data.sft_processing import PromptCompletionSFTPreprocessingConfig

    tokenizer = _tokenizer(tokenizer_dir)

    def one(case: dict) -> dict:
        batch = text_prompt_completion_collate_fn(
            case["examples"], tokenizer, preprocessing=PromptCompletionSFTPreprocessingConfig(**case["preprocessing"]),
            enable_in_batch_packing=True, **case["kwargs"])
        return {"batch": encode(batch)}

    return run_cases(path, out, one)

"""Tokenizers for lane ops: built by Megatron-Bridge's own ``build_tokenizer`` from a local folder, cached.

Runs in the upstream interpreter (megatron-bridge 0.6.2, megatron-core 0.19.2); not an op module
(files starting with ``_`` are not scanned). Ops pass a folder holding a Hugging Face tokenizer
(``tokenizer.json`` + ``tokenizer_config.json``); the same files are what seqpack loads.
"""

from __future__ import annotations

_CACHE: dict[tuple[str, int | None], object] = {}


class _EodTokenizer:
    """A Megatron tokenizer whose end-of-document id differs from its EOS (as MCore's NullTokenizer has).

    Every attribute is the wrapped tokenizer's except ``eod``; Bridge's offline preparation pre-pads
    with ``eod`` and fills with ``eos_id``, so this input separates the two.
    """

    def __init__(self, inner: object, eod: int) -> None:
        self._inner = inner
        self._eod = int(eod)

    @property
    def eod(self) -> int:
        return self._eod

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def bridge_tokenizer(folder: str, eod: int | None = None):
    """``megatron.bridge.training.tokenizers.tokenizer.build_tokenizer`` of an HF tokenizer folder (cached)."""
    key = (str(folder), eod)
    if key not in _CACHE:
        base = _CACHE.get((str(folder), None))
        if base is None:
            from megatron.bridge.training.tokenizers.config import TokenizerConfig
            from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer

            base = build_tokenizer(TokenizerConfig(tokenizer_type="HuggingFaceTokenizer", tokenizer_model=str(folder)))
            _CACHE[(str(folder), None)] = base
        _CACHE[key] = base if eod is None else _EodTokenizer(base, eod)
    return _CACHE[key]


def describe(tokenizer) -> dict:
    """The ids Bridge's data code reads from a tokenizer."""
    out = {}
    for name in ("eos_id", "eod", "bos_id", "pad_id", "vocab_size"):
        try:
            value = getattr(tokenizer, name)
        except (AttributeError, NotImplementedError):
            value = None
        out[name] = None if value is None else int(value)
    return out

"""Data layer: lazy JSONL access, row schemas, tokenizers, row tokenization and the demo data.

Names are imported lazily: ``seqpack.data.jsonl`` (or any one module) loads without the
others, and numpy only comes with the modules that use it (the Hugging Face tokenizer adapter
loads ``tokenizers``/``jinja2`` on use).
"""

from __future__ import annotations

from seqpack.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "demo_path": "demo",
    "JsonlFile": "jsonl",
    "build_line_index": "jsonl",
    "file_fingerprint": "jsonl",
    "RowLocation": "location",
    "at_row": "location",
    "REASONS": "rejections",
    "SampleRejected": "rejections",
    "ChatSchema": "schemas",
    "Message": "schemas",
    "PromptCompletionSchema": "schemas",
    "default_schema": "schemas",
    "detect_schema": "schemas",
    "TokenizedBatch": "tokenize",
    "TokenizedSample": "tokenize",
    "TrainingExample": "tokenize",
    "to_training_example": "tokenize",
    "tokenize_batch": "tokenize",
    "tokenize_row": "tokenize",
    "ByteTokenizer": "tokenizers",
    "ChatRendering": "tokenizers",
    "HFTokenizer": "tokenizers",
    "Tokenizer": "tokenizers",
    "load_tokenizer": "tokenizers",
    "tokenizer_label": "tokenizers",
    "byte_tokenizer_warning": "tokenizers",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

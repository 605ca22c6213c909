"""Data layer: lazy JSONL access, row schemas, tokenizers, row tokenization and the demo data.

Imports only numpy (the Hugging Face tokenizer adapter loads ``tokenizers``/``jinja2`` on use).
"""

from reference_impl.data.demo import demo_path
from reference_impl.data.jsonl import JsonlFile, build_line_index, file_fingerprint
from reference_impl.data.location import RowLocation, at_row
from reference_impl.data.rejections import REASONS, SampleRejected
from reference_impl.data.schemas import ChatSchema, Message, PromptCompletionSchema, default_schema, detect_schema
from reference_impl.data.tokenize import (
    TokenizedBatch,
    TokenizedSample,
    TrainingExample,
    to_training_example,
    tokenize_batch,
    tokenize_row,
)
from reference_impl.data.tokenizers import ByteTokenizer, ChatRendering, HFTokenizer, Tokenizer, load_tokenizer

__all__ = [
    "REASONS",
    "ByteTokenizer",
    "ChatRendering",
    "ChatSchema",
    "HFTokenizer",
    "JsonlFile",
    "Message",
    "PromptCompletionSchema",
    "RowLocation",
    "SampleRejected",
    "TokenizedBatch",
    "TokenizedSample",
    "Tokenizer",
    "TrainingExample",
    "at_row",
    "build_line_index",
    "default_schema",
    "demo_path",
    "detect_schema",
    "file_fingerprint",
    "load_tokenizer",
    "to_training_example",
    "tokenize_batch",
    "tokenize_row",
]

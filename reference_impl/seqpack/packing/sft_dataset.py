"""Lazy map-style dataset over an SFT JSONL file, and an optional one-pass scan for rejected rows.

:class:`SFTJsonlDataset` keeps only the line index of the file (three int64 numbers per row) and a
read-only file that every process opens on first use. ``dataset[i]`` reads the bytes of row ``i``,
parses them, tokenizes them with ``max_length=seq_length`` under the truncation policy and
applies the next-token shift (:func:`seqpack.data.tokenize.to_training_example`). Nothing
materialises the dataset; the object pickles without its open file, so DataLoader workers get a copy
cheaply.

**Row length.** Tokenization bounds a sample to ``seq_length`` ids, so a training row (after the
shift) has at most ``seq_length - 1`` tokens. Differs from Bridge: Bridge's text collators keep all
``n`` ids and put the ignore label on the last one; here that last position, which trains nothing,
is dropped. The trained labels are the same.

**Rows longer than seq_length** follow the tokenization policy ``truncation``: ``"right"``
(default, keeps the head, as Bridge's tokenizer call does) or ``"left"`` (keeps the tail;
prompt/completion only) cut the row and flag it: the item carries ``truncated=True`` and its
``original_length``, the collator lists the row in the batch's ``pack_info.truncated_rows``, and
the first truncation of each process is logged as a warning. ``"reject"`` turns such a row into a
rejected sample (below).

**Rejected rows** (:class:`~seqpack.data.rejections.SampleRejected`: empty completion, no
assistant turn, nothing supervised, too long under ``"reject"``, ...) are never dropped silently:

* by default ``dataset[i]`` raises the rejection, which names the file, physical line, row index,
  field (when known) and reason, so the DataLoader stops on it;
* to train around them, run :func:`scan_rows` once: it tokenizes every row, returns the usable row
  indices and lists every rejected row with its reason (a :class:`RowScan`). Passing that scan to
  the loader builder restricts the samplers to the usable rows, so every input row is either
  trained or listed. The scan costs one tokenization pass and O(rejected rows) memory.

Malformed rows (bad JSON, missing or wrong-typed fields, bad UTF-8) are input errors, not
rejections: they always raise, with file, line, row and field.

**VLM rows.** With ``vision`` (a preset name such as ``"qwen2_vl"``, a
:class:`~seqpack.data.vlm.vision.VisionSpec` or :class:`~seqpack.data.vlm.sample.VLMSettings`)
every row follows the VLM sample contract (:mod:`seqpack.data.vlm.sample`): images and videos
(paths relative to the JSONL file) are decoded and patchified, markers expanded into vision tokens,
and the item carries ``visuals`` (its :class:`~seqpack.data.vlm.vision.VisualItem` s in token
order); rows without images are ordinary samples with no visuals. A VLM row is never truncated
(longer than ``seq_length`` after expansion is a ``too_long`` rejection). Without ``vision`` a row
that carries images is an input error, never silently trained as text.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch.utils.data

from seqpack.core.arguments import positive_int
from seqpack.data import (
    JsonlFile,
    SampleRejected,
    default_schema,
    detect_schema,
    load_tokenizer,
    to_training_example,
    tokenize_row,
)
from seqpack.data.schemas import ChatSchema, PromptCompletionSchema, Schema
from seqpack.data.location import RowLocation
from seqpack.data.rows import open_rows
from seqpack.data.tokenize import TRUNCATION_POLICIES, TokenizedSample, check_truncation
from seqpack.data.tokenizers import Tokenizer
from seqpack.data.vlm.vision import VisionSpec
from seqpack.data.vlm.sample import VLMExample, VLMSettings, tokenize_vlm_row
from seqpack.core.errors import ArtifactError, UsageError

log = logging.getLogger(__name__)

__all__ = ["RejectedRow", "RowScan", "SFTJsonlDataset", "scan_rows"]

_LISTED_REJECTIONS = 20  # rejected rows quoted by RowScan.to_dict()


def _resolve_schema(schema: Schema | str | None, first_row: dict[str, Any]) -> Schema:
    if schema is None:
        return default_schema(detect_schema(first_row))
    if isinstance(schema, str):
        return default_schema(schema)
    if isinstance(schema, (PromptCompletionSchema, ChatSchema)):
        return schema
    raise UsageError(
        f"schema must be None, 'prompt_completion', 'chat' or a schema object, got {type(schema).__name__}",
        field="schema",
    )


class SFTJsonlDataset(torch.utils.data.Dataset):
    """Map-style dataset: ``dataset[i]`` is the shifted training example of JSONL row ``i``.

    ``source`` is a path (JSONL, Parquet or a ``datasets`` folder, :func:`~seqpack.data.rows.open_rows`) or an
    open row source such as :class:`~seqpack.data.jsonl.JsonlFile`. ``schema``:
    ``None`` detects it from row 0, or pass ``"prompt_completion"``/``"chat"`` or a schema
    object. ``tokenizer``: anything :func:`~seqpack.data.tokenizers.load_tokenizer`
    accepts (default: the byte tokenizer). ``seq_length`` is the tokenization ``max_length``.

    An item is a dict: ``tokens`` int64 ``[n]``, ``labels`` int64 ``[n]``, ``loss_mask`` float32
    ``[n]`` (numpy), ``row_index`` (int), ``original_length`` (ids before truncation) and
    ``truncated`` (bool); with ``vision`` also ``visuals``. See the module docstring for
    truncation, rejected rows and VLM rows.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | JsonlFile,
        *,
        seq_length: int,
        tokenizer: str | os.PathLike[str] | Tokenizer | None = None,
        schema: Schema | str | None = None,
        truncation: str = "right",
        cache_dir: str | os.PathLike[str] | None = None,
        vision: str | VisionSpec | VLMSettings | None = None,
    ) -> None:
        positive_int("seq_length", seq_length, minimum=2)
        if truncation not in TRUNCATION_POLICIES:
            raise UsageError(
                f"unknown truncation {truncation!r}; choose one of {', '.join(TRUNCATION_POLICIES)}",
                field="truncation",
            )
        self.file = source if hasattr(source, "rows") else open_rows(source, cache_dir=cache_dir)
        self.seq_length = seq_length
        self.tokenizer = load_tokenizer(tokenizer)
        self.schema = _resolve_schema(schema, self.file.row(0) if schema is None else {})
        check_truncation(truncation, self.schema.kind)
        self.truncation = truncation
        self._warned_truncation = False
        if vision is None or isinstance(vision, VLMSettings):
            self.vlm = vision
        else:
            self.vlm = VLMSettings.create(vision, self.tokenizer)

    @property
    def path(self) -> str:
        """The JSONL file's path."""
        return str(self.file.path)

    def __len__(self) -> int:
        return len(self.file)

    def tokenize(self, i: int) -> TokenizedSample:
        """Row ``i`` as a :class:`~seqpack.data.tokenize.TokenizedSample` (before the shift).

        Raises InputError (malformed row) or SampleRejected, both naming file, line and row.
        """
        return self._tokenize_at(self.file.location(i))

    def _tokenize_at(self, location: RowLocation) -> TokenizedSample:
        if self.vlm is not None:
            ex = self.vlm_example(location.row)
            ids = np.concatenate([ex.tokens, ex.labels[-1:]])
            mask = np.concatenate([[0], ex.loss_mask]).astype(np.int8)
            return TokenizedSample(ids, mask, self.schema.kind, 0, ex.original_length, False)
        return tokenize_row(
            self.file.row(location.row),
            self.schema,
            self.tokenizer,
            max_length=self.seq_length,
            truncation=self.truncation,
            location=location,
        )

    def vlm_example(self, i: int) -> VLMExample:
        """Row ``i`` under the VLM sample contract (needs ``vision``)."""
        if self.vlm is None:
            raise UsageError("this dataset has no vision spec", field="vision")
        location = self.file.location(i)
        return tokenize_vlm_row(
            self.file.row(location.row), self.schema, self.tokenizer, vision=self.vlm.vision,
            vision_tokens=self.vlm.tokens, max_length=self.seq_length, base_dir=self.file.path.parent,
            location=location,
        )

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.vlm is not None:
            ex = self.vlm_example(i)
            return {"tokens": ex.tokens, "labels": ex.labels, "loss_mask": ex.loss_mask,
                    "row_index": self.file.location(i).row, "original_length": ex.original_length,
                    "truncated": False, "visuals": ex.visuals}
        location = self.file.location(i)
        sample = self._tokenize_at(location)
        row = location.row
        if sample.truncated and not self._warned_truncation:
            self._warned_truncation = True
            log.warning(
                "%s: %d ids cut to seq_length=%d by truncation=%r; further truncations "
                "are listed in each batch's pack_info.truncated_rows",
                location, sample.original_length, self.seq_length, self.truncation,
            )
        example = to_training_example(sample)
        return {
            "tokens": example.tokens,
            "labels": example.labels,
            "loss_mask": example.loss_mask,
            "row_index": row,
            "original_length": sample.original_length,
            "truncated": sample.truncated,
        }

    def signature(self) -> dict[str, Any]:
        """What a :class:`RowScan` must match to be reused: file identity and tokenization settings."""
        return {
            "file": self.path,
            "fingerprint": self.file.identity(),
            "rows": len(self),
            "seq_length": self.seq_length,
            "tokenizer": self.tokenizer.fingerprint(),
            "schema": self.schema.to_dict(),
            "truncation": self.truncation,
            **({"vlm": self.vlm.to_dict()} if self.vlm is not None else {}),
        }

    def __repr__(self) -> str:
        return (
            f"SFTJsonlDataset({self.path!r}, rows={len(self)}, schema={self.schema.kind}, "
            f"seq_length={self.seq_length}, tokenizer={self.tokenizer.name})"
        )


@dataclass(frozen=True)
class RejectedRow:
    """One row :func:`scan_rows` found unusable: where it is and why."""

    row: int
    line: int
    reason: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"row": self.row, "line": self.line, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class RowScan:
    """Result of :func:`scan_rows`: usable row indices, every rejected row, truncation counts.

    ``len(usable) + len(rejected) == rows`` always holds.
    """

    signature: dict[str, Any]
    rows: int
    usable: np.ndarray = field(repr=False)
    rejected: tuple[RejectedRow, ...]
    truncated_rows: int
    truncated_tokens: int

    @property
    def rejected_by_reason(self) -> dict[str, int]:
        """Rejected row counts per reason."""
        return dict(sorted(Counter(r.reason for r in self.rejected).items()))

    def check_matches(self, dataset: SFTJsonlDataset) -> None:
        """Raise ArtifactError when this scan was made for another file or other settings."""
        current = dataset.signature()
        if current != self.signature:
            changed = sorted(k for k in current if current[k] != self.signature.get(k))
            raise ArtifactError(
                f"row scan is stale or foreign: {', '.join(changed)} differ from the dataset's",
                file=dataset.path, fix="run scan_rows(dataset) again",
            )

    def to_dict(self) -> dict[str, Any]:
        """Counts, the first rejected rows and the signature (not the full usable index list)."""
        return {
            "rows": self.rows,
            "usable": int(self.usable.size),
            "rejected": len(self.rejected),
            "rejected_by_reason": self.rejected_by_reason,
            "first_rejected": [r.to_dict() for r in self.rejected[:_LISTED_REJECTIONS]],
            "truncated_rows": self.truncated_rows,
            "truncated_tokens": self.truncated_tokens,
            "signature": self.signature,
        }


def scan_rows(dataset: SFTJsonlDataset) -> RowScan:
    """Tokenize every row once; return the usable rows and every rejected one with its reason.

    Malformed rows still raise (InputError with file, line, row and field). Memory: the usable
    index array (8 bytes per row) plus the rejected rows; the file itself is read row by row.
    """
    usable = np.empty(len(dataset), dtype=np.int64)
    kept = 0
    rejected: list[RejectedRow] = []
    truncated_rows = truncated_tokens = 0
    for i in range(len(dataset)):
        try:
            sample = dataset.tokenize(i)
        except SampleRejected as exc:
            rejected.append(RejectedRow(i, dataset.file.line_number(i), exc.reason, exc.message))
            continue
        usable[kept] = i
        kept += 1
        if sample.truncated:
            truncated_rows += 1
            truncated_tokens += sample.num_truncated
    if rejected:
        counts = Counter(r.reason for r in rejected)
        log.warning(
            "%s: %d of %d rows rejected (%s); they are excluded from sampling and listed in the scan",
            dataset.path, len(rejected), len(dataset),
            ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
        )
    return RowScan(
        signature=dataset.signature(),
        rows=len(dataset),
        usable=usable[:kept].copy(),
        rejected=tuple(rejected),
        truncated_rows=truncated_rows,
        truncated_tokens=truncated_tokens,
    )

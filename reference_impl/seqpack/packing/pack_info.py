"""Padding accounting of packed micro-batches: per batch (:class:`PackInfo`) and running totals.

Pure Python (no torch): the in-batch collator attaches a :class:`PackInfo` to every batch it
builds, and ``seqpack batches`` reports them. Derived counts are fields (set on construction), so
the JSON form is exactly the public fields (:class:`~seqpack.core.results.Result`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seqpack.core.results import Result

__all__ = ["PackInfo", "PaddingTotals"]


@dataclass(frozen=True)
class PackInfo(Result):
    """Padding accounting of one packed micro-batch.

    ``rows``: dataset row indices in packing order (positions in the micro-batch when the items
    carry no ``row_index``); ``lengths``: real tokens per row; ``aligned_lengths``: the lengths
    rounded up to ``pad_seq_to_mult``; ``width``: positions of the packed row.
    ``alignment_padding = sum(aligned) - sum(lengths)`` and ``width_padding = width -
    sum(aligned)`` (fixed-width slack); ``padding_share`` is the share of the width that is
    padding. ``truncated_rows``: rows cut by the tokenization policy.
    """

    rows: tuple[int, ...]
    lengths: tuple[int, ...]
    aligned_lengths: tuple[int, ...]
    pad_seq_to_mult: int
    width: int
    truncated_rows: tuple[int, ...] = ()
    real_tokens: int = field(init=False, default=0)
    alignment_padding: int = field(init=False, default=0)
    width_padding: int = field(init=False, default=0)
    padding_share: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        real = sum(self.lengths)
        aligned = sum(self.aligned_lengths)
        object.__setattr__(self, "real_tokens", real)
        object.__setattr__(self, "alignment_padding", aligned - real)
        object.__setattr__(self, "width_padding", self.width - aligned)
        object.__setattr__(self, "padding_share", 1.0 - real / self.width if self.width else 0.0)


@dataclass
class PaddingTotals(Result):
    """Running totals over packed micro-batches (feed it each batch's ``pack_info``)."""

    batches: int = 0
    rows: int = 0
    real_tokens: int = 0
    alignment_padding: int = 0
    width_padding: int = 0
    truncated_rows: int = 0
    max_width: int = 0
    positions: int = field(init=False, default=0)
    padding_share: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._derive()

    def _derive(self) -> None:
        self.positions = self.real_tokens + self.alignment_padding + self.width_padding
        self.padding_share = 0.0 if not self.positions else 1.0 - self.real_tokens / self.positions

    def add(self, info: PackInfo) -> None:
        """Count one micro-batch."""
        self.batches += 1
        self.rows += len(info.rows)
        self.real_tokens += info.real_tokens
        self.alignment_padding += info.alignment_padding
        self.width_padding += info.width_padding
        self.truncated_rows += len(info.truncated_rows)
        self.max_width = max(self.max_width, info.width)
        self._derive()

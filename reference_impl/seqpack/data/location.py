"""Where an input row came from, and a helper that stamps that place onto errors.

Pure functions (schema extraction, tokenization) raise errors that name the *field*; only the
caller knows the file, physical line and row index. :func:`at_row` (or :func:`stamp`) fills those in on the way out,
without overwriting anything the error already knows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from seqpack.core.errors import SeqpackError


@dataclass(frozen=True)
class RowLocation:
    """File, 1-based physical line and 0-based row index of one input row (any part may be unknown)."""

    file: str | None = None
    line: int | None = None
    row: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)

    def __str__(self) -> str:
        """``file:line (row N)``, or ``file (row N)`` for rows without a line (Parquet, Arrow)."""
        head = str(self.file or "?") + ("" if self.line is None else f":{self.line}")
        return head if self.row is None else f"{head} (row {self.row})"


@contextmanager
def at_row(location: RowLocation | None) -> Iterator[None]:
    """Add ``location``'s file/line/row to any :class:`SeqpackError` raised inside the block.

    Parts the error already carries are kept; ``None`` means "no location to add".
    """
    try:
        yield
    except SeqpackError as err:
        stamp(err, location)
        raise


def stamp(err: SeqpackError, location: RowLocation | None) -> SeqpackError:
    """Fill in the parts of ``location`` that ``err`` does not carry yet; returns ``err``.

    An error that names another file (a tokenizer's, a chat template's) keeps its own place: a
    row's line number would point into the wrong file.
    """
    if location is not None:
        if err.file is not None and location.file is not None and err.file != str(location.file):
            return err
        if err.file is None and location.file is not None:
            err.file = str(location.file)
        if err.line is None:
            err.line = location.line
        if err.row is None:
            err.row = location.row
    return err

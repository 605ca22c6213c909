"""The schema of an input file when the options ask for one that only a file can tell (its first row).

Kept apart from :mod:`seqpack.data.schemas` (pure: no file access) because reading the first row needs
the row readers (:mod:`seqpack.data.rows`) and the VLM row normalization (:mod:`seqpack.data.vlm.sample`).
"""

from __future__ import annotations

from typing import Any

from seqpack.data.schemas import Schema, detect_schema, schema_from_options

__all__ = ["schema_for_file"]


def schema_for_file(
    kind: str, path: str | Any, *, prompt_column: str = "prompt", completion_column: str = "completion",
    loss_mode: str | None = None, reasoning: str | None = None, on_template_error: str | None = None,
) -> Schema | None:
    """:func:`~seqpack.data.schemas.schema_from_options`, except that ``auto`` with an option of one schema only
    (a loss mode, a reasoning policy, skipping template errors) takes the schema detected from the first row of
    ``path`` (JSONL, Parquet or a datasets folder) instead of asking for ``--schema``; None still means "detect
    from the first row"."""
    chat_only = reasoning is not None or on_template_error not in (None, "error")
    if kind == "auto" and (loss_mode is not None or chat_only) and path is not None:
        from seqpack.data.rows import open_rows
        from seqpack.data.vlm.sample import normalize_visual_row

        with open_rows(path) as rows:
            kind = detect_schema(normalize_visual_row(rows.row(0))[0]) if len(rows) else "auto"
    return schema_from_options(kind, prompt_column=prompt_column, completion_column=completion_column,
                               loss_mode=loss_mode, reasoning=reasoning, on_template_error=on_template_error)

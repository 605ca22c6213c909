"""Parse JSON that came from a user: bounded depth, no lone surrogates, no integers beyond Python's limit.

``json.loads`` accepts text that later code cannot handle: an escaped lone surrogate (``"\\ud800"``)
becomes a ``str`` that fails the moment it is encoded as UTF-8 (tokenizers, tar members, Parquet);
thousands of nested brackets raise ``RecursionError``; an integer longer than Python's digit limit
(``sys.get_int_max_str_digits()``, 4300 by default) raises a bare ``ValueError``. :func:`loads`
turns each into a :class:`JsonProblem` naming the field (a dotted path such as
``messages[2].content``), so the caller can report file, line and field in one line.

Cost: one C-speed ``json.loads`` per text; the extra walks run only when the text could hold a
problem (an escaped surrogate, or more than :data:`MAX_JSON_DEPTH` opening brackets).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "JsonProblem", "fast_loads", "loads", "needs_stdlib"]

#: Deepest nesting of arrays and objects accepted in one JSON value (rows are a few levels deep).
MAX_JSON_DEPTH = 100

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonProblem(ValueError):
    """JSON that parses (or nearly) but cannot be used; ``field`` is the dotted path when known."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _walk(value: Any, *, depth_limit: int | None, surrogates: bool) -> None:
    """Iterative walk (no recursion): the depth check and the lone-surrogate check."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth_limit is not None and depth + 1 > depth_limit:
                raise JsonProblem(f"JSON nested deeper than {depth_limit} levels", field=path or None)
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                if surrogates and isinstance(key, str):
                    _check_text(key, path or None, what="a key")
                stack.append((child, _child(path, key), depth + 1))
        elif surrogates and isinstance(node, str):
            _check_text(node, path or None)


def _check_text(text: str, field: str | None, *, what: str = "text") -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        raise JsonProblem(
            f"{what} holds a lone surrogate \\u{code:04x} at character {exc.start} (not valid Unicode; "
            "a surrogate escape must come in a high/low pair)",
            field=field,
        ) from None


def fast_loads() -> Any:
    """``orjson.loads`` when orjson is installed and ``SEQPACK_JSON`` is not ``stdlib``, else None.

    orjson (a core dependency, with a stdlib fallback) parses the same JSON to the same values except in
    the rows :func:`needs_stdlib` routes to :func:`loads`, and refuses what :func:`loads` accepts with a
    value (``NaN``, a byte-order mark, an escaped lone surrogate that :func:`loads` then reports): a
    caller that gets an error or a non-object from it parses the text with :func:`loads` instead.
    """
    global _FAST
    if _FAST is None:
        try:
            if os.environ.get("SEQPACK_JSON", "") == "stdlib":
                raise ImportError
            import orjson

            _FAST = orjson.loads
        except ImportError:
            _FAST = False
    return _FAST or None


_FAST: Any = None


def needs_stdlib(block: bytes, starts: Any, ends: Any) -> Any:
    """Per row ``block[starts[i]:ends[i]]``: whether orjson could parse it differently from :func:`loads`
    (a boolean numpy array): a newline inside (a row never holds one), deeper nesting than
    :data:`MAX_JSON_DEPTH` possible (more opening brackets; orjson allows more), or an integer beyond 64
    bits (19 or more digits in a row; orjson makes it a float). One pass of numpy over the block."""
    import numpy as np

    a = np.frombuffer(block, dtype=np.uint8)
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)

    def per_row(positions: Any) -> Any:  # how many of the (sorted) positions fall in each row
        return np.searchsorted(positions, ends) - np.searchsorted(positions, starts)

    risky = per_row(np.flatnonzero(a == 0x0A)) > 0
    risky |= per_row(np.flatnonzero((a == 0x5B) | (a == 0x7B))) > MAX_JSON_DEPTH
    digits = np.flatnonzero((a >= 0x30) & (a <= 0x39))
    long_runs = digits[:-18][digits[18:] - digits[:-18] == 18]  # the first of 19 digits in a row
    if long_runs.size:
        risky |= per_row(long_runs) > 0
    return risky


def loads(text: str) -> Any:
    """``json.loads(text)`` with the bounds of the module docstring.

    ``json.JSONDecodeError`` (malformed JSON, with its line and column) passes through unchanged;
    the other problems raise :class:`JsonProblem`.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise JsonProblem(f"JSON nested deeper than {MAX_JSON_DEPTH} levels (Python's parser gave up)") from None
    except ValueError as exc:  # the integer digit limit (sys.set_int_max_str_digits)
        raise JsonProblem(f"a number is too long to read: {exc}".split(";")[0]) from None
    deep = text.count("[") + text.count("{") > MAX_JSON_DEPTH
    surrogates = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    if deep or surrogates:
        _walk(value, depth_limit=MAX_JSON_DEPTH if deep else None, surrogates=surrogates)
    return value

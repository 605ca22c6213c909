"""Text for people: terminal-safe strings, plain-text and markdown tables (no dependencies).

:func:`printable` is the one place where text that came from a user, a file or a dataset (a path, a
column name, a blend source, an image path inside a row) is made safe to show on a terminal: every
error line (:class:`~seqpack.core.errors.SeqpackError`), everything the CLI prints and every line the
MCP server logs goes through it, so a dataset cannot clear the screen, move the cursor or hide text.
"""

from __future__ import annotations

from typing import Any, Sequence

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as surrogateescape carries it
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str, *, keep_lines: bool = False) -> str:
    r"""``text`` with every character that is not printable written as a backslash escape, as ``repr`` writes it.

    Escaped: control characters (ESC, BEL, CR, backspace, DEL, the C1 controls), format characters
    (bidirectional overrides, zero-width joiners), line and paragraph separators, and the surrogates that
    stand for undecodable bytes (written ``\xNN``, the byte). Printable text, letters of any script
    included, passes unchanged. ``keep_lines`` keeps newlines and tabs (for multi-line output).

    >>> printable("a\x1b[2Jb")
    'a\\x1b[2Jb'
    >>> printable("été\u202etxt.exe")
    'été\\u202etxt.exe'
    """
    if text.isprintable():
        return text
    keep = "\n\t" if keep_lines else ""
    return "".join(ch if ch.isprintable() or ch in keep else _escape(ch) for ch in text)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table with a dashed rule under the header."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (pipes inside cells escaped, newlines flattened)."""

    def esc(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(out)

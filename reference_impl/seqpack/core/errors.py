"""One exception family for the whole package.

Every error carries what a user needs to act on it: the rule id when a packing rule was broken,
or the location (file, line or row, field) when an input was bad, plus a fix when one is known.
``str(err)`` is a single readable line, which is what the CLI prints and the MCP server returns; every
character that could drive a terminal (an escape sequence in a file name, a column name or a path inside a
row) is written as a backslash escape (:func:`seqpack.core.textfmt.printable`).
"""

from __future__ import annotations

from typing import Any

from seqpack.core.textfmt import printable


class SeqpackError(Exception):
    """Base class of every error raised on purpose by seqpack."""

    def __init__(
        self,
        message: str,
        *,
        rule_id: str | None = None,
        file: str | None = None,
        line: int | None = None,
        row: int | None = None,
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.rule_id = rule_id
        self.file = None if file is None else str(file)
        self.line = line
        self.row = row
        self.field = field
        self.fix = fix

    def location(self) -> str:
        """``file:line`` / ``file row N`` / ``field 'x'`` parts joined, or '' when unknown."""
        parts: list[str] = []
        if self.file is not None:
            parts.append(self.file if self.line is None else f"{self.file}:{self.line}")
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return ", ".join(parts)

    def __str__(self) -> str:
        text = self.message
        loc = self.location()
        if loc:
            text = f"{loc}: {text}"
        if self.rule_id and not text.startswith(f"[{self.rule_id}]"):
            text = f"[{self.rule_id}] {text}"
        if self.fix:
            stop = "" if text.rstrip().endswith((".", "!", "?", ":", ";")) else "."
            text = f"{text.rstrip()}{stop} Fix: {self.fix}"
        return printable(" ".join(text.split("\n")))  # a path or name from a dataset cannot drive the terminal

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form used by ``--json`` output and MCP tool errors."""
        return {
            "error": type(self).__name__,
            "message": self.message,
            "rule_id": self.rule_id,
            "file": self.file,
            "line": self.line,
            "row": self.row,
            "field": self.field,
            "fix": self.fix,
        }


def is_foreign_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic raised through pyo3 (``pyo3_runtime.PanicException``, a
    ``BaseException``: the ``tokenizers`` library raises it on some malformed tokenizer files)."""
    return type(exc).__module__ == "pyo3_runtime" or any(
        k.__module__ == "pyo3_runtime" for k in type(exc).__mro__
    )


class UsageError(SeqpackError):
    """A function or command was called with arguments that cannot work."""


class ConfigError(SeqpackError):
    """A configuration could not be loaded: unknown key, wrong type, malformed YAML/JSON."""


class ConfigViolationError(SeqpackError):
    """A configuration loaded fine but breaks one or more packing rules."""


class InputError(SeqpackError):
    """Bad input data: malformed JSONL, missing or wrong-typed field, non-UTF-8 bytes, empty file."""


class PackingError(SeqpackError):
    """Items cannot be packed as asked (e.g. longer than the pack and truncation not requested)."""


class ArtifactError(SeqpackError):
    """A packed artifact is corrupt, foreign, stale or inconsistent with its metadata."""


class ResourceError(SeqpackError):
    """The machine ran out of something the work needs (memory, file descriptors), or a worker process died."""


def resource_error(exc: BaseException) -> SeqpackError | None:
    """The one-line error of an exhausted resource, or None when ``exc`` is something else: memory (a
    ``MemoryError``, a shared library the loader could not map), file descriptors (EMFILE, ENFILE)."""
    import errno

    if isinstance(exc, MemoryError):
        detail = f" ({' '.join(str(exc).split())[:200]})" if str(exc) else ""
        return ResourceError(f"ran out of memory{detail}", fix="free memory or raise the limit (ulimit -v), or give "
                             "the command less work")
    text = str(exc)
    if isinstance(exc, ImportError) and ("failed to map segment" in text or "Cannot allocate memory" in text):
        return ResourceError(f"not enough memory to load a library ({text[:200]})",
                             fix="free memory or raise the address-space limit (ulimit -v)")
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        return ResourceError(f"too many open files ({exc.strerror})", fix="raise the limit (ulimit -n) or close "
                             "other programs")
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return ResourceError(f"ran out of memory ({exc.strerror})", fix="free memory or give the command less work")
    return None


class AlignmentError(SeqpackError):
    """A THD layout breaks a divisibility requirement (context/sequence parallel alignment)."""

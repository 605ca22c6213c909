"""Run a ``seqpack`` command in-process and keep exactly what a user would see, for eval logs.

The contextual tasks ship error logs; they must be what the code really prints for the broken
input, not text typed by hand. :func:`capture_cli` runs ``seqpack.faces.cli.main`` with the
given arguments inside ``cwd`` (so file names in messages are the relative ones a user typed),
collects stdout, stderr and the exit code, and renders them as a terminal transcript.

Log records from library code are routed to the captured stderr with the bare message, which
is how an unconfigured ``seqpack`` process shows them (Python's last-resort handler), so the
captured text is the same under pytest (which installs its own handlers) and on the command
line.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass(frozen=True)
class CliRun:
    """One captured ``seqpack`` invocation."""

    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str

    def log(self) -> str:
        """``$ seqpack ARGS`` followed by the output, stdout then stderr, as a terminal shows it."""
        parts = [f"$ seqpack {shlex.join(self.argv)}"]
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append(self.stderr.rstrip("\n"))
        parts.append(f"$ echo $?\n{self.exit_code}")
        return "\n".join(parts) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def capture_cli(argv: Sequence[str], cwd: str | os.PathLike[str]) -> CliRun:
    """Run ``seqpack ARGV`` in ``cwd`` in this process and capture what it prints."""
    from seqpack.faces.cli import main

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.chdir(Path(cwd)), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse errors exit with code 2
                code = int(exc.code or 0)
    finally:
        root.removeHandler(handler)
    return CliRun(list(argv), int(code), out.getvalue(), err.getvalue())


__all__ = ["CliRun", "capture_cli"]

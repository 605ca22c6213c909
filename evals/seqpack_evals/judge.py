"""An optional judge command that grades an answer beyond the deterministic checks.

The command (split with ``shlex``, run without a shell, bounded by a timeout) receives one JSON
object on stdin::

    {"task": {id, prompt, expected_output, assertions, answer_fields, forbidden, ...},
     "answer": "...", "tool_calls": [{"tool", "command", "path", "mcp_tool"}, ...],
     "files_created": [...], "files_modified": [...]}

and must print one JSON object on stdout with any of ``correctness``, ``goal`` and ``behavior``
(numbers in [0, 1]) and optionally ``notes`` (a string). Anything else (non-zero exit, timeout,
not JSON, a value out of range) is reported as a judge error and the task keeps its deterministic
scores. How the judge scores combine with the deterministic ones is described in
:mod:`seqpack_evals.scoring`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from seqpack.core.errors import UsageError
from seqpack_evals.tasks import Task
from seqpack_evals.transcript import Transcript

JUDGE_KEYS: tuple[str, ...] = ("correctness", "goal", "behavior")


@dataclass
class JudgeResult:
    """Scores returned by the judge, or the reason there are none."""

    scores: dict[str, float] = field(default_factory=dict)
    notes: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def judge_payload(task: Task, tr: Transcript) -> dict[str, Any]:
    """What the judge sees: the task, the answer and a summary of the tool calls."""
    return {
        "task": task.to_dict(),
        "answer": tr.answer,
        "tool_calls": [{"tool": e.tool, "command": e.command, "path": e.path, "mcp_tool": e.mcp_tool}
                       for e in tr.events],
        "files_created": tr.files_created,
        "files_modified": tr.files_modified,
    }


def parse_judge_output(text: str) -> JudgeResult:
    """Parse and check the judge's stdout."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return JudgeResult(error=f"judge output is not JSON ({exc.msg})")
    if not isinstance(data, dict):
        return JudgeResult(error="judge output is not a JSON object")
    scores: dict[str, float] = {}
    for key in JUDGE_KEYS:
        if key not in data:
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            return JudgeResult(error=f"judge value {key}={value!r} is not a number in [0, 1]")
        scores[key] = float(value)
    if not scores:
        return JudgeResult(error=f"judge output has none of {', '.join(JUDGE_KEYS)}")
    notes = data.get("notes", "")
    return JudgeResult(scores=scores, notes=notes if isinstance(notes, str) else json.dumps(notes))


def run_judge(judge_cmd: str, task: Task, tr: Transcript, *, timeout: float = 120.0) -> JudgeResult:
    """Run the judge command on one task attempt."""
    argv = shlex.split(judge_cmd)
    if not argv:
        raise UsageError("the judge command is empty", field="judge_cmd")
    try:
        proc = subprocess.run(argv, input=json.dumps(judge_payload(task, tr)), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        raise UsageError(f"judge command not found: {argv[0]}", field="judge_cmd") from None
    except subprocess.TimeoutExpired:
        return JudgeResult(error=f"judge timed out after {timeout:g} s")
    if proc.returncode != 0:
        return JudgeResult(error=f"judge exited {proc.returncode}: {proc.stderr.strip()[:300]}")
    return parse_judge_output(proc.stdout)


__all__ = ["JUDGE_KEYS", "JudgeResult", "judge_payload", "parse_judge_output", "run_judge"]

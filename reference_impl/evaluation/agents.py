"""Reference agents this machine can run without a model: the oracle (ceiling) and the null agent (floor).

Both speak Claude Code's ``stream-json`` (tool_use blocks, tool_result blocks, a final result), so
they go through exactly the parser and scorer a live agent does::

    seqpack eval run --with-skill --out RUN --agent-cmd \\
        'python -m reference_impl.evaluation.agents oracle --tasks {tasks_file}'
    seqpack eval run --baseline --out BASE --agent-cmd 'python -m reference_impl.evaluation.agents null'

* ``oracle`` answers every task with its reference answer. On a packing task it loads the skill
  (reading the installed ``SKILL.md``), reads the task's text files and *runs* the task's
  ``reference_command`` with this Python (``python -m reference_impl ...``); the tool results it
  reports are the real output, so they carry the run's nonce. ``--fast`` skips running the
  command and reports only the nonce line seqpack would print (for tests of the scorer, where
  running 150 commands would be slow); it is a test double, not a benchmark agent.
* ``null`` answers "I don't know." and uses no tool: the floor every real agent should beat.

The task comes from ``SEQPACK_EVAL_TASK_ID`` and the run's ``tasks.json``; the prompt arrives on
stdin (and is ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

SKILL = "megatron-sequence-packing"
MAX_RESULT_CHARS = 20_000


class _Stream:
    """Writes Claude Code stream-json events."""

    def __init__(self) -> None:
        self.n = 0

    def emit(self, obj: dict[str, Any]) -> None:
        print(json.dumps(obj), flush=True)

    def tool(self, name: str, inp: dict[str, Any], result: str) -> None:
        self.n += 1
        tool_id = f"toolu_{self.n:03d}"
        self.emit({"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": tool_id, "name": name, "input": inp}]}})
        self.emit({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": result[-MAX_RESULT_CHARS:]}]}})

    def answer(self, text: str) -> None:
        self.emit({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}})
        self.emit({"type": "result", "subtype": "success", "is_error": False, "result": text})


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _run_command(argv: Sequence[str], fast: bool) -> str:
    from reference_impl.nonce import nonce_line

    if fast:
        return f"(command not run: --fast)\n{nonce_line() or ''}"
    proc = subprocess.run([sys.executable, "-m", "reference_impl", *argv], capture_output=True, text=True,
                          timeout=900, check=False)
    return proc.stdout + proc.stderr


def oracle(task: dict[str, Any], *, fast: bool) -> None:
    """Reference answer, with the skill loaded, the task files read and the reference command run."""
    out = _Stream()
    out.emit({"type": "system", "subtype": "init", "cwd": os.getcwd()})
    skill_md = Path(".claude/skills") / SKILL / "SKILL.md"
    with_skill = bool(task["expected_skill"]) and skill_md.is_file()
    if with_skill:
        out.tool("Skill", {"skill": SKILL}, f"Launching skill: {SKILL}")
        out.tool("Read", {"file_path": str(skill_md)}, _text(skill_md) or "")
    for rel in task["files"]:
        local = rel.split("/", 2)[2]
        text = _text(Path(local))
        if text is not None:
            out.tool("Read", {"file_path": local}, text)
    command = task.get("reference_command")
    if with_skill and command:
        out.tool("Bash", {"command": " ".join(command)}, _run_command(command[1:], fast))
    out.answer(task["expected_output"])


def null() -> None:
    """No tools, no knowledge."""
    out = _Stream()
    out.emit({"type": "system", "subtype": "init", "cwd": os.getcwd()})
    out.answer("I don't know.")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m reference_impl.evaluation.agents")
    parser.add_argument("agent", choices=("oracle", "null"))
    parser.add_argument("--tasks", help="the run's tasks.json (oracle)")
    parser.add_argument("--fast", action="store_true", help="oracle: do not run the reference command")
    args = parser.parse_args(argv)
    sys.stdin.read()
    if args.agent == "null":
        null()
        return 0
    if not args.tasks:
        parser.error("oracle needs --tasks TASKS.json")
    task_id = os.environ.get("SEQPACK_EVAL_TASK_ID")
    doc = json.loads(Path(args.tasks).read_text(encoding="utf-8"))
    task = next((t for t in doc["evals"] if t["id"] == task_id), None)
    if task is None:
        print(f"no task {task_id!r} in {args.tasks}", file=sys.stderr)
        return 2
    oracle(task, fast=args.fast)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

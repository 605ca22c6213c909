"""Reference agents this machine can run without a model: the oracle (ceiling) and the null agent (floor).

Both speak Claude Code's ``stream-json`` (tool_use blocks, tool_result blocks, a final result), so
they go through exactly the parser and scorer a live agent does::

    seqpack eval run --with-skill --out RUN --agent-cmd 'python -m seqpack_evals.agents oracle'
    seqpack eval run --baseline --out BASE --agent-cmd 'python -m seqpack_evals.agents null'

* ``oracle`` answers every task with its reference answer. On a packing task it loads the skill
  (reading the installed ``SKILL.md``), reads the task's text files and *runs* the task's
  ``reference_command`` with this Python (``python -m seqpack ...``); the tool results it
  reports are the real output, so they carry the run's nonce. ``--fast`` skips running the
  command and reports only the nonce line seqpack would print (for tests of the scorer, where
  running 150 commands would be slow); it is a test double, not a benchmark agent.
* ``null`` answers "I don't know." and uses no tool: the floor every real agent should beat.
* ``lookup`` cheats the way a hostile agent would: it searches every file of its working directory
  (the installed skill included) for the prompt's first line and answers with the text that
  follows it there, and copies any file it finds under a name the prompt asks for. It uses no
  seqpack tool. Where no answer key is reachable it scores nothing (``tests/test_evals_leaks.py``).

The oracle is the one agent that reads the answer key: ``--tasks`` (default: the checkout's
``evals/tasks.json``; the run directory holds only the public task list). The prompt arrives on
stdin; the oracle finds its task in the key by that prompt (the harness gives agents no task id).
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
    from seqpack.core.nonce import nonce_line

    if fast:
        return f"(command not run: --fast)\n{nonce_line() or ''}"
    proc = subprocess.run([sys.executable, "-m", "seqpack", *argv], capture_output=True, text=True,
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
    outcome = task.get("outcome")
    if outcome:  # an outcome task: leave the oracle's artifact, which the grader runs
        from seqpack_evals.outcome import Artifact

        artifact = Artifact.from_dict(outcome["oracle"])
        artifact.write(Path("."))
        what = f"seqpack {' '.join(artifact.command)}" if artifact.command else ", ".join(artifact.files)
        out.tool("Write" if artifact.files else "Bash", {"file_path" if artifact.files else "command": what},
                 f"wrote {outcome['artifact']}")
    out.answer(task["expected_output"])


def null() -> None:
    """No tools, no knowledge."""
    out = _Stream()
    out.emit({"type": "system", "subtype": "init", "cwd": os.getcwd()})
    out.answer("I don't know.")


LOOKUP_MAX_BYTES = 4 << 20
LOOKUP_CONTEXT = 4000


def _artifact_names(prompt: str) -> list[str]:
    """File names the prompt asks the agent to write (``write ... to fixed.yaml``)."""
    import re

    return list(dict.fromkeys(re.findall(r"`([\w./-]+\.(?:ya?ml|py|json|txt))`", prompt)))


def _beside(doc: Any, prompt: str) -> list[str]:
    """The other string values of every JSON object in ``doc`` that has ``prompt`` as a value."""
    out: list[str] = []
    if isinstance(doc, dict):
        if any(isinstance(v, str) and v.strip() == prompt for v in doc.values()):
            out += [v for v in doc.values() if isinstance(v, str) and v.strip() != prompt]
            out += [x for v in doc.values() if isinstance(v, list) for x in v if isinstance(x, str)]
        for v in doc.values():
            out += _beside(v, prompt)
    elif isinstance(doc, list):
        for v in doc:
            out += _beside(v, prompt)
    return out


def lookup(prompt: str) -> None:
    """Answer by finding the prompt in a file of the working directory and echoing what follows it."""
    import shutil

    out = _Stream()
    out.emit({"type": "system", "subtype": "init", "cwd": os.getcwd()})
    whole = prompt.strip()
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
    # the whole prompt first (what follows it is what a copy of the task carries next), then its first line
    probes = [p for p in (whole, json.dumps(whole)[1:-1], first, json.dumps(first)[1:-1]) if p]
    found: list[str] = []
    wanted = _artifact_names(prompt)
    for path in sorted(Path(".").rglob("*")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > LOOKUP_MAX_BYTES:
            continue
        if path.name in wanted and len(path.parts) > 1 and not Path(path.name).exists():
            shutil.copyfile(path, path.name)  # an artifact someone left under the asked-for name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if path.suffix == ".json":  # a task list: the other fields of the object that holds the prompt
            try:
                found += _beside(json.loads(text), whole)
            except ValueError:
                pass
            continue
        for probe in probes:
            at = text.find(probe)
            if at >= 0:
                found.append(text[at + len(probe): at + len(probe) + LOOKUP_CONTEXT])
                break
    answer = "\n".join(found) if found else "Not found."
    out.answer(answer)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m seqpack_evals.agents")
    parser.add_argument("agent", choices=("oracle", "null", "lookup"))
    parser.add_argument("--tasks", help="oracle: the answer key (default: the checkout's evals/tasks.json)")
    parser.add_argument("--fast", action="store_true", help="oracle: do not run the reference command")
    args = parser.parse_args(argv)
    prompt = sys.stdin.read()
    if args.agent == "lookup":
        lookup(prompt)
        return 0
    if args.agent == "null":
        null()
        return 0
    tasks = Path(args.tasks) if args.tasks else Path(__file__).resolve().parents[2] / "evals" / "tasks.json"
    doc = json.loads(tasks.read_text(encoding="utf-8"))
    task = next((t for t in doc["evals"] if t["prompt"] == prompt), None)  # the harness passes no task id
    if task is None:
        print(f"no task with this prompt in {tasks}", file=sys.stderr)
        return 2
    oracle(task, fast=args.fast)
    return 0


if __name__ == "__main__":
    if not __package__:  # run as a file (inside the sandbox): the harness package is its folder's parent
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())

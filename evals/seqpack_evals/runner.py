"""``seqpack eval run``: run an agent command on each task in a fresh working directory.

Per task the runner

1. makes ``RUN_DIR/tasks/<slot>/`` (``001``, ``002``, ... in run order: a task id can name its answer,
   e.g. ``ctx-log-pack-malformed-json``, and clients show the agent its working directory) and copies
   the task's input files into it (the part of the path after ``files/<task_id>/``): nothing of the
   answer key goes there;
2. with the skill, copies the skill folder to ``.claude/skills/<name>/`` and ``.agents/skills/<name>/``
   inside the working directory (where Claude Code, Codex and other clients look for project
   skills); without it, warns when a skill of that name is visible from the working directory
   anyway (a parent folder's ``.agents/skills`` or the user's ``~/.claude/skills``);
3. runs the agent command (``shlex`` split, no shell) in the working directory with the prompt on
   stdin; ``{prompt}``, ``{workdir}``, ``{skill_dir}``, ``{tasks_file}`` (the run's ``tasks.json``:
   slots, prompts and file names, no answers, no task ids) and ``{nonce_seed}`` in the command's
   words are replaced first. The process group is killed when the timeout passes;
4. records ``RUN_DIR/transcripts/<task_id>.json``: command, exit code, stdout, stderr, duration,
   parsed tool events and answer, files created / modified / deleted (by comparing snapshots of the
   working directory) and files read (from the events).

The run directory holds no answer key: ``RUN_DIR/tasks.json`` lists each slot's prompt and file
names only, and ``run.json`` records which answer key
(``tasks_file``, the repository's ``evals/tasks.json`` unless ``--tasks-file`` chose another) and its
sha256, which ``seqpack eval score`` loads and checks.

The environment passed to the agent is the caller's plus ``SEQPACK_EVAL_SLOT``,
``SEQPACK_EVAL_MODE``, ``SEQPACK_EVAL_CANARY`` (a value derived from the seed and the task id that
the scorer looks for in the agent's output: finding it there means the environment was dumped) and
``SEQPACK_EVAL_NONCE`` (a fresh random seed per task; every seqpack run and MCP tool result the
agent gets prints its digest, :mod:`seqpack.core.nonce`, and the transcript records the digest
so the scorer can tell real tool results from claimed ones). ``{nonce_seed}`` in the agent command
is replaced by the seed, for clients that start the MCP server with an explicit environment.
The harness itself opens no network connection.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from seqpack.core.errors import UsageError
from seqpack.core.nonce import ENV_VAR as NONCE_ENV
from seqpack.core.nonce import nonce_for
from seqpack_evals.tasks import FORMAT, SKILL_NAME, Dataset, Task, dumps
from seqpack_evals.transcript import Transcript, files_read, parse_agent_output, write_transcript

log = logging.getLogger(__name__)

SKILL_HOMES: tuple[str, ...] = (".claude/skills", ".agents/skills")
MAX_STREAM_CHARS = 5_000_000
KILL_GRACE_S = 5.0
MODES: tuple[str, ...] = ("skill", "baseline")
#: The folder of ``RUN_DIR`` that holds one working directory per task.
WORKDIRS = "tasks"


# ------------------------------------------------------------------------------------------------
# Skill source and working directories
# ------------------------------------------------------------------------------------------------


def resolve_skill_dir(skill_dir: str | os.PathLike[str] | None = None, *, skill_name: str = SKILL_NAME,
                      search_from: Sequence[Path] | None = None) -> Path:
    """The skill folder to install: ``skill_dir`` if given, else the first ``skills/<name>`` found.

    Searched (when ``skill_dir`` is None): ``skills/<name>``, ``.agents/skills/<name>`` and
    ``.claude/skills/<name>`` under the source checkout and under the current directory. The folder
    must hold a ``SKILL.md``; otherwise a UsageError lists every place looked at.
    """
    if skill_dir is not None:
        path = Path(skill_dir).expanduser().resolve()
        if not (path / "SKILL.md").is_file():
            raise UsageError(f"no SKILL.md in the skill folder {path}", file=str(path),
                             fix="pass --skill-dir pointing at the folder that contains SKILL.md")
        return path
    bases = list(search_from) if search_from is not None else [Path(__file__).resolve().parents[2], Path.cwd()]
    tried: list[str] = []
    for base in bases:
        for rel in ("skills", ".agents/skills", ".claude/skills"):
            cand = (base / rel / skill_name).resolve()
            if str(cand) in tried:
                continue
            tried.append(str(cand))
            if (cand / "SKILL.md").is_file():
                return cand
    raise UsageError(f"skill {skill_name!r} not found; looked in: {', '.join(tried)}",
                     fix="pass --skill-dir DIR (the folder with SKILL.md), or run with --baseline")


def visible_skill_copies(workdir: Path, skill_name: str = SKILL_NAME, home: Path | None = None) -> list[str]:
    """Copies of the skill an agent started in ``workdir`` could still discover (baseline leak check)."""
    out = []
    for parent in [workdir, *workdir.parents]:
        for rel in SKILL_HOMES:
            cand = parent / rel / skill_name
            if (cand / "SKILL.md").is_file():
                out.append(str(cand))
    home = home if home is not None else Path.home()
    for rel in (".claude/skills", ".agents/skills", ".codex/skills"):
        cand = home / rel / skill_name
        if (cand / "SKILL.md").is_file() and str(cand) not in out:
            out.append(str(cand))
    return out


def snapshot(root: Path, exclude: Sequence[str] = SKILL_HOMES) -> dict[str, tuple[int, int, str]]:
    """``relative path -> (size, mtime_ns, sha256)`` of every file under ``root`` (skill copies excluded)."""
    out: dict[str, tuple[int, int, str]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(rel == e or rel.startswith(e + "/") for e in exclude) or not path.is_file() or path.is_symlink():
            continue
        st = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if st.st_size <= 64 << 20 else ""
        out[rel] = (st.st_size, st.st_mtime_ns, digest)
    return out


def prepare_workdir(task: Task, dataset_root: Path, workdir: Path, skill_src: Path | None,
                    skill_name: str = SKILL_NAME) -> list[str]:
    """Create ``workdir`` with the task's files (and the skill); returns where the skill was installed."""
    workdir.mkdir(parents=True)
    for rel in task.files:
        src = dataset_root / rel
        if not src.is_file():
            raise UsageError(f"task {task.id}: file {rel} is missing from the dataset", file=str(src))
        dest = workdir / rel.split("/", 2)[2]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    installed = []
    if skill_src is not None:
        for home in SKILL_HOMES:
            dest = workdir / home / skill_name
            shutil.copytree(skill_src, dest, symlinks=False)
            installed.append(f"{home}/{skill_name}")
    return installed


def slot_name(index: int) -> str:
    """The working-directory name of the ``index``-th task of a run (``001``, ...): says nothing about the task."""
    return f"{index + 1:03d}"


def public_run_tasks(tasks: Sequence[Task], slots: dict[str, str]) -> str:
    """The run directory's ``tasks.json``: per slot the prompt and the input files' names in the working directory."""
    doc = {"format": FORMAT + "-run", "note": "prompts and input file names only; the answer key is not here",
           "evals": [{"slot": slots[t.id], "prompt": t.prompt, "files": [rel.split("/", 2)[2] for rel in t.files]}
                     for t in tasks]}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def canary_for(seed: int, task_id: str) -> str:
    """The canary value for one task (deterministic for a seed)."""
    return "seqpack-canary-" + hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()[:20]


# ------------------------------------------------------------------------------------------------
# Running one agent command
# ------------------------------------------------------------------------------------------------


@dataclass
class AgentResult:
    """Raw outcome of one agent process."""

    argv: list[str]
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str


def build_argv(agent_cmd: str, values: dict[str, str]) -> list[str]:
    """Split the agent command and fill the ``{placeholders}`` in each word (no shell involved)."""
    try:
        words = shlex.split(agent_cmd)
    except ValueError as exc:
        raise UsageError(f"cannot parse the agent command: {exc}", field="agent_cmd") from None
    if not words:
        raise UsageError("the agent command is empty", field="agent_cmd")
    out = []
    for w in words:
        for key, value in values.items():
            w = w.replace("{" + key + "}", value)
        out.append(w)
    return out


def _clip(text: str) -> str:
    if len(text) <= MAX_STREAM_CHARS:
        return text
    return text[:MAX_STREAM_CHARS] + f"\n[... {len(text) - MAX_STREAM_CHARS} characters cut by the harness]"


def run_agent(argv: Sequence[str], prompt: str, cwd: Path, *, timeout: float, env: dict[str, str]) -> AgentResult:
    """Run the agent with the prompt on stdin; kill its whole process group after ``timeout`` seconds."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace", env=env,
                                start_new_session=True)
    except FileNotFoundError:
        raise UsageError(f"agent command not found: {argv[0]}", field="agent_cmd") from None
    except PermissionError:
        raise UsageError(f"agent command is not executable: {argv[0]}", field="agent_cmd") from None
    timed_out = False
    try:
        out, err = proc.communicate(input=prompt, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
    duration = time.monotonic() - started
    return AgentResult(list(argv), None if timed_out else proc.returncode, timed_out, duration,
                       _clip(out or ""), _clip(err or ""))


def _kill_group(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------------------------------------------
# A whole run
# ------------------------------------------------------------------------------------------------


@dataclass
class RunSummary:
    """What ``seqpack eval run`` did."""

    run_dir: str
    mode: str
    tasks: int
    completed: int
    timed_out: list[str]
    failed: list[str]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _write_run(out: Path, run: dict[str, Any]) -> None:
    (out / "run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")


def run_eval(
    dataset: Dataset,
    tasks: Sequence[Task],
    agent_cmd: str,
    out_dir: str | os.PathLike[str],
    *,
    mode: str = "skill",
    timeout: float = 600.0,
    skill_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: Callable[[int, int, str], None] | None = None,
) -> RunSummary:
    """Run ``agent_cmd`` on every task and write the run directory (see the module docstring)."""
    if mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)}, got {mode!r}", field="mode")
    if not tasks:
        raise UsageError("no tasks selected", field="tasks")
    if timeout <= 0:
        raise UsageError(f"timeout must be positive, got {timeout}", field="timeout")
    build_argv(agent_cmd, {})  # fail early on an unparsable or empty command
    out = Path(out_dir).resolve()
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"the run directory {out} already exists and is not empty", file=str(out),
                         fix="choose a new --out folder")
    skill_name = dataset.skill_name
    skill_src = resolve_skill_dir(skill_dir, skill_name=skill_name) if mode == "skill" else None
    out.mkdir(parents=True, exist_ok=True)
    slots = {t.id: slot_name(i) for i, t in enumerate(tasks)}
    (out / "tasks.json").write_text(public_run_tasks(tasks, slots), encoding="utf-8")  # no answers, no ids
    run: dict[str, Any] = {
        "mode": mode,
        "agent_cmd": agent_cmd,
        "skill_name": skill_name,
        "skill_dir": None if skill_src is None else str(skill_src),
        "tasks_file": str(dataset.root / "tasks.json"),  # the answer key, outside the run directory
        "dataset_sha256": hashlib.sha256(dumps(dataset).encode()).hexdigest(),
        "task_ids": [t.id for t in tasks],
        "slots": slots,
        "timeout_s": timeout,
        "seed": seed,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    run["finished"] = None
    _write_run(out, run)  # written first, so a run cut short can still be scored
    warnings: list[str] = []
    timed_out, failed = [], []
    for i, task in enumerate(tasks):
        if progress is not None:
            progress(i, len(tasks), task.id)
        workdir = out / WORKDIRS / slots[task.id]
        installed = prepare_workdir(task, dataset.root, workdir, skill_src, skill_name)
        notes = []
        if mode == "baseline":
            leaks = visible_skill_copies(workdir, skill_name)
            if leaks:
                note = f"{task.id}: the skill is still discoverable from the working directory: {', '.join(leaks)}"
                notes.append(note)
                if note not in warnings:
                    warnings.append(note)
                log.warning("%s", note)
        before = snapshot(workdir)
        canary = canary_for(seed, task.id)
        nonce_seed = secrets.token_hex(16)
        skill_path = str(workdir / installed[0]) if installed else ""
        argv = build_argv(agent_cmd, {"prompt": task.prompt, "workdir": str(workdir),
                                      "skill_dir": skill_path, "tasks_file": str(out / "tasks.json"),
                                      "nonce_seed": nonce_seed})
        env = dict(os.environ)
        env.pop("SEQPACK_EVAL_TASK_ID", None)
        env.update({"SEQPACK_EVAL_SLOT": slots[task.id], "SEQPACK_EVAL_MODE": mode, "SEQPACK_EVAL_CANARY": canary,
                    NONCE_ENV: nonce_seed})
        result = run_agent(argv, task.prompt, workdir, timeout=timeout, env=env)
        after = snapshot(workdir)
        parsed = parse_agent_output(result.stdout)
        local = [f.split("/", 2)[2] for f in task.files]
        transcript = Transcript(
            task_id=task.id,
            mode=mode,
            command=result.argv,
            workdir=str(workdir),
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=round(result.duration_s, 3),
            stdout=result.stdout,
            stderr=result.stderr,
            answer=parsed.answer,
            output_format=parsed.format,
            events=parsed.events,
            files_created=sorted(set(after) - set(before)),
            files_modified=sorted(k for k in set(after) & set(before) if after[k] != before[k]),
            files_deleted=sorted(set(before) - set(after)),
            files_read=files_read(parsed.events, local),
            skill_installed=installed,
            canary=canary,
            nonce=nonce_for(nonce_seed),
            usage=parsed.usage,
            notes=notes,
        )
        write_transcript(transcript, out / "transcripts" / f"{task.id}.json")
        if result.timed_out:
            timed_out.append(task.id)
        elif result.exit_code != 0:
            failed.append(task.id)
    run["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    run["warnings"] = warnings
    _write_run(out, run)
    if progress is not None:
        progress(len(tasks), len(tasks), "done")
    return RunSummary(str(out), mode, len(tasks), len(tasks) - len(timed_out) - len(failed), timed_out, failed,
                      warnings)


__all__ = [
    "AgentResult",
    "MODES",
    "WORKDIRS",
    "RunSummary",
    "build_argv",
    "canary_for",
    "prepare_workdir",
    "public_run_tasks",
    "slot_name",
    "resolve_skill_dir",
    "run_agent",
    "run_eval",
    "snapshot",
    "visible_skill_copies",
]

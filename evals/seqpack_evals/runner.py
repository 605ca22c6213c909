"""``seqpack eval run``: run an agent command on each task, in a fresh working directory inside a sandbox.

Per task the runner

1. makes a fresh working directory **outside the run directory** (under a new temporary folder, or
   ``--work-root``; named ``001``, ``002``, ... in run order, since a task id can name its answer) and copies the
   task's input files into it (nothing of the answer key goes there);
2. runs the agent command (``shlex`` split, no shell) there with the prompt on stdin, inside the bubblewrap
   sandbox of :mod:`seqpack_evals.sandbox`: read-write on the working directory, read-only on the system, the
   product installed as a wheel into an environment made for the run, and the skill (with ``--with-skill``, bound
   over ``.claude/skills/<name>`` and ``.agents/skills/<name>``, where Claude Code, Codex and other clients look
   for project skills); nothing else (not the run directory, the answer key, the checkout, ``$HOME``, another
   task). ``{prompt}``, ``{workdir}``, ``{skill_dir}`` and ``{nonce_seed}`` in the command's words are replaced
   first. The process handling of :mod:`seqpack_evals.agentproc` applies: own session and group, the whole tree
   killed at the timeout, bounded reads of stdout and stderr;
3. after the agent has exited, snapshots the working directory (:mod:`seqpack_evals.workdirs`: no link followed,
   iterative, bounded; unreadable files recorded, not fatal), keeps its files in ``RUN_DIR/tasks/<slot>/`` (what
   the scorer and the graders read) and removes the working directory;
4. records ``RUN_DIR/transcripts/<task_id>.json``: command, exit code, stdout, stderr (with the read bound),
   duration, parsed tool events and answer, files created / modified / deleted, files read, where the agent ran.

The run directory holds no answer key: ``RUN_DIR/tasks.json`` lists each slot's prompt and file names only;
``run.json`` records which answer key (``tasks_file``) and its sha256 ``seqpack eval score`` loads, how the agents
were confined (``sandbox``) and where each task ran (``ran_in``). ``--no-sandbox`` (debugging only) runs the agent
without bubblewrap; the run records it and every report prints it.

The environment passed to the agent is the caller's (without the variables that point into the harness's Python,
with the product environment first on ``PATH`` and, in the sandbox, a private ``HOME``) plus ``SEQPACK_EVAL_SLOT``,
``SEQPACK_EVAL_MODE``, ``SEQPACK_EVAL_CANARY`` (a value derived from the seed and the task id that the scorer looks
for in the agent's output: finding it there means the environment was dumped) and ``SEQPACK_EVAL_NONCE`` (a fresh
random seed per task; every seqpack run and MCP tool result the agent gets prints its digest,
:mod:`seqpack.core.nonce`, and the transcript records the digest so the scorer can tell real tool results from
claimed ones). The harness itself opens no network connection.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shlex
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from seqpack.core.errors import UsageError
from seqpack.core.nonce import ENV_VAR as NONCE_ENV
from seqpack.core.nonce import nonce_for
from seqpack_evals.sandbox import SANDBOX_HOME, SANDBOX_TMP, Sandbox
from seqpack_evals.tasks import FORMAT, SKILL_NAME, Dataset, Task, dumps
from seqpack_evals.transcript import Transcript, files_read, parse_agent_output, write_transcript

log = logging.getLogger(__name__)

SKILL_HOMES: tuple[str, ...] = (".claude/skills", ".agents/skills")
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


def prepare_workdir(task: Task, dataset_root: Path, workdir: Path, skill_src: Path | None,
                    skill_name: str = SKILL_NAME, *, copy_skill: bool = True) -> list[str]:
    """Create ``workdir`` with the task's files (and the skill); returns where the skill is installed.

    With ``copy_skill`` the skill folder is copied there; without, empty folders are made where the sandbox binds
    the skill read-only."""
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
            if copy_skill:
                shutil.copytree(skill_src, dest, symlinks=False)
            else:
                dest.mkdir(parents=True)
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
    sandbox: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass
class RunOptions:
    """How the agents of a run are confined (:mod:`seqpack_evals.sandbox`).

    ``sandbox``: run each agent under bubblewrap (False: ``--no-sandbox``, debugging only); ``network``: leave the
    network on inside the sandbox; ``read_only``: extra host paths the agent may read (recorded in the run);
    ``product_env``: a product environment made earlier (``seqpack eval env``), else one is made for the run from
    ``wheel`` or the checkout; ``work_root``: where the working directories are made (a new temporary folder by
    default; never inside the run directory); ``keep_workdirs``: leave them there after the run.
    """

    sandbox: bool = True
    network: bool = True
    read_only: Sequence[str] = ()
    product_env: str | os.PathLike[str] | None = None
    wheel: str | os.PathLike[str] | None = None
    work_root: str | os.PathLike[str] | None = None
    keep_workdirs: bool = False


def _write_run(out: Path, run: dict[str, Any]) -> None:
    from seqpack.io import atomic  # never through a link; a full disk names the file

    atomic.write_text(out / "run.json", json.dumps(run, indent=2) + "\n", what="run.json")


def prepare_run_dir(out_dir: str | os.PathLike[str]) -> Path:
    """The run directory, checked like every output seqpack writes: never a link (even a dangling one), a file, the
    file-system root, a system folder or the home directory, and new or empty (nothing is ever replaced)."""
    from seqpack.io.ownership import check_output_root

    path = Path(out_dir)
    if path.is_symlink():
        raise UsageError("the output path is a symbolic link; seqpack does not write through links", file=str(path),
                         field="out", fix="give the directory itself, or remove the link")
    check_output_root(path, owner="seqpack eval", field="out")
    out = path.resolve()
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"the run directory {out} already exists and is not empty", file=str(out), field="out",
                         fix="choose a new --out folder; seqpack never replaces what it did not write")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _make_sandbox(options: RunOptions, scratch: Path, secrets_: Sequence[Path]) -> Sandbox:
    from seqpack_evals.sandbox import build_product_env, check_bwrap, check_isolation, find_bwrap, load_product_env

    bwrap = None
    if options.sandbox:
        bwrap = find_bwrap()
        check_bwrap(bwrap)
    env = load_product_env(options.product_env) if options.product_env else \
        build_product_env(scratch / "product", wheel=options.wheel)
    read_only = [os.path.realpath(p) for p in options.read_only]
    for p in read_only:
        if not os.path.exists(p):
            raise UsageError(f"--sandbox-ro names a path that does not exist: {p}", file=p, field="sandbox_ro")
    box = Sandbox(env, enabled=options.sandbox, network=options.network, read_only=read_only, bwrap=bwrap)
    if options.sandbox:
        check_isolation(box, secrets_)
    return box


def _work_root(options: RunOptions, out: Path) -> Path:
    if options.work_root is None:
        return Path(tempfile.mkdtemp(prefix="seqpack-eval-"))
    root = Path(options.work_root).resolve()
    if root == out or root.is_relative_to(out) or out.is_relative_to(root):
        raise UsageError("--work-root must lie outside the run directory (and not contain it)", file=str(root),
                         field="work_root")
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="seqpack-eval-", dir=root))


@dataclass
class _Attempt:
    """One task's run, from the prepared working directory to the transcript."""

    task: Task
    slot: str
    workdir: Path
    installed: list[str]
    notes: list[str] = field(default_factory=list)


def _run_one(a: _Attempt, *, mode: str, agent_cmd: str, timeout: float, seed: int, out: Path, box: Sandbox,
             skill_copy: Path | None) -> Transcript:
    """Run the agent of one attempt, keep its files in the run directory and record the transcript."""
    from seqpack_evals.agentproc import run_agent
    from seqpack_evals.sandbox import agent_environment, bwrap_argv
    from seqpack_evals.workdirs import keep, snapshot

    before, _notes = snapshot(a.workdir, SKILL_HOMES)
    canary = canary_for(seed, a.task.id)
    nonce_seed = secrets.token_hex(16)
    skill_path = str(a.workdir / a.installed[0]) if a.installed else ""
    argv = build_argv(agent_cmd, {"prompt": a.task.prompt, "workdir": str(a.workdir), "skill_dir": skill_path,
                                  "tasks_file": "",  # the run's records are out of the agent's reach
                                  "nonce_seed": nonce_seed})
    home = SANDBOX_HOME if box.enabled else os.environ.get("HOME", str(a.workdir))
    env = agent_environment(dict(os.environ), box, home=home, tmp=SANDBOX_TMP if box.enabled else tempfile.gettempdir())
    env.pop("SEQPACK_EVAL_TASK_ID", None)
    env.update({"SEQPACK_EVAL_SLOT": a.slot, "SEQPACK_EVAL_MODE": mode, "SEQPACK_EVAL_CANARY": canary,
                NONCE_ENV: nonce_seed})
    argv_run = argv if not box.enabled else bwrap_argv(box, argv, a.workdir, skill=skill_copy if a.installed else None,
                                                       skill_homes=a.installed, home=home)
    result = run_agent(argv_run, a.task.prompt, a.workdir, timeout=timeout, env=env, marker=f"{NONCE_ENV}={nonce_seed}")
    after, walk_notes = snapshot(a.workdir, SKILL_HOMES)
    kept_rel = f"{WORKDIRS}/{a.slot}"
    try:
        kept = keep(a.workdir, out / kept_rel, exclude=SKILL_HOMES)
    except OSError as exc:
        from seqpack.core.errors import ArtifactError

        raise ArtifactError(f"cannot keep the agent's files: {exc.strerror or exc}", file=str(out / kept_rel),
                            fix="free space on that file system, or write the run elsewhere") from None
    parsed = parse_agent_output(result.stdout)
    local = [f.split("/", 2)[2] for f in a.task.files]
    notes = [*a.notes, *walk_notes, *kept.left_out[:50]]
    if result.leftovers:
        notes.append(f"{result.leftovers} process(es) the agent left running were killed")
    for name, st in result.streams.items():
        if st["dropped"]:
            notes.append(f"{name}: {st['bytes']} bytes, {st['dropped']} dropped (the harness keeps the first "
                         f"{st['kept_head']} and the last {st['kept_tail']})")
    return Transcript(
        task_id=a.task.id, mode=mode, command=argv, workdir=str(a.workdir), exit_code=result.exit_code,
        timed_out=result.timed_out, duration_s=round(result.duration_s, 3), stdout=result.stdout,
        stderr=result.stderr, answer=parsed.answer, output_format=parsed.format, events=parsed.events,
        files_created=sorted(set(after) - set(before)),
        files_modified=sorted(k for k in set(after) & set(before) if after[k] != before[k]),
        files_deleted=sorted(set(before) - set(after)), files_read=files_read(parsed.events, local),
        skill_installed=a.installed, canary=canary, nonce=nonce_for(nonce_seed), usage=parsed.usage, notes=notes,
        kept=kept_rel, sandboxed=box.enabled, streams=result.streams, leftovers=result.leftovers)


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
    options: RunOptions | None = None,
) -> RunSummary:
    """Run ``agent_cmd`` on every task and write the run directory (see the module docstring).

    Only the public part of each task (prompt, input files) is used; the answer key is named in ``run.json`` and
    loaded by ``seqpack eval score``, after the agents have exited.
    """
    options = options or RunOptions()
    if mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)}, got {mode!r}", field="mode")
    if not tasks:
        raise UsageError("no tasks selected", field="tasks")
    if timeout <= 0:
        raise UsageError(f"timeout must be positive, got {timeout}", field="timeout")
    build_argv(agent_cmd, {})  # fail early on an unparsable or empty command
    skill_name = dataset.skill_name
    skill_src = resolve_skill_dir(skill_dir, skill_name=skill_name) if mode == "skill" else None
    out = prepare_run_dir(out_dir)
    work = _work_root(options, out)
    key = dataset.root / "tasks.json"
    try:
        from seqpack_evals.sandbox import checkout_root

        box = _make_sandbox(options, work, [out, key, dataset.root, checkout_root()])
        return _run_all(dataset, tasks, agent_cmd, out, work, box, mode=mode, timeout=timeout, seed=seed,
                        skill_src=skill_src, skill_name=skill_name, progress=progress, options=options)
    finally:
        if not options.keep_workdirs:
            from seqpack_evals.workdirs import remove_tree

            remove_tree(work)


def _run_all(dataset: Dataset, tasks: Sequence[Task], agent_cmd: str, out: Path, work: Path, box: Sandbox, *,
             mode: str, timeout: float, seed: int, skill_src: Path | None, skill_name: str,
             progress: Callable[[int, int, str], None] | None, options: RunOptions) -> RunSummary:
    from seqpack.io import atomic
    from seqpack_evals.workdirs import remove_tree

    slots = {t.id: slot_name(i) for i, t in enumerate(tasks)}
    atomic.write_text(out / "tasks.json", public_run_tasks(tasks, slots), what="the run's task list")
    skill_copy = None
    if skill_src is not None:  # the skill the agents get, copied once: bound read-only, and read by the scorer
        skill_copy = out / "skill"
        shutil.copytree(skill_src, skill_copy, symlinks=False)
    warnings: list[str] = []
    if not box.enabled:
        warnings.append("the agents ran WITHOUT the sandbox (--no-sandbox, debugging only): they could read the "
                        "run directory and the answer key")
    run: dict[str, Any] = {
        "mode": mode, "agent_cmd": agent_cmd, "skill_name": skill_name,
        "skill_dir": None if skill_src is None else str(skill_src),
        "tasks_file": str(dataset.root / "tasks.json"),  # the answer key, outside the run directory and the sandbox
        "dataset_sha256": hashlib.sha256(dumps(dataset).encode()).hexdigest(),
        "task_ids": [t.id for t in tasks], "slots": slots, "timeout_s": timeout, "seed": seed,
        "sandbox": box.describe(), "work_root": str(work), "ran_in": {},
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "finished": None,
    }
    _write_run(out, run)  # written first, so a run cut short can still be scored
    timed_out, failed = [], []
    for i, task in enumerate(tasks):
        if progress is not None:
            progress(i, len(tasks), task.id)
        workdir = Path(tempfile.mkdtemp(prefix="w-", dir=work)) / slots[task.id]
        installed = prepare_workdir(task, dataset.root, workdir, skill_copy, skill_name, copy_skill=not box.enabled)
        attempt = _Attempt(task, slots[task.id], workdir, installed)
        if mode == "baseline" and not box.enabled:  # in the sandbox no parent folder and no user home is visible
            leaks = visible_skill_copies(workdir, skill_name)
            if leaks:
                note = f"{task.id}: the skill is still discoverable from the working directory: {', '.join(leaks)}"
                attempt.notes.append(note)
                if note not in warnings:
                    warnings.append(note)
                log.warning("%s", note)
        transcript = _run_one(attempt, mode=mode, agent_cmd=agent_cmd, timeout=timeout, seed=seed, out=out, box=box,
                              skill_copy=skill_copy)
        write_transcript(transcript, out / "transcripts" / f"{task.id}.json")
        run["ran_in"][task.id] = str(workdir)
        _write_run(out, run)
        if not options.keep_workdirs:
            remove_tree(workdir.parent)
        if transcript.timed_out:
            timed_out.append(task.id)
        elif transcript.exit_code != 0:
            failed.append(task.id)
    run["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    run["warnings"] = warnings
    _write_run(out, run)
    if progress is not None:
        progress(len(tasks), len(tasks), "done")
    return RunSummary(str(out), mode, len(tasks), len(tasks) - len(timed_out) - len(failed), timed_out, failed,
                      warnings, box.describe())

__all__ = [
    "MODES",
    "WORKDIRS",
    "RunOptions",
    "RunSummary",
    "build_argv",
    "canary_for",
    "prepare_workdir",
    "public_run_tasks",
    "slot_name",
    "resolve_skill_dir",
    "prepare_run_dir",
    "run_eval",
    "visible_skill_copies",
]

"""The skill's task set as an Inspect AI task: samples with their input files, the harness's own scorer, a sandbox.

Run it like any Inspect task::

    inspect eval evals/seqpack_evals/inspect_task.py --model anthropic/claude-sonnet-4-5 -T bucket=explicit
    inspect eval evals/seqpack_evals/inspect_task.py --model openai/gpt-4.1 -T with_skill=false --epochs 3
    inspect view   # the logs

* **Samples**: one per task of ``evals/tasks.json``, built from the public part only (prompt and input files, the
  same as ``seqpack eval export``); the id is the task id, the target empty. The answer key is loaded by the scorer,
  when it scores.
* **Solver**: the model with a ``bash`` tool, looping until it answers (any Inspect solver or agent can replace it).
* **Sandbox** ``seqpack-bwrap``: each sample gets a fresh working directory, and every command the model runs goes
  through the bubblewrap sandbox of :mod:`seqpack_evals.sandbox` (read-write on that directory; read-only on the
  system, the seqpack wheel installed into an environment made for the task and, with ``with_skill``, the skill at
  ``.claude/skills/<name>`` and ``.agents/skills/<name>``; nothing else). ``network=false`` cuts the network.
* **Scorer** :func:`seqpack_scorer`: the scorer ``seqpack eval score`` uses. A question task reads the final answer
  with :func:`seqpack_evals.answers.grade_answer` (share of fields right minus 0.5 per forbidden claim); an outcome
  task copies its artifact out of the sandbox and grades it with :func:`seqpack_evals.outcome.grade_outcomes`, the
  upstream checks through the lane (``skip_outcome=true`` leaves those tasks out). Metrics: mean with its standard
  error, over samples and epochs (``--epochs N``).

Task arguments (``-T name=value``): ``tasks`` (comma-separated ids), ``bucket``, ``with_skill`` (default true),
``network`` (default true), ``product_env`` (a folder made by ``seqpack eval env``; default: one is made for the
run), ``skip_outcome`` (default false), ``epochs`` (default 1).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal, Union, overload

from inspect_ai import Epochs, Task, task
from pydantic import BaseModel
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import Score, Target, mean, scorer, stderr
from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver, use_tools
from inspect_ai.tool import bash
from inspect_ai.util import ExecResult, SandboxEnvironment, SandboxEnvironmentSpec, sandbox, sandboxenv
from inspect_ai.util._subprocess import subprocess

SANDBOX = "seqpack-bwrap"
#: Product environments made for a task run, by configuration (removed when the task ends).
_ENVS: dict[str, tuple[Any, Path]] = {}


class SandboxConfig(BaseModel, frozen=True):
    """The ``seqpack-bwrap`` sandbox's configuration: the product environment (None: make one for the task run),
    the network, the skill folder to bind (None: no skill)."""

    product_env: str | None = None
    network: bool = True
    skill: str | None = None


def _config(config: Any) -> dict[str, Any]:
    if isinstance(config, BaseModel):
        return config.model_dump()
    return json.loads(config) if isinstance(config, str) and config else {}


@sandboxenv(name=SANDBOX)
class SeqpackBwrapSandbox(SandboxEnvironment):
    """An Inspect sandbox whose commands run in the eval harness's bubblewrap sandbox (module docstring)."""

    @classmethod
    def config_deserialize(cls, config: dict) -> BaseModel:
        """The configuration as a log stores it."""
        return SandboxConfig(**config)

    def __init__(self, box: Any, workdir: Path, skill: Path | None, skill_homes: list[str]) -> None:
        super().__init__()
        self.box, self.workdir, self.skill, self.skill_homes = box, workdir, skill, skill_homes

    @classmethod
    async def task_init(cls, task_name: str, config: Any) -> None:
        """Make (or load) the product environment and check that bubblewrap works, once per task run."""
        from seqpack_evals.sandbox import Sandbox, build_product_env, check_bwrap, find_bwrap, load_product_env

        cfg = _config(config)
        key = json.dumps(cfg, sort_keys=True)
        if key in _ENVS:
            return
        bwrap = find_bwrap()
        check_bwrap(bwrap)
        root = Path(tempfile.mkdtemp(prefix="seqpack-inspect-"))
        env = load_product_env(cfg["product_env"]) if cfg.get("product_env") else \
            await asyncio.to_thread(build_product_env, root / "product")
        _ENVS[key] = (Sandbox(env, network=bool(cfg.get("network", True)), bwrap=bwrap), root)

    @classmethod
    async def task_cleanup(cls, task_name: str, config: Any, cleanup: bool) -> None:
        """Remove the folder the task run made (its product environment and working directories)."""
        entry = _ENVS.pop(json.dumps(_config(config), sort_keys=True), None)
        if entry is not None and cleanup:
            from seqpack_evals.workdirs import remove_tree

            remove_tree(entry[1])

    @classmethod
    async def sample_init(cls, task_name: str, config: Any, metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        """A fresh working directory (outside any run record) with the skill's mount points."""
        cfg = _config(config)
        box, root = _ENVS[json.dumps(cfg, sort_keys=True)]
        workdir = Path(tempfile.mkdtemp(prefix="w-", dir=root)) / "work"
        workdir.mkdir()
        skill = Path(cfg["skill"]) if cfg.get("skill") else None
        homes = [f"{home}/{skill.name}" for home in (".claude/skills", ".agents/skills")] if skill else []
        for home in homes:
            (workdir / home).mkdir(parents=True)
        return {"default": cls(box, workdir, skill, homes)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: Any, environments: dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        """Delete the sample's working directory (iteratively, links never followed)."""
        from seqpack_evals.workdirs import remove_tree

        for environment in environments.values():
            remove_tree(environment.as_type(SeqpackBwrapSandbox).workdir.parent)

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        """Run ``cmd`` inside the sandbox, in the working directory (or ``cwd`` inside it)."""
        import os

        from seqpack_evals.sandbox import SANDBOX_HOME, SANDBOX_TMP, agent_environment, bwrap_argv

        where = self.workdir if cwd is None else self._inside(cwd)
        argv = bwrap_argv(self.box, cmd, self.workdir, skill=self.skill, skill_homes=self.skill_homes,
                          home=SANDBOX_HOME)
        argv[argv.index("--chdir") + 1] = str(where)
        environment = {**agent_environment(dict(os.environ), self.box, home=SANDBOX_HOME, tmp=SANDBOX_TMP),
                       **(env or {})}
        return await subprocess(args=argv, input=input, cwd=self.workdir, env=environment, timeout=timeout,
                                output_limit=10 << 20, concurrency=concurrency)

    def _inside(self, file: str) -> Path:
        path = Path(file)
        full = (path if path.is_absolute() else self.workdir / path).resolve()
        if not full.is_relative_to(self.workdir.resolve()):
            raise PermissionError(f"{file} is outside the sample's working directory")
        return full

    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write a file of the working directory (no other path, never through a link)."""
        from seqpack.io import atomic

        target = self._inside(file)
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic.atomic_output(target, what=file) as fh:
            fh.write(contents.encode("utf-8") if isinstance(contents, str) else contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str | bytes]:
        """Read a regular file of the working directory (no other path, never through a link)."""
        from seqpack.core.errors import SeqpackError
        from seqpack.io.reading import read_bytes

        try:
            data = read_bytes(self._inside(file), what=file, limit=64 << 20)
        except SeqpackError as exc:
            raise FileNotFoundError(exc.message) from None
        return data.decode("utf-8", errors="replace") if text else data


def _names(value: str | list[str] | None) -> list[str] | None:
    """``a,b`` or ``["a", "b"]`` (how ``-T name=a,b`` arrives) as a list; None when not given."""
    if not value:
        return None
    return [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if str(v).strip()]


def samples(tasks: str | list[str] | None = None, bucket: str | list[str] | None = None) -> list[Sample]:
    """One sample per task, from the public part of the task set (prompt and input files)."""
    from seqpack_evals.tasks import load_tasks

    dataset = load_tasks()
    chosen = dataset.select(_names(tasks), _names(bucket))
    return [Sample(id=t.id, input=t.prompt, target="", metadata={"bucket": t.bucket},
                   files={rel.split("/", 2)[2]: str(dataset.root / rel) for rel in t.files}) for t in chosen]


async def _artifact(task: Any, into: Path) -> None:
    """Copy the artifact an outcome task's agent left in the sandbox into ``into`` (with the task's inputs)."""
    box = sandbox()
    name = task.outcome["artifact"]
    listing = await box.exec(["find", name, "-type", "f"])
    names = listing.stdout.split() if listing.success else [name]
    for rel in [*names, *(r.split("/", 2)[2] for r in task.files)]:
        try:
            data = await box.read_file(rel, text=False)
        except (FileNotFoundError, PermissionError, IsADirectoryError, UnicodeDecodeError):
            continue
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


_LANES: list[Any] = []


def _lane() -> Any:
    """One upstream lane worker for the whole Inspect run (started on the first outcome task, closed at exit); None
    when it cannot start (the grade then reports the upstream checks as skipped and the task as not right)."""
    if not _LANES:
        import atexit

        from seqpack_lane.build import LaneError
        from seqpack_lane.client import UpstreamLane

        try:
            _LANES.append(UpstreamLane())
            atexit.register(_LANES[0].close)
        except LaneError:
            _LANES.append(None)
    return _LANES[0]


@scorer(metrics=[mean(), stderr()])
def seqpack_scorer(skip_outcome: bool = False):
    """The harness's correctness (``seqpack eval score``'s accuracy) as an Inspect scorer (module docstring)."""
    key: dict[str, Any] = {}

    async def score(state: TaskState, target: Target) -> Score:
        from seqpack_evals.answers import forbidden_hits, grade_answer
        from seqpack_evals.scoring import FORBIDDEN_PENALTY
        from seqpack_evals.tasks import load_tasks

        if not key:  # the answer key: loaded by the scorer, after the agent has run
            key.update(load_tasks().by_id())
        task = key[str(state.sample_id)]
        answer = state.output.completion if state.output else ""
        forbidden = forbidden_hits([f.check for f in task.forbidden], answer)
        if task.outcome is not None:
            from seqpack_evals.outcome import _needs_lane, grade_outcomes

            if skip_outcome and _needs_lane(task):
                return Score(value=0.0, answer=answer, explanation="skipped: needs the upstream lane",
                             metadata={"skipped": True})
            work = Path(tempfile.mkdtemp(prefix="seqpack-grade-"))
            try:
                await _artifact(task, work)
                lane = _lane() if _needs_lane(task) else None
                (grade,) = await asyncio.to_thread(grade_outcomes, [(task, work)], lane)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            value = max(0.0, float(grade.ok) - FORBIDDEN_PENALTY * len(forbidden))
            return Score(value=value, answer=answer, explanation="; ".join(
                f"{c.name}: {c.detail}" for c in grade.checks if not c.ok) or "every check passed",
                metadata={"outcome": grade.to_dict(), "forbidden": forbidden})
        fields = grade_answer(task.answer_fields, answer, task.prompt)
        value = max(0.0, sum(f.correct for f in fields) / len(fields) - FORBIDDEN_PENALTY * len(forbidden)) \
            if answer.strip() else 0.0
        return Score(value=value, answer=answer, explanation="; ".join(f"{f.name}: {f.reason}" for f in fields),
                     metadata={"fields": [f.to_dict() for f in fields], "forbidden": forbidden})

    return score


@solver
def scripted(script: str) -> Solver:
    """A scripted agent (no model): per sample id, the commands it runs in the sandbox, the files it writes there and
    the answer it gives, from the JSON file ``script`` (``{id: {"commands": [[...]], "files": {..}, "answer": ..}}``).
    The tests drive the task with it; a sample the script does not name gets an empty answer."""
    plan = json.loads(Path(script).read_text(encoding="utf-8"))

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        step = plan.get(str(state.sample_id), {})
        for cmd in step.get("commands", []):
            result = await sandbox().exec(cmd)
            state.messages.append(ChatMessageTool(content=result.stdout + result.stderr, function="bash"))
        for name, text in step.get("files", {}).items():
            await sandbox().write_file(name, text)
        output = ModelOutput.from_content("scripted", step.get("answer", ""))
        output.usage = ModelUsage(input_tokens=0, output_tokens=0, total_tokens=0)
        state.output = output
        state.messages.append(output.message)
        return state

    return solve


@task
def seqpack_skill(tasks: str | list[str] | None = None, bucket: str | list[str] | None = None, with_skill: bool = True,
                  network: bool = True, product_env: str | None = None, skip_outcome: bool = False, epochs: int = 1,
                  script: str | None = None) -> Task:
    """The task set (module docstring); ``script``: a scripted agent's plan instead of the model (:func:`scripted`)."""
    from seqpack_evals.runner import resolve_skill_dir

    config = SandboxConfig(product_env=product_env, network=network,
                           skill=str(resolve_skill_dir()) if with_skill else None)
    return Task(dataset=MemoryDataset(samples(tasks, bucket), name="seqpack-skill"),
                solver=scripted(script) if script else [use_tools([bash(timeout=600)]), generate()],
                scorer=seqpack_scorer(skip_outcome=skip_outcome),
                sandbox=SandboxEnvironmentSpec(SANDBOX, config),
                epochs=Epochs(epochs, "mean"))


__all__ = ["SANDBOX", "SandboxConfig", "SeqpackBwrapSandbox", "samples", "scripted", "seqpack_scorer", "seqpack_skill"]

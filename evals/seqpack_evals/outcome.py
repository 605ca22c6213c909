"""Outcome-verified tasks: the agent leaves an artifact in its working directory and code decides whether it works.

The tasks are data (``evals/outcome/*.yaml``, hand-written): a prompt, the input files, the artifact to
write (a training config in Bridge field names, a recipe override in Python, packed data, a pack-length
plan), the checks it must pass, the artifact the oracle writes and a wrong artifact (the negative control)
that must fail. :func:`build` turns them into tasks of ``evals/tasks.json`` (``Task.outcome``) and writes
their input files; the answer key (checks, oracle, negative) stays in ``tasks.json``.

:func:`grade_outcomes` grades many artifacts at once. Checks on seqpack's side (the artifact loads, the
fields the task asked for, what must stay as it was, divisibility, the packing path, token slots) run
here; the upstream checks run in the upstream lane, batched into a few worker calls: Megatron-Bridge
0.6.2's ``runtime_config_update`` (``ConfigContainer.validate``) on the config as a user would build it
(``validate.run``), a 0.6.2 recipe function with the override applied (``grading.recipe_overrides``), and
Bridge's packed reader + collate on packed data (``readers.collate``). A task is right only when every
check passes; without the lane the upstream checks are *skipped* and the task is not counted right.

Check names (``checks`` in the data): ``bridge`` (accepts | rejects), ``seqpack`` (clean: no error of
``seqpack validate --bridge-version 0.6.2``), ``require`` (field: value), ``keep`` (fields equal to the
input's), ``keep_all_except`` (every field but these equal to the input's), ``divisible`` (field: n),
``path`` (the packing path seqpack resolves), ``token_slots`` (seq_length x global_batch_size),
``fits`` (every sample of a JSONL file fits the config's sequence length untruncated),
``unchanged`` (input files left byte for byte), ``packs`` (packed data read by Bridge, every physical
sequence divisible by the topology's multiple, every sample present), ``recipe`` (the 0.6.2 recipe
the override applies to).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import logging
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from seqpack.core.errors import SeqpackError, UsageError
from seqpack_evals.tasks import OUTCOME_CHECKS, OUTCOME_KINDS, SKILL_NAME, Task

log = logging.getLogger(__name__)

KINDS = OUTCOME_KINDS
CHECKS = OUTCOME_CHECKS
#: What every lane-graded outcome holds for (the lane installs exactly these).
UPSTREAM_VERSION = "megatron-bridge 0.6.2 / megatron-core 0.19.2"
MAX_ARTIFACT_BYTES = 1 << 20
PLAN_KEYS = {"seq_length": ("model.seq_length", "dataset.seq_length",
                            "dataset.offline_packing_specs.packed_sequence_size"),
             "global_batch_size": ("train.global_batch_size",)}


def outcome_dir() -> Path:
    """``evals/outcome/`` of the checkout (the hand-written outcome tasks)."""
    return Path(__file__).resolve().parents[2] / "evals" / "outcome"


# ------------------------------------------------------------------------------------------------
# Data: dotted edits of nested dicts, materialised inputs and artifacts
# ------------------------------------------------------------------------------------------------


def get_dotted(data: Mapping[str, Any], dotted: str) -> Any:
    """``data[a][b][c]`` for ``a.b.c`` (None where a part is missing)."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def edited(base: Mapping[str, Any], set_: Mapping[str, Any] | None = None, unset: Iterable[str] = ()) -> dict:
    """A deep copy of ``base`` with dotted keys set (a None value removes the key) and removed."""
    out = copy.deepcopy(dict(base))
    for dotted, value in (set_ or {}).items():
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = copy.deepcopy(value)
    for dotted in unset:
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            node = node.get(part, {})
        node.pop(parts[-1], None)
    return out


def config_text(data: Mapping[str, Any], comment: str | None = None) -> str:
    """A config dict as the YAML a user keeps (sections in order, no sorting)."""
    head = "".join(f"# {line}\n" for line in comment.splitlines()) if comment else ""
    return head + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def _materialise(spec: Mapping[str, Any], bases: Mapping[str, Any], inputs: Mapping[str, str],
                 input_dicts: Mapping[str, dict], where: str) -> str:
    """The text of one input or artifact file from its spec (``text``, ``base`` + edits, or ``edit`` of an input)."""
    if "text" in spec:
        return str(spec["text"])
    if "base" in spec:
        if spec["base"] not in bases:
            raise UsageError(f"{where}: unknown base {spec['base']!r}", field="base")
        data = edited(bases[spec["base"]], spec.get("set"), spec.get("unset", ()))
    elif "edit" in spec:
        if spec["edit"] not in input_dicts:
            raise UsageError(f"{where}: edits {spec['edit']!r}, which is not a config input", field="edit")
        data = edited(input_dicts[spec["edit"]], spec.get("set"), spec.get("unset", ()))
    elif "same_as" in spec:
        return inputs[spec["same_as"]]
    else:
        raise UsageError(f"{where}: a file needs text, base, edit or same_as", field="files")
    return config_text(data, spec.get("comment"))


@dataclass
class Artifact:
    """What an agent (the oracle, a negative control) leaves: files by name, or a seqpack command to run."""

    files: dict[str, str] = field(default_factory=dict)
    command: list[str] | None = None
    fails: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out: dict[str, Any] = {"files": dict(self.files)}
        if self.command is not None:
            out["command"] = list(self.command)
        if self.fails:
            out["fails"] = list(self.fails)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Artifact":
        """Inverse of :meth:`to_dict`."""
        return cls(dict(data.get("files", {})), None if data.get("command") is None else list(data["command"]),
                   list(data.get("fails", [])))

    def write(self, workdir: Path) -> None:
        """Leave this artifact in ``workdir`` (running the command with this Python, as ``seqpack``)."""
        for name, text in self.files.items():
            target = workdir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        if self.command:
            import subprocess
            import sys

            proc = subprocess.run([sys.executable, "-m", "seqpack", *self.command], cwd=workdir,
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise UsageError(f"seqpack {' '.join(self.command)} failed: {proc.stderr.strip()[-300:]}")


def load_specs(folder: Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The bases and the task entries of every ``*.yaml`` in ``folder`` (default :func:`outcome_dir`)."""
    folder = folder or outcome_dir()
    bases: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for name, base in (doc.get("bases") or {}).items():
            if name in bases:
                raise UsageError(f"{path.name}: base {name!r} is defined twice", file=str(path), field="bases")
            bases[name] = base
        for entry in doc.get("tasks") or []:
            entries.append({**entry, "_file": path.name})
    return bases, entries


def materialise(entry: Mapping[str, Any], bases: Mapping[str, Any]) -> tuple[dict[str, str], Artifact, Artifact]:
    """Input file texts, oracle and negative artifacts of one entry."""
    where = f"{entry.get('_file')}: {entry.get('id')}"
    inputs: dict[str, str] = {}
    dicts: dict[str, dict] = {}
    for name, spec in (entry.get("inputs") or {}).items():
        if "demo" in spec:
            from seqpack.data.demo import generate_rows, render_jsonl

            inputs[name] = render_jsonl(generate_rows(spec["demo"], int(spec.get("rows", 40)))).decode("utf-8")
            continue
        inputs[name] = _materialise(spec, bases, inputs, dicts, f"{where}: input {name}")
        if name.endswith((".yaml", ".yml")) and "text" not in spec:
            dicts[name] = yaml.safe_load(inputs[name])

    def side(key: str) -> Artifact:
        spec = entry.get(key) or {}
        if "command" in spec:
            return Artifact({}, [str(w) for w in spec["command"]], list(spec.get("fails", [])))
        files = {name: _materialise(f, bases, inputs, dicts, f"{where}: {key} {name}")
                 for name, f in (spec.get("files") or {}).items()}
        if not files and spec:  # shorthand: the spec describes the artifact file itself
            files = {entry["artifact"]: _materialise(spec, bases, inputs, dicts, f"{where}: {key}")}
        return Artifact(files, None, list(spec.get("fails", [])))

    return inputs, side("oracle"), side("negative")


#: The last line of every outcome prompt (neutral: it names neither the skill nor the tool).
ARTIFACT_LINE = ("Leave the result as `{artifact}` in this folder: it is graded by loading and running it, not by reading "
                 "your reply.")
LANE_CHECKS: dict[str, str] = {
    "config": "ConfigContainer built from the config, runtime_config_update() (ConfigContainer.validate())",
    "plan": "ConfigContainer built from the config with the plan's values, runtime_config_update()",
    "recipe": "the recipe function with the override applied, runtime_config_update()",
    "packs": "GPTSFTPackedParquetDataset + collate_fn + get_packed_seq_params on the packed rows",
}


def _describe(checks: Mapping[str, Any]) -> list[str]:
    out = []
    for name, value in checks.items():
        if name == "bridge":
            out.append(f"megatron-bridge 0.6.2 {'accepts' if value == 'accepts' else 'rejects'} it at start-up")
        elif name in ("require", "divisible") and isinstance(value, Mapping):
            out += [f"{k} {'=' if name == 'require' else 'is a multiple of'} {v}" for k, v in value.items()]
        elif name == "packs":
            out.append(f"Bridge's packed reader reads it; every sequence a multiple of {pack_multiple(value)}")
        else:
            out.append(f"{name}: {value}")
    return out


def task_from_entry(entry: Mapping[str, Any], bases: Mapping[str, Any], ctx: Any) -> Any:
    """One outcome task of the data, its input files written through ``ctx`` (a :class:`GenContext`)."""
    task_id = entry["id"]
    inputs, oracle, negative = materialise(entry, bases)
    files = [ctx.put_text(task_id, name, text) for name, text in inputs.items()]
    kind, artifact, checks = entry["kind"], entry["artifact"], dict(entry.get("checks") or {})
    lane = "bridge" in checks or kind in ("recipe", "packs")
    config_input = entry.get("config_input") or next((n for n in inputs if n.endswith((".yaml", ".yml"))), None)
    changed = _oracle_changes(kind, artifact, inputs.get(config_input or ""), oracle)
    if changed:  # what the oracle changes is part of the fix; every other field must stay as the input has it
        checks["may_change"] = sorted({*(checks.get("may_change") or []), *changed})
    kept = {n: inputs[n] for n in {config_input, *checks.get("unchanged", [])} if n}
    outcome = {"kind": kind, "artifact": artifact, "config_input": config_input, "recipe": entry.get("recipe"),
               "world_size": entry.get("world_size"),
               "checks": checks, "inputs": kept, "oracle": oracle.to_dict(), "negative": negative.to_dict()}
    shown_name = f"{artifact}/" if kind == "packs" else artifact
    line = ARTIFACT_LINE.format(artifact=shown_name)
    shown = next(iter(oracle.files.values()), None)
    expected = (f"Leaves `{artifact}`" + (f":\n\n{shown}" if shown else f" by running seqpack {' '.join(oracle.command or [])}")
                + "\n\n" + str(entry.get("why", "")).strip())
    source = dict(entry.get("source") or {})
    if lane:
        source = {"kind": "upstream", "package": "megatron-bridge==0.6.2", "megatron_core": "megatron-core==0.19.2",
                  "checked_in_lane": LANE_CHECKS[kind], **source}
    else:
        source.setdefault("kind", "seqpack")
    positive = entry["bucket"] != "near_miss"
    command = entry.get("command")
    from seqpack.config.rules import RULES_BY_ID

    rule_ids = list(entry.get("rule_ids", []))
    families = list(dict.fromkeys(RULES_BY_ID[r].family for r in rule_ids if r in RULES_BY_ID))
    return Task(
        id=task_id, bucket=entry["bucket"], prompt=entry["prompt"].strip() + "\n\n" + line,
        expected_output=expected.strip(), assertions=_describe(checks), answer_fields=[], forbidden=[],
        expected_skill=SKILL_NAME if positive else None, expected_script=entry.get("script"),
        files=files, reference_command=None if not command else ["seqpack", *[str(w) for w in command]],
        source=source, paths=list(entry.get("paths", [])), families=families, topics=list(entry.get("topics", [])),
        rule_ids=rule_ids, ground_truth={"why": str(entry.get("why", "")).strip()},
        outcome=outcome)


def _oracle_changes(kind: str, artifact: str, source: str | None, oracle: Artifact) -> list[str]:
    """The dotted fields the oracle's artifact changes: against the input config (a config task), or the fields its
    override assigns (a recipe task)."""
    text = oracle.files.get(artifact)
    if text is None:
        return []
    if kind == "recipe":
        return [k for k, _v in parse_override(text)]
    if kind != "config" or source is None:
        return []
    ours, theirs = _flatten(yaml.safe_load(text)), _flatten(yaml.safe_load(source))
    changed = {k for k in set(ours) | set(theirs) if not _same(ours.get(k), theirs.get(k))}
    for mine, other in ((theirs, ours), (ours, theirs)):  # a section removed or added whole: all of it may change
        for k in set(mine) - set(other):
            parent = k.rpartition(".")[0]
            if parent and not any(o.startswith(parent + ".") for o in other):
                changed.add(parent)
    return sorted(changed)


def build(ctx: Any) -> None:
    """Add every outcome task of ``evals/outcome/`` (the dataset's last template)."""
    bases, entries = load_specs()
    for entry in entries:
        ctx.add(task_from_entry(entry, bases, ctx))


# ------------------------------------------------------------------------------------------------
# Grading
# ------------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """One check of one artifact."""

    name: str
    ok: bool | None  # None: skipped (the lane was not available)
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass
class OutcomeGrade:
    """Every check of one artifact; right only when each one passed."""

    task_id: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check ran and passed."""
        return bool(self.checks) and all(c.ok is True for c in self.checks)

    @property
    def skipped(self) -> list[str]:
        """Names of the checks that could not run."""
        return [c.name for c in self.checks if c.ok is None]

    @property
    def failed(self) -> list[str]:
        """Names of the checks that ran and failed."""
        return [c.name for c in self.checks if c.ok is False]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"ok": self.ok, "failed": self.failed, "skipped": self.skipped,
                "checks": [c.to_dict() for c in self.checks]}


def _read_text(path: Path) -> str:
    if not path.is_file() or path.is_symlink():
        raise UsageError(f"{path.name} is missing (or not a regular file)", file=str(path))
    if path.stat().st_size > MAX_ARTIFACT_BYTES:
        raise UsageError(f"{path.name} is larger than {MAX_ARTIFACT_BYTES} bytes", file=str(path))
    return path.read_text(encoding="utf-8", errors="replace")


def parse_override(text: str) -> list[tuple[str, Any]]:
    """The assignments of an ``override.py``: ``def apply(cfg):`` whose body sets ``cfg.<dotted> = <literal>``.

    The file is parsed, never run. Anything else in the body (calls, loops, non-literal values) is refused,
    so the grader applies exactly what the file says to the released recipe.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise UsageError(f"override.py does not parse: line {exc.lineno}: {exc.msg}", line=exc.lineno) from None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "apply"), None)
    if fn is None or len(fn.args.args) != 1:
        raise UsageError("override.py must define apply(cfg)", field="apply")
    root = fn.args.args[0].arg
    out: list[tuple[str, Any]] = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # a docstring
            continue
        if isinstance(stmt, ast.Pass):
            continue
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            raise UsageError(f"override.py line {stmt.lineno}: only 'cfg.<field> = <literal>' assignments are "
                             "applied", line=stmt.lineno)
        parts: list[str] = []
        node = stmt.targets[0]
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        if not (isinstance(node, ast.Name) and node.id == root and parts):
            raise UsageError(f"override.py line {stmt.lineno}: the target must be an attribute of {root}",
                             line=stmt.lineno)
        try:
            value = ast.literal_eval(stmt.value)
        except ValueError:
            raise UsageError(f"override.py line {stmt.lineno}: the value must be a literal", line=stmt.lineno) from None
        out.append((".".join(parts), value))
    return out


def _plan_config(base: dict, plan: Mapping[str, Any]) -> dict:
    """The input config with a plan's values written where Bridge reads them."""
    unknown = sorted(set(plan) - set(PLAN_KEYS))
    if unknown:
        raise UsageError(f"plan.yaml has unknown key(s) {unknown}; it holds {', '.join(PLAN_KEYS)}", field=unknown[0])
    sets: dict[str, Any] = {}
    for key, value in plan.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"plan.yaml: {key} must be a positive integer, got {value!r}", field=key)
        for dotted in PLAN_KEYS[key]:
            if dotted.startswith("dataset.offline_packing_specs") and get_dotted(base, dotted) is None:
                continue
            sets[dotted] = value
    return edited(base, sets)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@dataclass
class _Pending:
    """One artifact on its way through the grader."""

    task: Any
    workdir: Path
    grade: OutcomeGrade
    config: Any = None  # seqpack TrainingConfig
    config_dict: dict | None = None
    lane: list[tuple[str, dict]] = field(default_factory=list)  # (check name, request)


def _local_checks(p: _Pending, originals: Mapping[str, str]) -> None:
    """Load the artifact and run the checks that need no upstream code."""
    from seqpack.config.load import load_config

    outcome = p.task.outcome
    checks = outcome.get("checks", {})
    kind = outcome["kind"]
    add = p.grade.checks.append
    artifact = p.workdir / outcome["artifact"]
    if kind in ("config", "plan"):
        try:
            text = _read_text(artifact)
            data = yaml.safe_load(text)
            if not isinstance(data, dict):
                raise UsageError(f"{outcome['artifact']} is not a YAML mapping")
            if kind == "plan":
                data = _plan_config(yaml.safe_load(originals[outcome["config_input"]]), data)
            p.config = load_config(data)
            p.config_dict = data
            add(CheckResult("loads", True, f"{outcome['artifact']} loads as a seqpack/Bridge config"))
        except (SeqpackError, yaml.YAMLError, UnicodeDecodeError) as exc:
            add(CheckResult("loads", False, f"{outcome['artifact']}: {getattr(exc, 'message', exc)}"))
            return
    if kind == "recipe":
        try:
            p.config_dict = {"assignments": parse_override(_read_text(artifact))}
            add(CheckResult("loads", True, f"{len(p.config_dict['assignments'])} assignment(s)"))
        except SeqpackError as exc:
            add(CheckResult("loads", False, exc.message))
            return
        allowed = allowed_fields(checks)
        extra = [k for k, _v in p.config_dict["assignments"]
                 if not any(k == a or k.startswith(a + ".") for a in allowed)]
        add(CheckResult("only", not extra, "assigns only what the task asks" if not extra
                        else f"also assigns {', '.join(extra[:6])}, which the task did not ask to change"))
    if kind == "packs":
        files = sorted(artifact.rglob("*.parquet")) if artifact.is_dir() else []
        train = [f for f in files if "valid" not in f.name]
        if not train:
            add(CheckResult("loads", False, f"no packed Parquet file under {outcome['artifact']}/"))
            return
        p.config_dict = {"parquet": str(train[0])}
        add(CheckResult("loads", True, f"packed data {train[0].relative_to(p.workdir)}"))
        add(_inspect_packs(train[0], checks["packs"]))
    for name in outcome.get("unchanged", []) + list(checks.get("unchanged", [])):
        path = p.workdir / name
        same = path.is_file() and path.read_text(encoding="utf-8", errors="replace") == originals.get(name)
        add(CheckResult("unchanged", same, f"{name} {'is as it was' if same else 'was changed or removed'}"))
    base = yaml.safe_load(originals[outcome["config_input"]]) if outcome.get("config_input") else None
    if kind in ("config", "plan"):
        _config_checks(p, checks, base)


def _config_checks(p: _Pending, checks: Mapping[str, Any], base: dict | None) -> None:
    from seqpack.config.validate import get_path, validate_config

    add = p.grade.checks.append
    cfg = p.config
    for dotted, want in (checks.get("require") or {}).items():
        got = get_path(cfg, dotted)
        add(CheckResult("require", _same(got, want), f"{dotted} = {got!r} (asked: {want!r})"))
    if base is not None:
        base_cfg = _safe_load(base)
        for dotted in checks.get("keep") or []:
            got, was = get_path(cfg, dotted), get_path(base_cfg, dotted) if base_cfg else get_dotted(base, dotted)
            add(CheckResult("keep", _same(got, was), f"{dotted} = {got!r} (input: {was!r})"))
        if base_cfg is not None and p.task.outcome["kind"] == "config":  # every field it was not asked to change
            allowed = allowed_fields(checks)
            ours, theirs = _flatten(cfg.to_dict()), _flatten(base_cfg.to_dict())
            changed = sorted(k for k in set(ours) | set(theirs)
                             if not _same(ours.get(k), theirs.get(k)) and not any(k == a or k.startswith(a + ".")
                                                                                  for a in allowed))
            add(CheckResult("keep_all_except", not changed,
                            "nothing else changed" if not changed else f"also changed: {', '.join(changed[:6])}"))
    for dotted, n in (checks.get("divisible") or {}).items():
        got = get_path(cfg, dotted)
        ok = isinstance(got, int) and not isinstance(got, bool) and got > 0 and got % int(n) == 0
        add(CheckResult("divisible", ok, f"{dotted} = {got!r} must be a positive multiple of {n}"))
    if "path" in checks:
        paths = cfg.active_paths()
        got = paths[0] if len(paths) == 1 else ("none" if not paths else "+".join(paths))
        add(CheckResult("path", got == checks["path"], f"packing path {got} (asked: {checks['path']})"))
    if "token_slots" in checks:
        slots = cfg.seq_length * cfg.train.global_batch_size
        add(CheckResult("token_slots", slots == int(checks["token_slots"]),
                        f"seq_length {cfg.seq_length} x global_batch_size {cfg.train.global_batch_size} = {slots} "
                        f"(asked: {checks['token_slots']})"))
    if "fits" in checks:
        add(_fits(p.workdir, checks["fits"], cfg))
    target = str(checks.get("seqpack") or "").partition("@")[2] or "0.6.2"  # seqpack's own verdict agrees
    report = validate_config(cfg, bridge_version=target)
    ids = [v.rule_id for v in report.violations]
    add(CheckResult("seqpack", not ids, f"seqpack validate --bridge-version {target}: "
                    + ("no error" if not ids else "errors " + ", ".join(ids))))


def allowed_fields(checks: Mapping[str, Any]) -> set[str]:
    """The fields an artifact may change: those the task asks for (``require``, ``divisible``), the explicit
    ``keep_all_except`` list and ``may_change`` (the other fields a right fix may touch). Everything else must stay
    as the input has it (``keep_all_except``; for a recipe override, ``only``)."""
    return {*(checks.get("require") or {}), *(checks.get("divisible") or {}), *(checks.get("keep_all_except") or []),
            *(checks.get("may_change") or [])}


def _safe_load(data: dict) -> Any:
    from seqpack.config.load import load_config

    try:
        return load_config(data)
    except SeqpackError:
        return None


def _fits(workdir: Path, spec: Mapping[str, Any], cfg: Any) -> CheckResult:
    """Every sample of the JSONL file fits one sequence of the config's length (packed, none truncated)."""
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    data = workdir / spec["data"]
    pad = getattr(cfg.dataset.offline_packing_specs, "pad_seq_to_mult", None) or 1
    with tempfile.TemporaryDirectory(prefix="seqpack-fits-") as tmp:
        try:
            prepared = prepare_packed_dataset(str(data), tmp, pack_size=cfg.seq_length, pad_seq_to_mult=pad,
                                              truncation="reject")
        except SeqpackError as exc:
            return CheckResult("fits", False, f"{spec['data']} at {cfg.seq_length}: {exc.message}")
    acc = prepared.manifest["splits"]["training"]["accounting"]
    ok = not acc.get("truncated") and not acc.get("skipped")
    return CheckResult("fits", ok, f"{spec['data']} at {cfg.seq_length} tokens: {acc}")


def _bridge_requests(p: _Pending, lane: Any) -> None:
    outcome = p.task.outcome
    checks = outcome.get("checks", {})
    if "bridge" in checks and p.config is not None:
        from seqpack_lane.bridge_config import bridge_spec

        root = lane.path(f"grade-{len(p.lane)}-{hashlib.sha1(str(p.workdir).encode()).hexdigest()[:10]}")
        p.lane.append(("bridge", {"op": "validate.run", "case": {"id": p.task.id,
                                                                 "spec": bridge_spec(p.config, str(root)).spec}}))
    if outcome["kind"] == "recipe" and p.config_dict is not None:
        read = sorted(set(checks.get("require", {})) | set(checks.get("keep", [])) | set(checks.get("divisible", {})))
        case = {"id": p.task.id, "recipe": outcome["recipe"], "assignments": p.config_dict["assignments"], "read": read,
                "world_size": outcome.get("world_size"), "dump": True}
        p.lane.append(("bridge", {"op": "grading.recipe_overrides", "case": case}))
        p.lane.append(("recipe_base", {"op": "grading.recipe_overrides",
                                       "case": {**case, "id": p.task.id + "#base", "assignments": [], "dump": False}}))
    if outcome["kind"] == "packs" and p.config_dict is not None:
        spec = checks["packs"]
        p.lane.append(("packs", {"op": "readers.collate", "case": _reader_case(p.config_dict["parquet"], spec, lane)}))


def _reader_case(parquet: str, spec: Mapping[str, Any], lane: Any) -> dict:
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(parquet).metadata.num_rows
    return {"path": parquet, "tokenizer": str(grading_tokenizer(lane.path("grading-tokenizer"))),
            "seq_length": int(spec["pack_size"]), "packed_sequence_size": int(spec["pack_size"]),
            "pad_seq_to_mult": pack_multiple(spec), "batches": [[i] for i in range(rows)],
            "params": True}


def grading_tokenizer(folder: Path) -> Path:
    """A tiny Hugging Face tokenizer folder for Bridge's packed reader (which reads only its special ids)."""
    if (folder / "tokenizer.json").is_file():
        return folder
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{str(i): i + 3 for i in range(10)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "pad_token": "<pad>",
        "unk_token": "<unk>"}), encoding="utf-8")
    return folder


def _run_lane(pending: Sequence[_Pending], lane: Any) -> dict[tuple[int, int], dict]:
    """Send every request, one worker call per op; answers keyed by (artifact index, request index)."""
    by_op: dict[str, list[tuple[tuple[int, int], dict]]] = {}
    for i, p in enumerate(pending):
        for j, (_name, req) in enumerate(p.lane):
            by_op.setdefault(req["op"], []).append(((i, j), req["case"]))
    out: dict[tuple[int, int], dict] = {}
    for op, items in by_op.items():
        cases = [c for _, c in items]
        if op == "grading.recipe_overrides":
            answers = lane.call(op, cases=cases, scratch=str(lane.path("recipe-scratch")))
        else:
            answers = lane.call(op, cases=cases)
        for (key, _), answer in zip(items, answers):
            out[key] = answer
    return out


def _judge_lane(p: _Pending, answers: Mapping[int, dict]) -> None:
    outcome = p.task.outcome
    checks = outcome.get("checks", {})
    add = p.grade.checks.append
    named = {name: answers[j] for j, (name, _req) in enumerate(p.lane) if j in answers}
    if "bridge" in named:
        a = named["bridge"]
        if outcome["kind"] == "recipe" and not a.get("built", True):
            add(CheckResult("recipe", False, f"{outcome['recipe']} did not build: {a.get('message', '')[:200]}"))
            return
        want = checks.get("bridge", "accepts")
        raised = bool(a.get("raises"))
        ok = raised if want == "rejects" else not raised
        what = f"{a.get('type')}: {a.get('message', '')[:240]}" if raised else "accepted"
        add(CheckResult("bridge", ok, f"{UPSTREAM_VERSION} runtime_config_update: {what} (asked: {want})"))
        if outcome["kind"] == "recipe" and not raised:
            values = a.get("values", {})
            base = named.get("recipe_base", {}).get("values", {})
            for dotted, want_v in (checks.get("require") or {}).items():
                add(CheckResult("require", _same(values.get(dotted), want_v),
                                f"{dotted} = {values.get(dotted)!r} (asked: {want_v!r})"))
            for dotted in checks.get("keep") or []:
                add(CheckResult("keep", _same(values.get(dotted), base.get(dotted)),
                                f"{dotted} = {values.get(dotted)!r} (recipe: {base.get(dotted)!r})"))
            for dotted, n in (checks.get("divisible") or {}).items():
                got = values.get(dotted)
                ok = isinstance(got, int) and not isinstance(got, bool) and got > 0 and got % int(n) == 0
                add(CheckResult("divisible", ok, f"{dotted} = {got!r} must be a positive multiple of {n}"))
        if outcome["kind"] == "recipe":  # seqpack's verdict, whether Bridge accepted the result or not
            add(_recipe_verdict(a, outcome.get("world_size")))
    if "packs" in named:
        add(_judge_packs(named["packs"], checks["packs"]))


def _recipe_verdict(answer: Mapping[str, Any], world_size: Any) -> CheckResult:
    """seqpack's own verdict on the recipe with the override applied: Bridge's dump of the built config, read as a
    seqpack config (:mod:`seqpack.config.bridge_dump`) with the task's world size, validated for 0.6.2."""
    from seqpack.config.bridge_dump import from_bridge_dump
    from seqpack.config.load import load_config
    from seqpack.config.validate import validate_config

    if not answer.get("dump"):
        return CheckResult("seqpack", False, f"no config dump to check ({answer.get('dump_error', 'none returned')})")
    try:
        data, _notes = from_bridge_dump(yaml.safe_load(answer["dump"]))
        world = answer.get("world_size") or world_size  # what the lane launched the recipe with
        if world:
            data.setdefault("dist", {})["world_size"] = int(world)
        report = validate_config(load_config(data), bridge_version="0.6.2")
    except (SeqpackError, yaml.YAMLError) as exc:
        return CheckResult("seqpack", False, f"seqpack could not read Bridge's dump: {getattr(exc, 'message', exc)}")
    ids = [v.rule_id for v in report.violations]
    return CheckResult("seqpack", not ids, "seqpack validate of Bridge's dump: " +
                       ("no error" if not ids else "errors " + ", ".join(ids)))


def pack_multiple(spec: Mapping[str, Any]) -> int:
    """The multiple every physical sequence must be padded to, as the task asks (``alignment`` in its spec).

    ``required`` (the minimum megatron-bridge 0.6.2 / Transformer Engine needs): 2*CP for each CP size the packs are
    split by (train and eval); Transformer Engine's THD CP partition cuts each sequence into 2*CP chunks, and
    sequence parallelism splits whole rows, not each sequence. ``recommended`` (the default; what ``seqpack align``
    derives and ``seqpack inspect`` checks): lcm(2*CP, CP*TP under SP) over train and eval CP. Both come from
    :func:`seqpack.core.alignment.alignment_requirement` (offline); a task's prompt says which one it asks for.
    """
    from seqpack.core.alignment import alignment_requirement

    req = alignment_requirement("offline", int(spec.get("tp", 1)), int(spec.get("cp", 1)), bool(spec.get("sp", False)),
                                int(spec["eval_cp"]) if spec.get("eval_cp") else None)
    return int(req.required if spec.get("alignment", "recommended") == "required" else req.recommended)


def _inspect_packs(parquet: Path, spec: Mapping[str, Any]) -> CheckResult:
    """seqpack's own verdict on the packs: ``seqpack inspect`` with the task's topology finds them intact, of the
    asked pack size and usable (every sequence a multiple of :func:`pack_multiple`)."""
    from seqpack.verbs.inspection import inspect_packed_dataset

    topology = {"tp": int(spec.get("tp", 1)), "cp": int(spec.get("cp", 1)), "sp": bool(spec.get("sp", False))}
    if spec.get("eval_cp"):
        topology["eval_cp"] = int(spec["eval_cp"])
    try:
        report = inspect_packed_dataset(parquet, topology)
    except SeqpackError as exc:
        return CheckResult("inspect", False, f"seqpack inspect: {exc.message}")
    size = report.settings.get("pack_size")
    need = pack_multiple(spec)
    problems = [f"{report.issue_count} integrity issue(s)"] if not report.ok else []
    if size != int(spec["pack_size"]):
        problems.append(f"pack size {size}, asked {spec['pack_size']}")
    if not (report.topology or {}).get("usable") and need == report.topology["alignment"]["pad_seq_to_mult"]:
        problems += report.topology.get("reasons", [])[:2]
    return CheckResult("inspect", not problems, "seqpack inspect: intact, pack size {0}, usable for {1}".format(
        size, topology) if not problems else "seqpack inspect: " + "; ".join(problems))


def _flat(value: Any) -> list[Any]:
    """The flat values of a tensor in the lane's JSON form (``{"__t__", "s", "d"}``), or of a nested list."""
    if isinstance(value, dict) and "d" in value:
        return list(value["d"])
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]


def _judge_packs(answer: Mapping[str, Any], spec: Mapping[str, Any]) -> CheckResult:
    """Bridge's collate of every row: each physical sequence a multiple of the topology's, every sample there."""
    if answer.get("raises"):
        return CheckResult("packs", False, f"Bridge's reader: {answer.get('type')}: {answer.get('message', '')[:200]}")
    m = pack_multiple(spec)
    segments, bad = 0, []
    for k, (batch, params) in enumerate(zip(answer.get("batches", []), answer.get("params", []))):
        if batch.get("raises") or not isinstance(params, dict) or params.get("raises"):
            what = batch if batch.get("raises") else (params or {})
            return CheckResult("packs", False, f"Bridge's collate / get_packed_seq_params of row {k}: "
                               f"{what.get('type')}: {what.get('message', '')[:200]}")
        real = [int(x) for x in _flat(params["cu_seqlens_q"])]
        padded = real if params.get("cu_seqlens_q_padded") is None else [int(x) for x in
                                                                          _flat(params["cu_seqlens_q_padded"])]
        segments += sum(1 for a, b in zip(real, real[1:]) if b > a)
        bad += [(k, b - a) for a, b in zip(padded, padded[1:]) if (b - a) % m]
    want = spec.get("samples")
    if bad:
        return CheckResult("packs", False, f"get_packed_seq_params: {len(bad)} physical sequence(s) not a multiple of {m} "
                           f"(row {bad[0][0]}: {bad[0][1]} tokens); the CP/SP split needs every one divisible")
    if want is not None and segments != int(want):
        return CheckResult("packs", False, f"Bridge's packed reader sees {segments} sequences, the data has {want}")
    return CheckResult("packs", True, f"{len(answer.get('batches', []))} rows read by megatron-bridge 0.6.2's "
                       f"GPTSFTPackedParquetDataset + collate, {segments} sequences, each a multiple of {m}")


def grade_outcomes(items: Sequence[tuple[Any, Path]], lane: Any = None) -> list[OutcomeGrade]:
    """Grade the artifact each ``(task, workdir)`` left; upstream checks batched through ``lane``.

    ``lane``: an :class:`~seqpack_lane.client.UpstreamLane`, or None to start one when a
    check needs it (and close it afterwards). When no lane can be started, the upstream checks are
    reported as skipped (``ok`` None) and no artifact that needs them counts as right.
    """
    pending = []
    for task, workdir in items:
        originals = task.outcome.get("inputs", {})
        p = _Pending(task, Path(workdir), OutcomeGrade(task.id))
        try:
            _local_checks(p, originals)
        except SeqpackError as exc:
            p.grade.checks.append(CheckResult("loads", False, exc.message))
        pending.append(p)
    wants_lane = [p for p in pending if p.config_dict is not None and _needs_lane(p.task)]
    own = None
    if wants_lane:
        if lane is None:
            from seqpack_lane.build import LaneError
            from seqpack_lane.client import UpstreamLane

            try:
                lane = own = UpstreamLane()
            except LaneError as exc:
                for p in wants_lane:
                    p.grade.checks.append(CheckResult("bridge", None, f"skipped: upstream lane not available ({exc})"))
                return [p.grade for p in pending]
        try:
            for p in wants_lane:
                _bridge_requests(p, lane)
            answers = _run_lane(wants_lane, lane)
            for i, p in enumerate(wants_lane):
                _judge_lane(p, {j: a for (k, j), a in answers.items() if k == i})
        finally:
            if own is not None:
                own.close()
    return [p.grade for p in pending]


def _needs_lane(task: Any) -> bool:
    outcome = task.outcome
    return "bridge" in outcome.get("checks", {}) or outcome["kind"] in ("recipe", "packs")


__all__ = ["Artifact", "CHECKS", "build", "task_from_entry", "CheckResult", "KINDS", "OutcomeGrade", "UPSTREAM_VERSION", "config_text",
           "edited", "get_dotted", "grade_outcomes", "grading_tokenizer", "load_specs", "materialise",
           "outcome_dir", "pack_multiple", "parse_override"]

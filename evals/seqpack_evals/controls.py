"""Degenerate controls of the outcome tasks: cheap artifacts that must never pass.

For every outcome task (:mod:`seqpack_evals.outcome`) four artifacts an agent could leave without solving anything:

* ``empty``: the artifact exists and is empty (an empty packs folder);
* ``unchanged``: the input handed back as it was (the task's config, its ``override.py`` or ``def apply(cfg):
  pass``, a plan of the input's own length and batch, the JSONL data copied into the packs folder);
* ``example``: seqpack's bundled example for the task's path (``seqpack validate --example``), as a config, a plan
  of its length and batch or an override setting its batch sizes; packs of the bundled demo data;
* ``off_prompt``: an artifact valid for seqpack but against the prompt: the oracle with one field it was not asked to
  change moved to another valid value (or, where the agent writes the whole config, one asked-for value moved), an
  override that also sets a field nobody asked for, a plan with the same token slots at another length, packs at
  another pack size.

:func:`controls` builds them; ``tests/test_evals_outcome.py`` grades every control of every task through the lane
and requires each to fail (the degenerate-control table of ``docs/evals.md``).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import yaml

from seqpack_evals.outcome import Artifact, allowed_fields, config_text, get_dotted, parse_override

KINDS: tuple[str, ...] = ("empty", "unchanged", "example", "off_prompt")
#: The bundled example config of each packing path (``reference_impl/seqpack/config/examples``).
EXAMPLES: dict[str, str] = {"offline": "offline_8k_tp4_cp2_sp", "in_batch": "in_batch_mbs4",
                            "energon": "energon_qwen_vl", "global_batch": "global_batch_cp2"}
#: Fields an off-prompt config moves (doubled), in order: the first one the task did not ask to change and whose
#: doubled value seqpack still accepts.
PERTURB: tuple[str, ...] = ("train.global_batch_size", "dist.world_size", "validation.eval_global_batch_size",
                            "model.seq_length")


def _example(task: Any) -> dict:
    from seqpack.config.examples import example_path

    name = next((EXAMPLES[p] for p in task.paths if p in EXAMPLES), EXAMPLES["offline"])
    return yaml.safe_load(example_path(name).read_text(encoding="utf-8"))


def _clean(data: Mapping[str, Any], version: str = "0.6.2") -> bool:
    from seqpack.config.load import load_config
    from seqpack.config.validate import validate_config
    from seqpack.core.errors import SeqpackError

    try:
        return not validate_config(load_config(dict(data)), bridge_version=version).violations
    except SeqpackError:
        return False


def _set(data: dict, dotted: str, value: Any) -> dict:
    out = copy.deepcopy(data)
    node = out
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _moved(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2
    return None


def _off_prompt_config(task: Any, oracle: dict) -> dict | None:
    """The oracle with one field moved (module docstring); None when no such valid artifact exists."""
    checks = task.outcome["checks"]
    version = str(checks.get("seqpack") or "").partition("@")[2] or "0.6.2"
    allowed = allowed_fields(checks)
    has_input = bool(task.outcome.get("config_input"))
    fields = [f for f in PERTURB if not any(f == a or f.startswith(a + ".") for a in allowed)] if has_input \
        else list((checks.get("require") or {}))
    for dotted in fields:
        value = _moved(get_dotted(oracle, dotted))
        if value is None:
            continue
        moved = _set(oracle, dotted, value)
        if dotted == "model.seq_length" and get_dotted(oracle, "dataset.seq_length") is not None:
            moved = _set(moved, "dataset.seq_length", value)
        if _clean(moved, version):
            return moved
    return None


def _config_controls(task: Any, oracle_files: Mapping[str, str]) -> dict[str, Artifact]:
    o = task.outcome
    name = o["artifact"]
    source = o["inputs"].get(o.get("config_input") or "")
    oracle = yaml.safe_load(oracle_files[name]) if name in oracle_files else None
    out = {"empty": Artifact({name: ""})}
    example = _example(task)
    if o["kind"] == "plan":
        base = yaml.safe_load(source)
        seq, gbs = base["model"]["seq_length"], base["train"]["global_batch_size"]
        out["unchanged"] = Artifact({name: f"seq_length: {seq}\nglobal_batch_size: {gbs}\n"})
        out["example"] = Artifact({name: f"seq_length: {example['model']['seq_length']}\n"
                                         f"global_batch_size: {example['train']['global_batch_size']}\n"})
        plan = yaml.safe_load(oracle_files[name])
        out["off_prompt"] = Artifact({name: f"seq_length: {plan['seq_length'] * 2}\n"
                                            f"global_batch_size: {max(1, plan['global_batch_size'] // 2)}\n"})
        return out
    if source is not None:
        out["unchanged"] = Artifact({name: source})
    out["example"] = Artifact({name: config_text(example)})
    moved = _off_prompt_config(task, oracle) if oracle else None
    if moved is not None:
        out["off_prompt"] = Artifact({name: config_text(moved)})
    return out


#: The fields of a bundled example an "example" override copies onto a recipe.
EXAMPLE_FIELDS: tuple[str, ...] = ("model.tensor_model_parallel_size", "model.context_parallel_size",
                                   "model.sequence_parallel", "model.seq_length", "dataset.seq_length",
                                   "train.micro_batch_size", "train.global_batch_size")


def _recipe_controls(task: Any, oracle_files: Mapping[str, str], inputs: Mapping[str, str]) -> dict[str, Artifact]:
    o = task.outcome
    name = o["artifact"]
    example = _example(task)
    assignments = parse_override(oracle_files[name])
    extra = "    cfg.train.train_iters = 123\n" if "train.train_iters" not in allowed_fields(o["checks"]) else \
        "    cfg.train.eval_iters = 7\n"
    copied = [(f, get_dotted(example, f)) for f in EXAMPLE_FIELDS if get_dotted(example, f) is not None]
    return {
        "empty": Artifact({name: ""}),
        "unchanged": Artifact({name: inputs.get(name) or "def apply(cfg):\n    pass\n"}),
        "example": Artifact({name: "def apply(cfg):\n" + "".join(f"    cfg.{k} = {v!r}\n" for k, v in copied)}),
        "off_prompt": Artifact({name: "def apply(cfg):\n" + "".join(f"    cfg.{k} = {v!r}\n" for k, v in assignments)
                                + extra}),
    }


def _packs_controls(task: Any) -> dict[str, Artifact]:
    from seqpack.data.demo import demo_path

    o = task.outcome
    name = o["artifact"]
    data = next(n for n in o["inputs"] if n.endswith(".jsonl")) if o["inputs"] else None
    command = list(task.outcome["oracle"].get("command") or [])
    size = command.index("--pack-size") + 1 if "--pack-size" in command else None
    out = {"empty": Artifact({f"{name}/.keep": ""})}
    if data:
        out["unchanged"] = Artifact({f"{name}/{data}": o["inputs"][data]})
    schema = "chat" if "chat" in (data or "") else "prompt_completion"
    out["example"] = Artifact({}, ["pack", str(demo_path(schema)), "--out", name,
                                   "--pack-size", command[size] if size else "4096"])
    if size:
        off = list(command)
        off[size] = str(int(command[size]) // 2)
        out["off_prompt"] = Artifact({}, off)
    return out


def _inputs(task: Any, root: Any) -> dict[str, str]:
    """The task's input files as the agent gets them (name -> text; binary files left out)."""
    from pathlib import Path

    from seqpack_evals.tasks import default_evals_dir

    base = Path(root) if root is not None else default_evals_dir()
    out = {}
    for rel in task.files:
        try:
            out[rel.split("/", 2)[2]] = (base / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


def controls(task: Any, root: Any = None) -> dict[str, Artifact]:
    """The degenerate artifacts of one outcome task, by kind (:data:`KINDS`; a kind that cannot be built for the
    task, such as ``unchanged`` where the agent writes the whole config, is left out). ``root``: the task set's
    folder (default: the checkout's ``evals/``), where the input files are."""
    o = task.outcome
    oracle_files = (o.get("oracle") or {}).get("files") or {}
    if o["kind"] in ("config", "plan"):
        return _config_controls(task, oracle_files)
    if o["kind"] == "recipe":
        return _recipe_controls(task, oracle_files, _inputs(task, root))
    return _packs_controls(task)


def lay_out(task: Any, artifact: Artifact, dataset_root: Any, work: Any) -> Any:
    """``work`` (a new folder) holding the task's input files and ``artifact``, as an agent would leave them."""
    import shutil
    from pathlib import Path

    work = Path(work)
    work.mkdir(parents=True)
    for rel in task.files:
        target = work / rel.split("/", 2)[2]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(dataset_root) / rel, target)
    artifact.write(work)
    return work


def grade_controls(tasks: Any, dataset_root: Any, scratch: Any, lane: Any = None) -> list[dict[str, Any]]:
    """Grade every control of every outcome task in one batch; one row per (task, kind): ``ok`` and the failed
    checks."""
    from pathlib import Path

    from seqpack_evals.outcome import grade_outcomes

    items = []
    for task in tasks:
        for kind, artifact in controls(task, dataset_root).items():
            items.append((task, kind, lay_out(task, artifact, dataset_root, Path(scratch) / task.id / kind)))
    grades = grade_outcomes([(t, w) for t, _k, w in items], lane)
    return [{"task": t.id, "kind": k, "ok": g.ok, "failed": g.failed, "skipped": g.skipped}
            for (t, k, _w), g in zip(items, grades)]


def table(rows: Any) -> str:
    """The degenerate-control table: per kind, the tasks it was built for, how many failed, and by which checks."""
    from collections import Counter

    from seqpack.core.textfmt import markdown_table

    out = []
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        by = Counter(c for r in mine for c in dict.fromkeys(r["failed"]))
        out.append([kind, len(mine), sum(not r["ok"] for r in mine), sum(r["ok"] for r in mine),
                    ", ".join(f"{c} {n}" for c, n in by.most_common(5))])
    return markdown_table(["control", "tasks", "fail (as they must)", "pass", "failed checks (most common)"], out)


def main() -> int:
    """``python -m seqpack_evals.controls``: grade every degenerate control through the upstream lane, print the
    table (exit 1 when one passes)."""
    import sys
    import tempfile

    from seqpack_evals.tasks import load_tasks

    dataset = load_tasks()
    tasks = [t for t in dataset.tasks if t.outcome]
    with tempfile.TemporaryDirectory(prefix="seqpack-controls-") as tmp:
        rows = grade_controls(tasks, dataset.root, tmp)
    print(table(rows))
    passing = [f"{r['task']} ({r['kind']})" for r in rows if r["ok"] or r["skipped"]]
    if passing:
        print("passed or not graded: " + ", ".join(passing), file=sys.stderr)
    return 1 if passing else 0


__all__ = ["EXAMPLES", "KINDS", "PERTURB", "controls", "grade_controls", "lay_out", "main", "table"]


if __name__ == "__main__":
    raise SystemExit(main())

"""No answer reaches the agent: the installed skill (and every copy of it) holds no part of the answer key, the run
directory holds only the public task list, and an agent that only looks its prompt up scores nothing.

The negative control runs the same lookup agent against a skill folder that still ships the old export (reference
answers beside the prompts): there it scores, so a 0 % with the real skill means no answer is reachable, not that the
lookup agent cannot find one."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from seqpack_evals.runner import RunOptions, run_eval
from seqpack_evals.scoring import score_run
from seqpack_evals.tasks import Dataset, Task, load_tasks

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "skills" / "megatron-sequence-packing"
PLUGIN_SKILL = ROOT / "plugins" / "seqpack" / "skills" / "megatron-sequence-packing"
AGENTS = ROOT / "evals" / "seqpack_evals" / "agents.py"
#: The lookup agent as the sandbox runs it: its own file, shown to it read-only (it needs nothing else of the harness).
LOOKUP = f"python {AGENTS} lookup"
#: JSON keys that only the answer key has.
KEY_MARKERS = ('"expected_output"', '"answer_fields"', '"ground_truth"', '"assertions"', '"oracle"', '"negative"')
#: One task per bucket and kind of input, for the fast run of the lookup agent.
SAMPLE = ["explicit-align-tp4-cp2-sp", "implicit-in-batch-mbs1", "ctx-broken-offline-cp2",
          "ctx-log-pack-malformed-json", "nm-struct-pack", "up-stored-length"]


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return load_tasks(ROOT / "evals" / "tasks.json")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def answer_fingerprints(task: Task) -> list[str]:
    """Strings that only a copy of ``task``'s answer would contain: its reference prose, its filled answer block
    and the text of its oracle artifact (outcome tasks) where it differs from the task's own inputs."""
    prose, _, block = task.expected_output.partition("```answer")
    out = []
    prose = _norm(prose)
    if len(prose) >= 40:
        out.append(prose[:160])
    if block.strip():
        out.append(_norm("```answer" + block))
    outcome = getattr(task, "outcome", None) or {}
    inputs = set(outcome.get("inputs", {}).values())
    for text in (outcome.get("oracle", {}) or {}).get("files", {}).values():  # the negative is no answer
        if _norm(text) and text not in inputs and len(_norm(text)) >= 20:
            out.append(_norm(text))
    return out


def _texts(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            try:
                out[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return out


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def leaks(texts: dict[str, str], dataset: Dataset) -> list[str]:
    """``file: what`` for every answer fingerprint or answer-key marker found in ``texts``."""
    found = []
    prints = [(t.id, p) for t in dataset.tasks for p in answer_fingerprints(t)]
    for name, text in texts.items():
        flat = _norm(text)
        if name.endswith(".json"):  # JSON escapes quotes and newlines: read its strings as well
            try:
                flat += " " + " ".join(_norm(v) for v in _strings(json.loads(text)))
            except ValueError:
                pass
        found += [f"{name}: answer-key field {m}" for m in KEY_MARKERS if m in text and name.endswith(".json")]
        found += [f"{name}: the answer of {task_id}" for task_id, p in prints if p in flat]
    return found


def test_fingerprints_find_an_old_style_export(dataset, tmp_path):
    """Negative control of the leak check: the export as it was (answers beside the prompts) is caught."""
    doc = {"evals": [{"id": t.id, "prompt": t.prompt, "expected_output": t.expected_output} for t in dataset.tasks]}
    found = leaks({"evals/evals.json": json.dumps(doc, ensure_ascii=False)}, dataset)
    assert len({f.split("answer of ")[-1] for f in found if "answer of" in f}) >= len(dataset.tasks) * 0.9


@pytest.mark.parametrize("root", [SKILL, PLUGIN_SKILL], ids=["skill", "plugin-copy"])
def test_no_installed_file_holds_an_answer(dataset, root):
    assert (root / "SKILL.md").is_file()
    assert leaks(_texts(root), dataset) == []


def test_the_skill_ships_no_task_set():
    """Nothing of the task set is installed: no evals/ folder in the skill or its plugin copy."""
    for root in (SKILL, PLUGIN_SKILL):
        assert not (root / "evals").exists()


def test_the_public_export_holds_prompts_and_inputs_only(dataset, tmp_path):
    from seqpack_evals.tasks import export_agentskills

    export_agentskills(dataset, tmp_path / "ev")
    doc = json.loads((tmp_path / "ev" / "evals.json").read_text(encoding="utf-8"))
    assert doc["evals"] and all(set(e) == {"id", "prompt", "files"} for e in doc["evals"])
    # an input file is no answer, even where it equals another task's oracle (a valid config is both)
    texts = {k: v for k, v in _texts(tmp_path / "ev").items() if not k.startswith("files/")}
    assert leaks(texts, dataset) == []
    assert leaks({"evals.json": (tmp_path / "ev" / "evals.json").read_text(encoding="utf-8")}, dataset) == []


@pytest.mark.slow
def test_the_wheel_ships_no_answer(dataset, built_dists):
    with zipfile.ZipFile(built_dists[1]) as wheel:
        names = [n for n in wheel.namelist() if "/skill_assets/" in n]
        texts = {}
        for name in names:
            try:
                texts[name] = wheel.read(name).decode("utf-8")
            except UnicodeDecodeError:
                continue
        assert any(n.endswith("/SKILL.md") for n in names)
        assert not any(n.endswith("evals/tasks.json") for n in wheel.namelist())
    assert leaks(texts, dataset) == []


def _lookup_scores(dataset: Dataset, ids: list[str], out: Path, skill_dir: Path, env: Path,
                   lane=None) -> dict[str, float]:
    run_eval(dataset, dataset.select(ids), LOOKUP, out, mode="skill", timeout=60, skill_dir=skill_dir,
             options=RunOptions(read_only=[str(AGENTS)], product_env=env))
    return {t.task_id: t.scores["correctness"] for t in score_run(out, lane=lane).tasks}


def _old_style_skill(dataset: Dataset, target: Path) -> Path:
    """The skill folder with the export as it used to be (reference answers beside the prompts)."""
    import shutil

    shutil.copytree(SKILL, target)
    keys = ("id", "prompt", "expected_output", "assertions", "files", "expected_skill", "expected_script")
    doc = {"skill_name": dataset.skill_name, "evals": [{k: t.to_dict()[k] for k in keys} for t in dataset.tasks]}
    (target / "evals").mkdir()
    (target / "evals" / "evals.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    return target


@pytest.mark.slow
def test_lookup_agent_scores_nothing_with_the_real_skill(dataset, tmp_path, eval_env):
    scores = _lookup_scores(dataset, SAMPLE, tmp_path / "real", SKILL, eval_env)
    assert scores == {task_id: 0.0 for task_id in SAMPLE}
    leaky = _lookup_scores(dataset, SAMPLE, tmp_path / "leaky", _old_style_skill(dataset, tmp_path / "old-skill"),
                           eval_env)
    assert sum(leaky.values()) / len(leaky) >= 0.8, leaky  # the control: with answers reachable it scores


@pytest.mark.slow
def test_lookup_agent_scores_nothing_on_any_task(dataset, tmp_path, upstream, eval_env):
    """Every task, the outcome ones included (an input left as it was is graded, through the lane, and fails)."""
    scores = _lookup_scores(dataset, [t.id for t in dataset.tasks], tmp_path / "all", SKILL, eval_env, lane=upstream)
    assert {k: v for k, v in scores.items() if v > 0} == {}

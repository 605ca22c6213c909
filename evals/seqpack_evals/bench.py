"""``seqpack eval bench``: paired, repeated runs of one agent with and without the skill, summarised in ``benchmark.json``.

For each of ``repeats`` (at least 3) rounds the agent runs every selected task twice, once with the skill
installed and once without (``OUT/skill-<k>/`` and ``OUT/baseline-<k>/``, each a normal run directory that
``seqpack eval score`` and ``report`` read), and every run is scored. ``OUT/benchmark.json`` then holds, per task,
per bucket and overall, for each mode: the mean and the sample standard deviation over the repeats of the overall
score and of correctness, the pass rate, the mean tokens (as the agent's output reports them: input, output and
total) and the mean wall time per task, plus the with-skill minus without-skill uplift of the means. The agent
learns the round from ``SEQPACK_EVAL_REPEAT`` (1-based). A live benchmark is an agent CLI
(``--agent-cmd 'claude -p {prompt} --output-format stream-json --verbose'``); the tests drive a scripted fake
agent, as no model runs on the build machine.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from seqpack.core.errors import UsageError
from seqpack_evals.tasks import BUCKETS, Dataset, Task, dumps

FORMAT = "seqpack-benchmark/1"
MIN_REPEATS = 3
MODES: tuple[str, ...] = ("skill", "baseline")


def _stats(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (n - 1), rounded."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": round(mean, 4), "std": round(std, 4)}


def _tokens(usage: dict[str, Any]) -> dict[str, float]:
    """Input, output and total tokens of one transcript's usage record (Anthropic or OpenAI key names)."""
    inp = sum(float(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                  "cache_creation_input_tokens", "prompt_tokens"))
    out = sum(float(usage.get(k) or 0) for k in ("output_tokens", "completion_tokens"))
    return {"input": inp, "output": out, "total": inp + out}


def _observations(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Per task of one scored run: overall, correctness, passed, tokens and wall time."""
    from seqpack_evals.scoring import read_scores
    from seqpack_evals.transcript import read_transcript

    scores = read_scores(run_dir)
    out = {}
    for t in scores.tasks:
        path = run_dir / "transcripts" / f"{t.task_id}.json"
        tr = read_transcript(path) if path.is_file() else None
        out[t.task_id] = {"bucket": t.bucket, "overall": t.overall, "correctness": t.scores["correctness"],
                          "passed": float(t.passed), "tokens": _tokens(tr.usage if tr else {}),
                          "wall_s": float(tr.duration_s) if tr else 0.0}
    return out


def _block(obs: Sequence[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """Statistics of one mode over the repeats: ``obs`` holds one observation per (task, repeat)."""
    by_repeat: dict[int, list[dict[str, Any]]] = {}
    for o in obs:
        by_repeat.setdefault(o["repeat"], []).append(o)
    means = {k: [sum(o[k] for o in rs) / len(rs) for rs in by_repeat.values()] for k in ("overall", "correctness",
                                                                                          "passed", "wall_s")}
    tokens = [sum(o["tokens"]["total"] for o in rs) / len(rs) for rs in by_repeat.values()]
    return {"repeats": repeats, "tasks": len(obs) // max(1, repeats),
            "overall": _stats(means["overall"]), "correctness": _stats(means["correctness"]),
            "pass_rate": _stats(means["passed"]), "tokens": _stats(tokens), "wall_s": _stats(means["wall_s"])}


def summarise(run_dirs: dict[str, list[Path]], dataset: Dataset, agent_cmd: str) -> dict[str, Any]:
    """``benchmark.json`` from scored run directories (mode -> one directory per repeat, in repeat order)."""
    repeats = {len(v) for v in run_dirs.values()}
    if len(repeats) != 1 or min(repeats) < MIN_REPEATS:
        raise UsageError(f"a benchmark needs the same number of repeats (at least {MIN_REPEATS}) in every mode, "
                         f"got {({k: len(v) for k, v in run_dirs.items()})}", field="repeats")
    n = repeats.pop()
    obs: dict[str, list[dict[str, Any]]] = {}
    for mode, dirs in run_dirs.items():
        for k, d in enumerate(dirs, 1):
            for task_id, o in _observations(Path(d)).items():
                obs.setdefault(mode, []).append({"task": task_id, "repeat": k, **o})
    tasks = sorted({o["task"] for rows in obs.values() for o in rows})
    buckets = {o["task"]: o["bucket"] for rows in obs.values() for o in rows}

    def uplift(block: dict[str, dict[str, Any]]) -> dict[str, float] | None:
        if not all(m in block for m in MODES):
            return None
        return {k: round(block["skill"][k]["mean"] - block["baseline"][k]["mean"], 4)
                for k in ("overall", "correctness", "pass_rate")}

    def section(select: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        block = {mode: _block([o for o in rows if select(o)], n) for mode, rows in obs.items()
                 if any(select(o) for o in rows)}
        block["uplift"] = uplift(block)
        return block

    return {
        "format": FORMAT,
        "agent_cmd": agent_cmd,
        "repeats": n,
        "intervals": intervals(obs, buckets),
        "dataset_sha256": __import__("hashlib").sha256(dumps(dataset).encode()).hexdigest(),
        "runs": {mode: [str(Path(d).name) for d in dirs] for mode, dirs in run_dirs.items()},
        "statistics": "mean over repeats of the per-repeat mean over tasks; std: sample standard deviation (n-1) "
                      "of those per-repeat means; tokens: total (input + output) per task as the agent reports",
        "overall": section(lambda o: True),
        "per_bucket": {b: section(lambda o, b=b: o["bucket"] == b) for b in BUCKETS if b in buckets.values()},
        "per_task": {t: {"bucket": buckets[t], **section(lambda o, t=t: o["task"] == t)} for t in tasks},
    }


MEASURES: tuple[str, ...] = ("correctness", "overall", "passed")


def _by_task(rows: Sequence[dict[str, Any]], key: str, select: Callable[[dict[str, Any]], bool]) -> dict[str, list]:
    out: dict[str, list] = {}
    for o in rows:
        if select(o):
            out.setdefault(o["task"], []).append(float(o[key]))
    return out


def _interval_block(obs: dict[str, list[dict[str, Any]]], select: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    from seqpack_evals.stats import bootstrap_mean, paired_difference, pass_at_ks

    block: dict[str, Any] = {mode: {k: bootstrap_mean(_by_task(rows, k, select)) for k in MEASURES}
                             for mode, rows in obs.items()}
    for mode, rows in obs.items():
        block[mode]["pass_at_k"] = pass_at_ks(_by_task(rows, "passed", select))
    if all(m in obs for m in MODES):
        block["uplift"] = {k: paired_difference(_by_task(obs["skill"], k, select), _by_task(obs["baseline"], k, select))
                           for k in MEASURES}
    return block


def intervals(obs: dict[str, list[dict[str, Any]]], buckets: dict[str, str]) -> dict[str, Any]:
    """95 % bootstrap intervals over tasks and repeats (:mod:`seqpack_evals.stats`) of correctness, the overall score
    and the pass rate per mode, the paired with-minus-without-skill difference with its interval, and pass@k; overall
    and per bucket."""
    from seqpack_evals.stats import LEVEL, REPLICATES, SEED

    return {"method": f"percentile bootstrap, {REPLICATES} replicates (seed {SEED}), tasks drawn with replacement and "
                      f"each drawn task's repeats with replacement; level {LEVEL}; the difference pairs each task "
                      "with itself",
            "overall": _interval_block(obs, lambda o: True),
            "per_bucket": {b: _interval_block(obs, lambda o, b=b: o["bucket"] == b) for b in BUCKETS
                           if b in buckets.values()}}


def run_benchmark(
    dataset: Dataset,
    tasks: Sequence[Task],
    agent_cmd: str,
    out_dir: str | os.PathLike[str],
    *,
    repeats: int = MIN_REPEATS,
    timeout: float = 600.0,
    skill_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    options: Any = None,
    skip_outcome: bool = False,
) -> dict[str, Any]:
    """Run, score and summarise the paired repeats; writes ``OUT/benchmark.json`` and returns it. ``options``: how
    the agents are confined (:class:`~seqpack_evals.runner.RunOptions`; one product environment serves every run)."""
    from dataclasses import replace

    from seqpack_evals.runner import RunOptions, prepare_run_dir, run_eval
    from seqpack_evals.scoring import score_run

    if repeats < MIN_REPEATS:
        raise UsageError(f"--repeats must be at least {MIN_REPEATS} (a standard deviation needs repeats), got {repeats}",
                         field="repeats")
    out = prepare_run_dir(out_dir)
    options = options or RunOptions()
    if options.product_env is None:  # made once, for every run of the benchmark
        from seqpack_evals.sandbox import build_product_env

        build_product_env(out / "product-env", wheel=options.wheel)
        options = replace(options, product_env=out / "product-env")
    dirs: dict[str, list[Path]] = {m: [] for m in MODES}
    saved = os.environ.get("SEQPACK_EVAL_REPEAT")
    try:
        for k in range(1, repeats + 1):
            os.environ["SEQPACK_EVAL_REPEAT"] = str(k)
            for mode in MODES:
                run_dir = out / f"{mode}-{k}"
                if progress is not None:
                    progress(f"{mode} run {k}/{repeats}")
                run_eval(dataset, tasks, agent_cmd, run_dir, mode=mode, timeout=timeout,
                         skill_dir=skill_dir if mode == "skill" else None, seed=seed + k, options=options)
                score_run(run_dir, tasks_file=dataset.root / "tasks.json", skip_outcome=skip_outcome)
                dirs[mode].append(run_dir)
    finally:
        if saved is None:
            os.environ.pop("SEQPACK_EVAL_REPEAT", None)
        else:
            os.environ["SEQPACK_EVAL_REPEAT"] = saved
    doc = summarise(dirs, dataset, agent_cmd)
    from seqpack.io import atomic

    atomic.write_text(out / "benchmark.json", json.dumps(doc, indent=2) + "\n", what="benchmark.json")
    return doc


def table(doc: dict[str, Any]) -> str:
    """Overall and per-bucket lines: correctness with its 95 % interval without and with the skill, the paired uplift
    with its interval, pass@1 and pass@k (k = repeats) with the skill, tokens and wall time per task."""
    from seqpack.core.textfmt import markdown_table
    from seqpack_evals.stats import interval_text

    def cell(block: dict[str, Any], mode: str, key: str, scale: float = 100.0, unit: str = "%") -> str:
        if mode not in block:
            return "-"
        s = block[mode][key]
        return f"{scale * s['mean']:.1f}{unit} ± {scale * s['std']:.1f}"

    def ci(block: dict[str, Any], mode: str, key: str = "correctness") -> str:
        return interval_text(block[mode][key]) if mode in block else "-"

    def row(scope: str, plain: dict[str, Any], iv: dict[str, Any]) -> list[str]:
        up = iv.get("uplift", {}).get("correctness")
        k = doc["repeats"]
        pk = iv.get("skill", {}).get("pass_at_k", {})
        return [scope, ci(iv, "baseline"), ci(iv, "skill"),
                f"{100 * up['mean']:+.1f} [{100 * up['lo']:+.1f}, {100 * up['hi']:+.1f}]" if up else "-",
                f"{100 * pk.get('pass@1', 0):.1f}% / {100 * pk.get(f'pass@{k}', 0):.1f}%" if pk else "-",
                cell(plain, "skill", "tokens", 1, ""), cell(plain, "skill", "wall_s", 1, " s")]

    iv = doc["intervals"]
    rows = [row("overall", doc["overall"], iv["overall"])]
    rows += [row(b, s, iv["per_bucket"][b]) for b, s in doc["per_bucket"].items()]
    return markdown_table(["scope", "correctness without skill [95% CI]", "with skill [95% CI]",
                           "uplift, points [95% CI]", f"pass@1 / pass@{doc['repeats']} (skill)", "tokens/task (skill)",
                           "wall/task (skill)"], rows)


__all__ = ["FORMAT", "MIN_REPEATS", "run_benchmark", "summarise", "table"]

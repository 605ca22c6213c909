"""The task set as an Inspect AI task (``evals/seqpack_evals/inspect_task.py``), without credentials: Inspect's mock
model driving the bash tool in the bubblewrap sandbox, and ``inspect eval`` from the command line with a scripted
agent; the harness's own scorer grades both, and the logs open."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "evals" / "seqpack_evals" / "inspect_task.py"
ALIGN = "explicit-align-tp4-cp2-sp"
RIGHT = "seqpack align prints pad_seq_to_mult = lcm(4, 8) = 8.\n\n```answer\npad_seq_to_mult: 8\ncp_multiple: 4\n" \
        "sp_multiple: 8\n```"
WRONG = "```answer\npad_seq_to_mult: 4\ncp_multiple: 4\nsp_multiple: 4\n```"

pytestmark = pytest.mark.slow


def _mock_eval(eval_env, tmp_path, answer):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    from seqpack_evals.inspect_task import seqpack_skill

    def used(out):  # usage given, so the mock model counts no tokens (its tokenizer would be downloaded)
        out.usage = ModelUsage(input_tokens=10, output_tokens=10, total_tokens=20)
        return out

    outputs = [used(ModelOutput.for_tool_call("mockllm/model", "bash", {
                   "command": "seqpack align --tp 4 --cp 2 --sp; python -c 'import seqpack; print(seqpack.__file__)'; "
                              "ls .claude/skills/megatron-sequence-packing/SKILL.md"})),
               used(ModelOutput.from_content("mockllm/model", answer))]
    (log,) = inspect_eval(seqpack_skill(tasks=ALIGN, product_env=str(eval_env)),
                          model=get_model("mockllm/model", custom_outputs=outputs), log_dir=str(tmp_path / "logs"),
                          display="none")
    return log


def test_the_mock_model_runs_the_tool_in_the_sandbox_and_the_harness_scores_it(eval_env, tmp_path):
    log = _mock_eval(eval_env, tmp_path / "right", RIGHT)
    assert log.status == "success", log.error
    (sample,) = log.samples
    tool = next(m for m in sample.messages if m.role == "tool")
    assert "pad_seq_to_mult" in tool.text and "/site-packages/seqpack/__init__.py" in tool.text
    # the wheel's seqpack, not the checkout's (a folder beside the checkout may share its name as a prefix)
    assert str(ROOT / "reference_impl") not in tool.text.split("pad_seq_to_mult")[-1]
    assert "SKILL.md" in tool.text  # the skill is there, read-only
    assert sample.scores["seqpack_scorer"].value == 1.0
    assert set(log.results.scores[0].metrics) == {"mean", "stderr"}
    wrong = _mock_eval(eval_env, tmp_path / "wrong", WRONG)  # the negative control: the same run, a wrong block
    assert wrong.samples[0].scores["seqpack_scorer"].value == pytest.approx(1 / 3)


def test_inspect_eval_from_the_command_line_with_a_scripted_agent(eval_env, tmp_path, upstream):
    """``inspect eval`` with the mock model and a scripted agent: two question tasks (one right, one wrong), an
    outcome task graded through the lane, two epochs; metrics with standard errors; ``inspect log dump`` opens the
    log."""
    from inspect_ai.log import read_eval_log

    from seqpack_evals.tasks import load_tasks

    fixed = load_tasks().by_id()["out-offline-mbs4"].outcome["oracle"]["files"]["fixed.yaml"]
    plan = {ALIGN: {"commands": [["seqpack", "align", "--tp", "4", "--cp", "2", "--sp"]], "answer": RIGHT},
            "nm-struct-pack": {"answer": "I don't know."},
            "out-offline-mbs4": {"commands": [["cat", "train.yaml"]], "files": {"fixed.yaml": fixed},
                                 "answer": "Wrote fixed.yaml."}}
    script = tmp_path / "plan.json"
    script.write_text(json.dumps(plan))
    logs = tmp_path / "logs"
    cli = Path(sys.executable).parent / "inspect"
    proc = subprocess.run([str(cli), "eval", str(TASK_FILE.relative_to(ROOT)), "--model", "mockllm/model", "--epochs", "2",
                           "-T", f"tasks={ALIGN},nm-struct-pack,out-offline-mbs4", "-T", f"script={script}",
                           "-T", f"product_env={eval_env}", "--log-dir", str(logs), "--display", "none",
                           "--log-format", "eval"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = logs.glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success" and log.eval.config.epochs == 2
    by = {s.id: s.scores["seqpack_scorer"].value for s in log.samples}
    assert by == {ALIGN: 1.0, "nm-struct-pack": 0.0, "out-offline-mbs4": 1.0}, by
    metrics = log.results.scores[0].metrics
    assert metrics["mean"].value == pytest.approx(2 / 3) and metrics["stderr"].value > 0
    dump = subprocess.run([str(cli), "log", "dump", str(path)], capture_output=True, text=True, timeout=300)
    assert dump.returncode == 0 and json.loads(dump.stdout)["status"] == "success"


def test_samples_carry_the_public_task_only():
    from seqpack_evals.inspect_task import samples

    (sample,) = samples(tasks="out-offline-mbs4")
    assert sample.id == "out-offline-mbs4" and sample.target == "" and set(sample.files) == {"train.yaml"}
    assert "Leave the result as `fixed.yaml`" in sample.input and "oracle" not in json.dumps(sample.metadata)

"""The sandbox around an agent under evaluation (issue 31): graders and answer key out of its reach.

A hostile agent (``tests/fixtures/evals/hostile_agent.py``) searches every file it can read for its own prompt and
tries the three routes an audit used: ``../../run.json``, the installed package's ``load_tasks()``, the task
generator. In the sandbox it finds nothing, scores nothing and writes no oracle artifact; the negative control is the
same agent with ``--no-sandbox`` (and each route run where it can reach its target), which finds the key. A probe
agent checks the boundaries one by one: what it can read, write, import and reach.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from seqpack.core.errors import UsageError
from seqpack.faces.cli import main
from seqpack_evals.runner import RunOptions, run_eval
from seqpack_evals.sandbox import SANDBOX_HOME
from seqpack_evals.scoring import score_run
from seqpack_evals.tasks import load_tasks
from seqpack_evals.transcript import read_transcript

ROOT = Path(__file__).resolve().parents[1]
KEY = ROOT / "evals" / "tasks.json"
HOSTILE = ROOT / "tests" / "fixtures" / "evals" / "hostile_agent.py"
QUESTION, OUTCOME = "explicit-align-tp4-cp2-sp", "out-offline-mbs4"
#: Question tasks for the routes (cheap: no file-system search).
ROUTE_TASKS = ["explicit-align-tp4-cp2-sp", "ctx-log-pack-malformed-json", "nm-struct-pack", "out-offline-mbs4"]


@pytest.fixture(scope="module")
def dataset():
    return load_tasks(KEY)


def _hostile(*args: str) -> str:
    return " ".join(["python", str(HOSTILE), *args])


def _report(run_dir: Path, task_id: str) -> dict:
    tr = read_transcript(run_dir / "transcripts" / f"{task_id}.json")
    line = next(ln for ln in tr.stderr.splitlines() if ln.startswith("HOSTILE-REPORT "))
    return json.loads(line[len("HOSTILE-REPORT "):])


def _oracle_written(dataset, run_dir: Path, task_id: str) -> bool:
    """True when a kept file of the task equals a file of its oracle artifact."""
    task = dataset.by_id()[task_id]
    files = ((task.outcome or {}).get("oracle") or {}).get("files") or {}
    kept = run_dir / "tasks" / json.loads((run_dir / "run.json").read_text())["slots"][task_id]
    return any((kept / name).is_file() and (kept / name).read_text() == text for name, text in files.items())


@pytest.mark.slow
def test_a_hostile_agent_finds_nothing_in_the_sandbox_and_the_key_without_it(dataset, tmp_path, eval_env):
    ids = [QUESTION, OUTCOME]
    boxed = tmp_path / "boxed"
    run_eval(dataset, dataset.select(ids), _hostile("--budget", "400"), boxed, mode="skill", timeout=600,
             options=RunOptions(read_only=[str(HOSTILE)], product_env=eval_env))
    scores = score_run(boxed)
    assert scores.summary["dimensions"]["correctness"] <= 5.0
    for task_id in ids:
        report = _report(boxed, task_id)
        assert report["found"] == {} and report.get("search_complete") is True, report  # it read all it could
        assert report["files_read"] > 10_000
        assert not _oracle_written(dataset, boxed, task_id)
    # the negative control: the same agent without the sandbox finds the key and cheats with it
    loose = tmp_path / "loose"
    run_eval(dataset, dataset.select(ids), _hostile("--budget", "400"), loose, mode="skill", timeout=600,
             options=RunOptions(sandbox=False, product_env=eval_env))
    assert all(_report(loose, t)["found"] for t in ids)
    question = next(t for t in score_run(loose).tasks if t.task_id == QUESTION)
    assert question.scores["correctness"] == 1.0
    assert _oracle_written(dataset, loose, OUTCOME)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["run_json", "load_tasks", "generator"])
def test_the_audits_routes_are_closed(dataset, tmp_path, eval_env, route):
    """Each route on its own, through the real sandbox: nothing found on any task, no correctness."""
    out = tmp_path / route
    run_eval(dataset, dataset.select(ROUTE_TASKS), _hostile("--route", route), out, mode="skill", timeout=600,
             options=RunOptions(read_only=[str(HOSTILE)], product_env=eval_env))
    assert score_run(out).summary["dimensions"]["correctness"] == 0.0
    assert all(_report(out, t)["found"] == {} for t in ROUTE_TASKS)
    assert not any(_oracle_written(dataset, out, t) for t in ROUTE_TASKS)


def _direct(route: str, cwd: Path, prompt: str, python: str = sys.executable) -> dict:
    proc = subprocess.run([python, str(HOSTILE), "--route", route], input=prompt, capture_output=True, text=True,
                          cwd=cwd, timeout=900, check=True)
    return json.loads(proc.stderr.split("HOSTILE-REPORT ", 1)[1])


@pytest.mark.slow
def test_each_route_finds_the_key_where_it_can_reach_it(dataset, tmp_path):
    """The negative controls of the routes: the old layout (a working directory inside the run directory whose
    run.json names the key), and the harness's own Python (which can import the loader and the generator)."""
    prompt = dataset.by_id()[QUESTION].prompt
    work = tmp_path / "RUN" / "tasks" / "001"
    work.mkdir(parents=True)
    (tmp_path / "RUN" / "run.json").write_text(json.dumps({"tasks_file": str(KEY)}))
    assert _direct("run_json", work, prompt)["found"] == {"run_json": str(KEY)}
    assert "load_tasks" in _direct("load_tasks", tmp_path, prompt)["found"]
    assert "generator" in _direct("generator", tmp_path, prompt)["found"]


PROBE = '''
import json, os, socket, subprocess, sys
checks = {}
def can_read(path):
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        return True
    except OSError:
        return False
def can_write(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return True
    except OSError:
        return False
for name, path in json.loads(sys.argv[1]).items():
    checks["read " + name] = can_read(path) or os.path.exists(path)
checks["write workdir"] = can_write("probe.txt")
checks["write /usr"] = can_write("/usr/probe.txt")
checks["write skill"] = can_write(".claude/skills/megatron-sequence-packing/probe.txt")
checks["read skill"] = can_read(".claude/skills/megatron-sequence-packing/SKILL.md")
checks["tmp holds"] = sorted(os.listdir("/tmp"))
checks["proc pids"] = len([p for p in os.listdir("/proc") if p.isdigit()])
checks["interfaces"] = [n for _, n in socket.if_nameindex()]
import seqpack
checks["seqpack from"] = seqpack.__file__
try:
    import seqpack_evals  # noqa: F401
    checks["import seqpack_evals"] = True
except ImportError:
    checks["import seqpack_evals"] = False
out = subprocess.run(["seqpack", "align", "--cp", "2"], capture_output=True, text=True)
checks["seqpack runs"] = out.returncode == 0 and "pad_seq_to_mult" in out.stdout
checks["home"] = os.environ["HOME"]
print(json.dumps({"type": "result", "result": json.dumps(checks)}))
'''


def _probe(tmp_path: Path, dataset, eval_env, **options) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(PROBE))
    secrets = {"key": str(KEY), "checkout readme": str(ROOT / "README.md"), "run dir": str(tmp_path / "run"),
               "harness home": str(Path.home())}
    import os

    real_home = Path(os.environ.get("SEQPACK_REAL_HOME") or "/nonexistent")
    home_file = next((p for p in sorted(real_home.glob("*")) + sorted(real_home.glob(".*")) if p.is_file()), None)
    if home_file is not None:  # a file of the user's real home folder (the sandbox binds no part of it but Python)
        secrets["real home"] = str(home_file)
    agent = f"python {script} '{json.dumps(secrets)}'"
    run_eval(dataset, dataset.select([QUESTION]), agent, tmp_path / "run", mode="skill", timeout=120,
             options=RunOptions(read_only=[str(script)], product_env=eval_env, **options))
    tr = read_transcript(tmp_path / "run" / "transcripts" / f"{QUESTION}.json")
    assert tr.exit_code == 0, tr.stderr[-2000:]
    return json.loads(json.loads(tr.stdout.strip().splitlines()[-1])["result"])


@pytest.mark.slow
def test_the_sandbox_boundaries(dataset, tmp_path, eval_env):
    checks = _probe(tmp_path / "on", dataset, eval_env)
    read = {k: v for k, v in checks.items() if k.startswith("read ") and k != "read skill"}
    assert len(read) >= 4 and not any(read.values()), read
    assert checks["write workdir"] is True and checks["write /usr"] is False
    assert checks["read skill"] is True and checks["write skill"] is False  # the skill is read-only
    workdir = Path(read_transcript(tmp_path / "on" / "run" / "transcripts" / f"{QUESTION}.json").workdir)
    from seqpack_evals.sandbox import load_product_env

    env = load_product_env(eval_env)  # its dependency links point into the harness's site-packages (bound read-only)
    bound = [workdir, Path(eval_env), tmp_path / "on" / "probe.py", Path(env.base_prefix), *map(Path, env.deps)]
    bound = [p.resolve() for p in bound]  # what the sandbox binds (below /tmp when the checkout lives there)
    assert set(checks["tmp holds"]) == {"home"} | {p.parts[2] for p in bound if p.parts[1] == "tmp"}
    assert checks["proc pids"] <= 4  # its own PID namespace: the harness is not there
    assert checks["import seqpack_evals"] is False and checks["seqpack runs"] is True
    assert "/site-packages/seqpack/" in checks["seqpack from"]
    assert str(ROOT / "reference_impl") not in checks["seqpack from"]  # the wheel's, not the checkout's
    assert checks["home"] == SANDBOX_HOME and len(checks["interfaces"]) >= 1
    offline = _probe(tmp_path / "off", dataset, eval_env, network=False)
    assert offline["interfaces"] == ["lo"]
    # the negative control: without the sandbox the same probe reads the key, the checkout and the run directory
    loose = _probe(tmp_path / "loose", dataset, eval_env, sandbox=False)
    assert loose["read key"] and loose["read checkout readme"] and loose["read run dir"]


def test_a_missing_bwrap_is_an_error_with_the_install_line(dataset, tmp_path, monkeypatch):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real(name, *a, **k))
    with pytest.raises(UsageError) as err:
        run_eval(dataset, dataset.select([QUESTION]), "python x", tmp_path / "r", mode="baseline",
                 options=RunOptions(product_env=tmp_path / "unused"))
    assert "bubblewrap" in err.value.message and "apt-get install -y bubblewrap" in str(err.value.fix)
    assert not list((tmp_path / "r").iterdir())  # nothing ran, nothing was recorded as a run


@pytest.mark.slow
def test_no_sandbox_is_recorded_and_printed_on_every_report(dataset, tmp_path, eval_env, capsys):
    agent = " ".join(["python", str(ROOT / "tests" / "fixtures" / "evals" / "fake_agent.py"), "--answers",
                      str(ROOT / "tests" / "fixtures" / "evals" / "answers.json"), "--tasks", str(KEY)])
    run_eval(dataset, dataset.select(["nm-struct-pack"]), agent, tmp_path / "loose", mode="skill", timeout=60,
             skill_dir=ROOT / "tests" / "fixtures" / "evals" / "fake_skill",
             options=RunOptions(sandbox=False, product_env=eval_env))
    run = json.loads((tmp_path / "loose" / "run.json").read_text())
    assert run["sandbox"]["enabled"] is False and any("WITHOUT the sandbox" in w for w in run["warnings"])
    assert main(["eval", "score", str(tmp_path / "loose")]) == 0
    assert main(["eval", "report", str(tmp_path / "loose"), "--out", str(tmp_path / "page.md")]) == 0
    page = (tmp_path / "page.md").read_text()
    assert "**Not sandboxed:**" in page and "| Sandbox | **none**" in page
    run_eval(dataset, dataset.select(["nm-struct-pack"]), agent, tmp_path / "boxed", mode="skill", timeout=60,
             skill_dir=ROOT / "tests" / "fixtures" / "evals" / "fake_skill",
             options=RunOptions(read_only=[str(ROOT / "tests" / "fixtures" / "evals"), str(KEY)],
                                product_env=eval_env))
    assert main(["eval", "score", str(tmp_path / "boxed")]) == 0
    assert main(["eval", "report", str(tmp_path / "boxed"), "--out", str(tmp_path / "boxed.md")]) == 0
    boxed = (tmp_path / "boxed.md").read_text()
    assert "**Not sandboxed:**" not in boxed and "| Sandbox | bubblewrap; network on;" in boxed


def test_the_sandbox_refuses_to_show_the_key_by_accident(tmp_path):
    """A key or run directory inside a path the agent reads (a system folder, the Python installation) is refused;
    naming it with --sandbox-ro is an explicit, recorded choice."""
    from seqpack_evals.sandbox import ProductEnv, Sandbox, check_isolation

    env = ProductEnv(tmp_path / "env" / "venv", "seqpack.whl", (), str(tmp_path / "python"))
    with pytest.raises(UsageError, match="would show the agent"):
        check_isolation(Sandbox(env), [tmp_path / "python" / "lib" / "tasks.json"])
    check_isolation(Sandbox(env), [tmp_path / "checkout" / "evals" / "tasks.json"])  # elsewhere: fine
    check_isolation(Sandbox(env, read_only=[str(tmp_path / "checkout")]), [tmp_path / "checkout" / "evals"])

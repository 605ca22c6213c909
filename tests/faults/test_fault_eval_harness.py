"""Agents that fight the eval harness (issue 34, family 2), and the harness's own outputs.

Each agent is a small script run by ``seqpack eval run`` (in the bubblewrap sandbox where that makes the case harder
to handle, without it where only the harness's own defences stand). Every case ends the same way: the run finishes
in bounded time and memory, records what happened in the transcript, and keeps going; nothing outside the working
directory is read, listed or hashed. The harness's outputs follow the rules of every seqpack output: nothing is
written through a link, an existing file is replaced only when eval wrote it (``--overwrite``), a full disk names the
file.
"""

from __future__ import annotations

import errno
import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from seqpack.core.errors import ArtifactError, UsageError
from seqpack_evals.runner import RunOptions, run_eval
from seqpack_evals.tasks import load_tasks
from seqpack_evals.transcript import read_transcript

from faults_helpers import mounted_tmpfs

ROOT = Path(__file__).resolve().parents[2]
TASK = "nm-struct-pack"  # a question task with no input files
FILES_TASK = "ctx-log-pack-malformed-json"  # a task with two input files


@pytest.fixture(scope="module")
def dataset():
    return load_tasks(ROOT / "evals" / "tasks.json")


def _agent(tmp_path: Path, body: str) -> tuple[str, Path]:
    script = tmp_path / "agent.py"
    script.write_text("import json, os, sys, time\n" + textwrap.dedent(body) +
                      '\nprint(json.dumps({"type": "result", "result": "done"}), flush=True)\n')
    return f"python {script}", script


def _run(dataset, tmp_path: Path, body: str, eval_env: Path, *, sandbox: bool = True, task: str = TASK,
         timeout: float = 60, **kw):
    cmd, script = _agent(tmp_path, body)
    out = tmp_path / "run"
    started = time.monotonic()
    summary = run_eval(dataset, dataset.select([task]), cmd, out, mode="baseline", timeout=timeout,
                       options=RunOptions(sandbox=sandbox, read_only=[str(script)], product_env=eval_env, **kw))
    return summary, read_transcript(out / "transcripts" / f"{task}.json"), time.monotonic() - started


LEAVE_CHILD = """
pid = os.fork()
if pid == 0:
    os.setsid()  # out of the agent's session and process group, still holding stdout
    print("child holds stdout", flush=True)
    with open("child.pid", "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(1000)
    os._exit(0)
while not os.path.exists("child.pid"):
    time.sleep(0.01)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", [False, True], ids=["no-sandbox", "sandbox"])
def test_a_child_in_its_own_session_holding_stdout_does_not_hold_the_run(dataset, tmp_path, eval_env, sandbox):
    _summary, tr, took = _run(dataset, tmp_path, LEAVE_CHILD, eval_env, sandbox=sandbox)
    assert took < 25, took  # the harness waited at most its drain time, not for the child
    assert tr.exit_code == 0 and "child holds stdout" in tr.stdout  # the child really held stdout
    pid = int((tmp_path / "run" / "tasks" / "001" / "child.pid").read_text())
    if not sandbox:  # the child's pid is a host pid: it is gone (inside the sandbox its PID namespace went)
        assert tr.leftovers >= 1 and any("left running were killed" in n for n in tr.notes)
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", [False, True], ids=["no-sandbox", "sandbox"])
def test_the_timeout_kills_a_hung_agent_and_its_escaped_child(dataset, tmp_path, eval_env, sandbox):
    body = LEAVE_CHILD + "time.sleep(1000)\n"
    summary, tr, took = _run(dataset, tmp_path, body, eval_env, sandbox=sandbox, timeout=2)
    assert summary.timed_out == [TASK] and tr.timed_out and tr.exit_code is None
    assert took < 25, took


@pytest.mark.slow
def test_gigabytes_on_stdout_are_read_within_a_bound(dataset, tmp_path, eval_env):
    body = """
chunk = b"x" * (1 << 20)
for _ in range(1500):  # 1.5 GiB
    sys.stdout.buffer.write(chunk)
sys.stdout.buffer.flush()
"""
    _summary, tr, _took = _run(dataset, tmp_path, body, eval_env, timeout=120)
    assert tr.exit_code == 0
    st = tr.streams["stdout"]
    assert st["bytes"] >= 1500 << 20 and st["dropped"] > 1 << 30
    assert len(tr.stdout) < 6_000_000 and "bytes dropped by the harness" in tr.stdout  # the cap, in the transcript
    assert any("dropped" in n for n in tr.notes)


def test_a_bounded_capture_keeps_the_head_and_the_tail():
    from seqpack_evals.agentproc import BoundedCapture

    cap = BoundedCapture(head=10, tail=5)
    for chunk in (b"0123456789", b"abcdef", b"ghij", b"KLMNO"):
        cap.add(chunk)
    assert cap.total == 25 and cap.dropped == 10
    assert cap.text().startswith("0123456789\n[... 10 bytes dropped") and cap.text().endswith("KLMNO")
    small = BoundedCapture(head=10, tail=5)
    small.add(b"abc")
    assert small.text() == "abc" and small.dropped == 0  # the negative control: nothing dropped, no marker


@pytest.mark.slow
def test_twelve_hundred_nested_directories(dataset, tmp_path, eval_env):
    body = """
with open("top.txt", "w") as fh:
    fh.write("top")
for _ in range(1200):
    os.mkdir("d")
    os.chdir("d")
with open("deep.txt", "w") as fh:
    fh.write("bottom")
"""
    _summary, tr, _took = _run(dataset, tmp_path, body, eval_env)
    assert tr.exit_code == 0 and "top.txt" in tr.files_created
    assert any("deeper than" in n for n in tr.notes)  # what lies past the bound is counted, not read
    assert (tmp_path / "run" / "tasks" / "001" / "top.txt").read_text() == "top"
    ran_in = json.loads((tmp_path / "run" / "run.json").read_text())["ran_in"][TASK]
    assert not Path(ran_in).exists()  # removed, all 1200 levels


def test_the_walk_is_iterative_and_bounded(tmp_path):
    """The walker itself on 1,200 levels (deeper than Python's recursion limit), with its negative control."""
    from seqpack_evals.workdirs import MAX_DEPTH, WalkReport, remove_tree, snapshot, walk

    deep = tmp_path / "w"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(1200):  # by descriptor: the path grows past what one call may name
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    report = WalkReport()
    entries = list(walk(deep, report))
    assert len(entries) == MAX_DEPTH and report.beyond_depth == 1
    files, notes = snapshot(deep)
    assert files == {} and any("deeper than" in n for n in notes)
    assert remove_tree(deep) == [] and not deep.exists()
    shallow = tmp_path / "s"
    os.makedirs(shallow / "a" / "b")
    control = WalkReport()
    assert len(list(walk(shallow, control))) == 2 and control.beyond_depth == 0


@pytest.mark.slow
def test_an_unreadable_file_is_recorded_not_fatal(dataset, tmp_path, eval_env, monkeypatch):
    """A mode-000 file: the kernel lets root read it, so the refusal a non-root harness gets is injected where the
    harness opens files; the run records the file as unreadable and goes on."""
    import seqpack_evals.workdirs as workdirs

    real = workdirs._open_file

    def as_a_user(entry):
        if entry.st.st_mode & 0o777 == 0:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(entry)

    monkeypatch.setattr(workdirs, "_open_file", as_a_user)
    body = """
for name in ("secret.txt", "notes.txt"):
    with open(name, "w") as fh:
        fh.write("x")
os.chmod("secret.txt", 0)
"""
    _summary, tr, _took = _run(dataset, tmp_path, body, eval_env)
    assert tr.exit_code == 0 and set(tr.files_created) == {"secret.txt", "notes.txt"}
    assert any("secret.txt: unreadable" in n for n in tr.notes)
    kept = tmp_path / "run" / "tasks" / "001"
    assert (kept / "notes.txt").is_file() and not (kept / "secret.txt").exists()


@pytest.mark.slow
def test_a_working_directory_replaced_by_a_link_to_proc(dataset, tmp_path, eval_env):
    """Without the sandbox an agent can swap its working directory for a link; the harness lists and hashes nothing
    behind it (in the sandbox the working directory is a mount the agent cannot swap for the host)."""
    body = """
import shutil
here = os.getcwd()
os.chdir("..")
shutil.rmtree(here)
os.symlink("/proc", here)
"""
    _summary, tr, _took = _run(dataset, tmp_path, body, eval_env, sandbox=False, task=FILES_TASK)
    assert tr.exit_code == 0
    assert any("replaced by a symbolic link" in n for n in tr.notes)
    assert tr.files_created == [] and sorted(tr.files_deleted) == ["pack.log", "train.jsonl"]
    assert not list((tmp_path / "run" / "tasks" / "001").iterdir())
    assert Path("/proc/self").exists()  # removing the working directory removed the link, not /proc


@pytest.mark.slow
def test_links_in_the_working_directory_are_never_followed(dataset, tmp_path, eval_env):
    secret = tmp_path / "outside.txt"
    secret.write_text("outside the working directory")
    body = f"""
os.symlink({str(secret)!r}, "leak.txt")
os.symlink("/proc", "proc")
os.mkfifo("pipe")
"""
    _summary, tr, _took = _run(dataset, tmp_path, body, eval_env, sandbox=False)
    assert tr.exit_code == 0 and {"leak.txt", "proc", "pipe"} <= set(tr.files_created)
    kept = tmp_path / "run" / "tasks" / "001"
    assert not any(p.is_symlink() for p in kept.rglob("*")) and not (kept / "leak.txt").exists()


def test_eval_report_never_replaces_what_it_did_not_write(tmp_path, monkeypatch):
    from seqpack_evals.report import PAGE_MARKER, check_report_target

    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    with pytest.raises(UsageError, match="already exists"):
        check_report_target(notes, overwrite=False)
    with pytest.raises(ArtifactError, match="did not write this file"):
        check_report_target(notes, overwrite=True)
    scores = tmp_path / "scores.json"
    scores.write_text("{}\n")
    with pytest.raises(ArtifactError, match="did not write"):
        check_report_target(scores, overwrite=True)
    page = tmp_path / "BENCHMARK.md"
    page.write_text("# Skill benchmark\n\n" + PAGE_MARKER + "\n")
    assert check_report_target(page, overwrite=True) == page  # its own page: replaced with --overwrite
    with pytest.raises(UsageError, match="already exists"):
        check_report_target(page, overwrite=False)
    link = tmp_path / "link.md"
    link.symlink_to(tmp_path / "nowhere.md")
    with pytest.raises(UsageError, match="symbolic link"):
        check_report_target(link, overwrite=True)
    assert not (tmp_path / "nowhere.md").exists() and notes.read_text() == "my notes\n"


@pytest.mark.slow
def test_eval_run_out_through_a_dangling_link_is_refused(dataset, tmp_path, eval_env):
    from seqpack.faces.cli import main

    link = tmp_path / "out"
    link.symlink_to(tmp_path / "target")
    code = main(["eval", "run", "--agent-cmd", "python x", "--baseline", "--tasks", TASK, "--out", str(link),
                 "--product-env", str(eval_env)])
    assert code == 2 and not (tmp_path / "target").exists()
    assert main(["eval", "run", "--agent-cmd", "python x", "--baseline", "--tasks", TASK, "--out", "/usr",
                 "--product-env", str(eval_env)]) == 2


@pytest.mark.slow
def test_a_full_disk_while_keeping_the_files_names_the_file(dataset, tmp_path, eval_env, monkeypatch):
    """Simulated: the copy into the run directory fails with ENOSPC; the error names that directory."""
    import seqpack_evals.workdirs as workdirs

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(workdirs, "_copy_file", full)
    cmd, script = _agent(tmp_path, 'open("out.txt", "w").write("x" * 1000)\n')
    with pytest.raises(ArtifactError) as err:
        run_eval(dataset, dataset.select([TASK]), cmd, tmp_path / "run", mode="baseline", timeout=60,
                 options=RunOptions(read_only=[str(script)], product_env=eval_env))
    assert "No space left on device" in err.value.message and err.value.file == str(tmp_path / "run" / "tasks" / "001")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 256 KiB tmpfs (root and mount permission needed; skipped otherwise)."""
    yield from mounted_tmpfs(tmp_path, "small", "256k")


@pytest.mark.slow
def test_a_really_full_disk_during_eval_run_names_the_file(dataset, tmp_path, eval_env, small_disk, capsys):
    from seqpack.faces.cli import main

    cmd, script = _agent(tmp_path, 'open("big.bin", "wb").write(os.urandom(600 << 10))\n')
    code = main(["eval", "run", "--agent-cmd", cmd, "--baseline", "--tasks", TASK, "--out", str(small_disk / "run"),
                 "--sandbox-ro", str(script), "--product-env", str(eval_env)])
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device" in err and str(small_disk / "run") in err, err
    assert "Traceback" not in err and "internal error" not in err

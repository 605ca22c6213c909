"""A few examples of every family of the hostile-input fuzz pass (tests/faults/fuzz_hostile.py) as a test.

Every case must end ``ok`` (worked, or refused with a seqpack error): no crash, hang, changed input
or silently wrong result. The full pass (``python tests/faults/fuzz_hostile.py 200``) prints the
counts by class; the negative control shows a crash would be counted as one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fuzz_hostile

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def eval_base(tmp_path_factory, eval_env):
    from seqpack.faces.cli import main
    from seqpack_evals.tasks import load_tasks

    base = tmp_path_factory.mktemp("eval") / "run0"
    assert main(["eval", "run", "--agent-cmd", "echo answer", "--baseline", "--out", str(base),
                 "--tasks", load_tasks().tasks[0].id, "--product-env", str(eval_env)]) == 0
    return base


def test_the_fuzz_pass_finds_nothing(tmp_path, eval_base, eval_env):
    fuzz_hostile.DETAILS.clear()
    counts = fuzz_hostile.fuzz_pass(6, tmp_path, seed=26, eval_base=eval_base, eval_env=eval_env)
    assert all(set(c) == {"ok"} for c in counts.values()), (counts, fuzz_hostile.DETAILS)
    assert sum(sum(c.values()) for c in counts.values()) == 6 * len(fuzz_hostile.FAMILIES)


def test_the_fuzz_would_notice_a_crash_and_a_hang():
    def crash() -> str:
        raise ZeroDivisionError("a bug")

    def hang() -> str:
        while True:
            pass

    assert fuzz_hostile._classify(crash, timeout=10) == "crash"
    assert fuzz_hostile._classify(hang, timeout=1) == "hang"
    assert fuzz_hostile._classify(lambda: "ok", timeout=10) == "ok"


def test_the_fuzz_would_notice_a_walker_that_follows_links(tmp_path, monkeypatch):
    """The negative control of the working-directory family: a copy that follows links (the harness before issue 34)
    brings a file from outside into the run directory, and the check calls it an escape; the harness's own does not."""
    import shutil

    import seqpack_evals.workdirs as workdirs

    def make() -> tuple[Path, Path]:
        scratch = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        (scratch / "w").mkdir(parents=True)
        outside = scratch / "outside.txt"
        outside.write_text("SECRET-OUTSIDE")
        (scratch / "w" / "notes.txt").write_text("mine")
        (scratch / "w" / "leak").symlink_to(outside)
        return scratch, outside

    scratch, outside = make()
    assert fuzz_hostile._classify(lambda: fuzz_hostile.check_tree(scratch / "w", scratch, outside), timeout=60) == "ok"

    def naive_keep(root, dest, exclude=()):
        shutil.copytree(root, dest, symlinks=False)
        return workdirs.KeepReport()

    monkeypatch.setattr(workdirs, "keep", naive_keep)
    scratch, outside = make()
    assert fuzz_hostile._classify(lambda: fuzz_hostile.check_tree(scratch / "w", scratch, outside),
                                  timeout=60) == "escape"

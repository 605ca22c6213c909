"""Faults while writing: kill -9 mid-write, concurrent writers, a full disk, a read-only output.

Classes: stale temporaries after kill -9 (cleaned by the next run, or reported when another host
wrote them); concurrent packs of the same data into one output root (no ENOTEMPTY, one verified
result); ENOSPC (simulated, and on a real 64 KiB tmpfs where mounting is allowed); a read-only
output (simulated EROFS, and a real read-only mount where allowed).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faults_helpers import assert_accounted, digest, mounted_tmpfs, temporaries

from seqpack.io.atomic import atomic_directory
from seqpack.io.temporaries import stale_temporaries
from seqpack.core.errors import ArtifactError
from seqpack.verbs import EnergonPrepareOptions, PackOptions, energon_prepare, pack

REPO = Path(__file__).resolve().parents[2]
_HOLD = """
import sys, time
from seqpack.io.atomic import atomic_directory
with atomic_directory(sys.argv[1]) as tmp:
    (tmp / "half.bin").write_bytes(b"x" * 1000)
    print("writing", flush=True)
    time.sleep(60)
"""


def _killed_writer(target: Path) -> None:
    """Start a process that is writing ``target`` and kill -9 it mid-write."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(target)], stdout=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_kill_9_leaves_a_temporary_that_the_next_run_removes(data, tmp_path):
    out = tmp_path / "packs"
    out.mkdir()
    _killed_writer(out / "some_pack_dir")
    left = temporaries(out)
    assert len(left) == 1 and (left[0] / "half.bin").is_file()  # what kill -9 leaves
    assert [s.writer_gone for s in stale_temporaries(out)] == [True]
    result = pack(PackOptions(input=data, out=out, pack_size=256))
    assert not temporaries(out) and result.root.is_dir()  # the next run cleaned it up
    assert_accounted(result.manifest)


def test_a_live_writers_temporary_and_another_hosts_are_left_alone(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / ".x.seqpack-tmp-otherhost-0123456789abcdef"
    foreign.mkdir()
    with atomic_directory(out / "a") as tmp:  # our own live temporary is not stale
        assert tmp in [p for p in out.iterdir()] and not [s for s in stale_temporaries(out) if s.path == tmp]
        with atomic_directory(out / "b"):
            pass
        assert tmp.is_dir()
    assert foreign.is_dir()  # another host's: reported, never deleted
    assert "cannot be checked from here" in caplog.text


def test_concurrent_packs_into_one_output_root(data, tmp_path):
    out = tmp_path / "packs"
    code = ("import sys; from seqpack.verbs import PackOptions, pack; "
            "r = pack(PackOptions(input=sys.argv[1], out=sys.argv[2], pack_size=256)); print(r.root)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(data), str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
             for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [r[1][-500:] for r in results]
    roots = {r[0].strip() for r in results}
    assert len(roots) == 1 and not temporaries(out)
    again = pack(PackOptions(input=data, out=out, pack_size=256))
    assert again.reused and str(again.root) in roots


def test_atomic_directory_keeps_a_concurrent_writers_equal_result(tmp_path):
    target = tmp_path / "t"
    with atomic_directory(target, keep_existing=lambda p: (p / "ok").read_text() == "same") as tmp:
        (tmp / "ok").write_text("same")
        target.mkdir()
        (target / "ok").write_text("same")  # another run finished first with the same content
    assert (target / "ok").read_text() == "same" and not temporaries(tmp_path)
    with pytest.raises(ArtifactError, match="appeared while it was being written"):
        with atomic_directory(target) as tmp:  # different content: refused, the first stays
            (tmp / "ok").write_text("other")
    assert (target / "ok").read_text() == "same" and not temporaries(tmp_path)


def _fail_writes(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    import seqpack.packing.offline.fill as pack_fill

    def broken(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(pack_fill, "write_part", broken)  # where the packs' Parquet is written


@pytest.mark.parametrize("code, needle", [(errno.ENOSPC, "No space left on device"),
                                          (errno.EROFS, "Read-only file system")])
def test_a_failed_write_names_the_output_and_leaves_nothing(cli, data, tmp_path, monkeypatch, code, needle):
    before = digest([data])
    _fail_writes(monkeypatch, code)
    run = cli("pack", data, "--out", tmp_path / "packs", "--pack-size", 256)
    run.refused(needle, str(tmp_path / "packs"))
    assert ".seqpack-tmp-" not in run.err and digest([data]) == before
    assert not temporaries(tmp_path) and not list((tmp_path / "packs").iterdir())


def test_a_read_only_output_directory(cli, data, tmp_path, monkeypatch):
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if "packs" in str(self):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    cli("pack", data, "--out", tmp_path / "packs", "--pack-size", 256).refused("Read-only file system", "packs")


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    """A 64 KiB tmpfs (root and mount permission needed; skipped otherwise)."""
    yield from mounted_tmpfs(tmp_path, "tiny", "64k")


def test_a_really_full_disk(cli, tmp_path, tiny_tmpfs):
    from seqpack.data.demo import demo_path

    src = demo_path("prompt_completion")
    run = cli("pack", src, "--out", tiny_tmpfs / "packs", "--pack-size", 2048)
    run.refused("No space left on device", str(tiny_tmpfs / "packs"))
    assert not temporaries(tiny_tmpfs) and not list((tiny_tmpfs / "packs").iterdir())
    energon = tiny_tmpfs / "ds"
    with pytest.raises(ArtifactError, match="No space left"):
        energon_prepare(EnergonPrepareOptions(input=src, out=energon))
    assert not energon.exists() and not temporaries(tiny_tmpfs)


def test_a_really_read_only_mount(cli, data, tiny_tmpfs):
    assert subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], capture_output=True).returncode == 0
    cli("pack", data, "--out", tiny_tmpfs / "packs", "--pack-size", 256).refused("Read-only file system")


def test_a_gone_writers_temporary_is_removed_at_once(tmp_path):
    """The cleanup asks the kernel whether a writer holds the temporary's lock; it goes by neither age nor pid."""
    from seqpack.io.temporaries import temporary_name

    out = tmp_path / "o"
    out.mkdir()
    left = temporary_name(out / "x")  # what a writer killed with kill -9 leaves: nobody holds its lock
    left.mkdir()
    with atomic_directory(out / "y"):
        pass
    assert not left.exists() and (out / "y").is_dir()

"""Faults: outputs in places they must not go, and what a write may delete (issue 26, family 3).

Classes: ``pack --out /``, ``--out $HOME`` and a system directory (refused before anything is
written); ``install-skill --project /`` (refused); a user directory, even an empty one, inside a
pack directory or an Energon dataset, and a user file in an Energon ``.nv-meta/`` (refused with or
without ``--overwrite``; they survive, also under a manifest written before file records);
``kill -9`` at every step of a directory swap, followed by another write (the old or the new
directory is always there afterwards, never neither); a live writer's temporary seen from another
PID namespace (left alone: liveness is its lock, not its pid).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faults_helpers import digest, temporaries

from seqpack.core.errors import ArtifactError
from seqpack.io.atomic import atomic_directory
from seqpack.io.temporaries import recover_temporaries
from seqpack.verbs import PackOptions, pack

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _new_entries(before: set[str], pattern: str) -> list[Path]:
    root = Path(os.sep)
    return [root / n for n in set(os.listdir(root)) - before if pattern in n]


# --------------------------------------------------------------------------------------------
# Protected places
# --------------------------------------------------------------------------------------------


def test_pack_refuses_the_root_home_and_system_directories(cli, data, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep.txt").write_text("mine\n")
    monkeypatch.setenv("HOME", str(home))
    before = set(os.listdir(os.sep))
    try:
        cli("pack", data, "--out", os.sep, "--pack-size", 256).refused("will not write its output here",
                                                                      "root of the file system")
    finally:
        for made in _new_entries(before, "_pad_seq_to_mult"):  # only if the refusal regressed
            shutil.rmtree(made)
    cli("pack", data, "--out", home, "--pack-size", 256).refused("home directory")
    cli("pack", data, "--out", "/usr", "--pack-size", 256).refused("system directory")
    assert sorted(p.name for p in home.iterdir()) == ["keep.txt"]
    assert cli("pack", data, "--out", home / "packs", "--pack-size", 256).code == 0  # a folder of its own is fine


def test_install_skill_refuses_the_root_as_a_project(cli, tmp_path):
    before = set(os.listdir(os.sep))
    try:
        cli("install-skill", "--client", "claude", "--project", os.sep).refused("will not write its output here",
                                                                               "root of the file system")
        cli("install-skill", "--client", "codex", "--project", "/etc").refused("system directory")
    finally:
        for made in _new_entries(before, ".claude") + _new_entries(before, ".agents"):  # only after a regression
            shutil.rmtree(made)
    assert not os.path.exists("/etc/.agents/skills/megatron-sequence-packing")


@pytest.mark.parametrize("force", [False, True])
def test_an_output_named_by_a_dangling_symlink_is_never_created_through_it(cli, data, tmp_path, force):
    """``install-skill --project LINK`` (and ``pack``/``eval export --out LINK``) where LINK points nowhere: creating
    the directory would write through the link (issue 34, found by fuzz_files). One line, exit 2, nothing made."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    extra = ["--force"] if force else []
    cli("install-skill", "--client", "claude", "--project", link, *extra).refused("symbolic link to nothing")
    cli("pack", data, "--out", link, "--pack-size", 256).refused("field 'out'", "symbolic link to nothing")
    cli("eval", "export", "--out", link).refused("symbolic link to nothing")
    assert not (tmp_path / "elsewhere").exists() and link.is_symlink()
    # negative control: a link to a directory that exists is a project like any other
    (tmp_path / "elsewhere").mkdir()
    assert cli("install-skill", "--client", "claude", "--project", link, *extra).code == 0
    assert (tmp_path / "elsewhere" / ".claude" / "skills" / "megatron-sequence-packing" / "SKILL.md").is_file()


def test_eval_export_refuses_the_root_home_and_system_directories(cli, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    before = set(os.listdir(os.sep))
    try:
        cli("eval", "export", "--out", os.sep).refused("will not write its output here", "root of the file system")
        cli("eval", "export", "--out", "/usr").refused("system directory")
    finally:
        for made in _new_entries(before, "evals.json") + _new_entries(before, "files"):  # only after a regression
            shutil.rmtree(made) if made.is_dir() else made.unlink()
    cli("eval", "export", "--out", home).refused("home directory")
    assert not list(home.iterdir()) and not os.path.exists("/usr/evals.json")
    target = tmp_path / "export"
    target.mkdir()
    (target / "evals.json").symlink_to(home / "precious.json")  # never written through
    cli("eval", "export", "--out", target).refused("evals.json", "symbolic link")
    assert not (home / "precious.json").exists()


# --------------------------------------------------------------------------------------------
# Never delete what the command did not create
# --------------------------------------------------------------------------------------------


def test_a_user_directory_inside_a_pack_survives(data, tmp_path):
    first = pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256))
    mine = first.root / "my-notes"
    mine.mkdir()  # empty: no file in it would have made it a stray before
    for overwrite in (False, True):
        with pytest.raises(ArtifactError, match="my-notes/: not written by seqpack"):
            pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256, overwrite=overwrite))
    assert mine.is_dir() and not temporaries(tmp_path)


@pytest.fixture(scope="module")
def energon_dataset(tmp_path_factory) -> tuple[Path, Path]:
    """(input JSONL, a dataset prepared from it) that tests copy before touching."""
    from faults_helpers import ROWS

    from seqpack.verbs import EnergonPrepareOptions, energon_prepare

    base = tmp_path_factory.mktemp("energon")
    src = base / "in" / "data.jsonl"
    src.parent.mkdir()
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    energon_prepare(EnergonPrepareOptions(input=src, out=base / "ds"))
    return src, base / "ds"


def _copy(dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    shutil.copytree(dataset, out, symlinks=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("legacy", [False, True], ids=["manifest", "manifest-before-file-records"])
def test_user_entries_in_an_energon_dataset_survive_overwrite(cli, energon_dataset, tmp_path, legacy):
    src, dataset = energon_dataset
    out = _copy(dataset, tmp_path)
    if legacy:  # as an older seqpack wrote it: shards and energon's index, no file records
        manifest = json.loads((out / "seqpack_energon.json").read_text())
        del manifest["files"]
        (out / "seqpack_energon.json").write_text(json.dumps(manifest))
    (out / ".nv-meta" / "my-notes.txt").write_text("mine\n")
    cli("energon-prepare", src, "--out", out, "--overwrite").refused("files seqpack did not write",
                                                                     ".nv-meta/my-notes.txt")
    (out / ".nv-meta" / "my-notes.txt").unlink()
    (out / "shards" / "mine").mkdir()
    cli("energon-prepare", src, "--out", out, "--overwrite").refused("shards/mine/")
    assert (out / "shards" / "mine").is_dir() and not temporaries(tmp_path)


# --------------------------------------------------------------------------------------------
# kill -9 during a swap
# --------------------------------------------------------------------------------------------

_SWAP = """
import os, signal, sys
from pathlib import Path
from seqpack.io import atomic
step = sys.argv[2]
atomic._step = lambda name: os.kill(os.getpid(), signal.SIGKILL) if name == step else None
with atomic.atomic_directory(Path(sys.argv[1]), replace=True) as tmp:
    (tmp / "version").write_text("new")
"""


def _version(target: Path) -> str | None:
    return (target / "version").read_text() if (target / "version").is_file() else None


@pytest.mark.parametrize("step", ["start", "aside", "in", "done"])
def test_kill_9_at_every_step_of_a_swap_keeps_the_old_or_the_new(tmp_path, step):
    target = tmp_path / "out" / "ds"
    target.mkdir(parents=True)
    (target / "version").write_text("old")
    proc = subprocess.run([sys.executable, "-c", _SWAP, str(target), step], cwd=REPO, env=ENV, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    # right after the kill the old version is at the target or waits under its seqpack-old name
    versions = {_version(p) for p in [target, *temporaries(tmp_path)]}
    assert "old" in versions or _version(target) == "new", versions
    # another write into the folder finishes what the kill interrupted, then goes on
    with pytest.raises(ArtifactError, match="appeared while it was being written"):
        with atomic_directory(target) as tmp:  # a new output, not allowed to replace
            (tmp / "version").write_text("third")
    assert _version(target) in {"old", "new"}
    assert _version(target) == ("old" if step in ("start", "aside") else "new")
    assert not temporaries(tmp_path)


def test_recovery_restores_an_old_directory_whose_target_is_missing(tmp_path):
    target = tmp_path / "ds"
    target.mkdir()
    (target / "version").write_text("old")
    subprocess.run([sys.executable, "-c", _SWAP, str(target), "aside"], cwd=REPO, env=ENV, timeout=60)
    assert not target.exists()
    assert recover_temporaries(tmp_path)
    assert _version(target) == "old" and not temporaries(tmp_path)


@pytest.mark.slow
def test_kill_9_during_an_energon_swap_then_another_write(energon_dataset, tmp_path):
    """The issue's sequence: the swap of --overwrite is killed after the old dataset moved aside; the next
    energon-prepare (without --overwrite) must find the old dataset back in place, not write over nothing."""
    from seqpack.packing.energon.prepare import read_manifest

    src, dataset = energon_dataset
    out = _copy(dataset, tmp_path)
    old = read_manifest(out).fingerprint
    smaller = tmp_path / "smaller.jsonl"
    smaller.write_text("".join(src.read_text().splitlines(keepends=True)[:10]))
    code = ("import os, signal, sys\nfrom seqpack.io import atomic\n"
            "atomic._step = lambda name: os.kill(os.getpid(), signal.SIGKILL) if name == 'aside' else None\n"
            "from seqpack.faces.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", code, "energon-prepare", str(smaller), "--out", str(out),
                           "--overwrite"], cwd=REPO, env=ENV, timeout=300, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-500:]
    assert not out.exists() and len(temporaries(tmp_path)) == 2  # the old one aside, the new one complete
    again = subprocess.run([sys.executable, "-m", "seqpack", "energon-prepare", str(smaller), "--out",
                            str(out)], cwd=REPO, env=ENV, timeout=300, capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr, again.stderr
    assert read_manifest(out).fingerprint == old and not temporaries(tmp_path)  # the old dataset, intact


# --------------------------------------------------------------------------------------------
# Ownership that does not rely on PIDs
# --------------------------------------------------------------------------------------------


def test_a_live_temporary_survives_a_writer_in_another_pid_namespace(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a PID namespace here ({probe.stderr.decode().strip()})")
    out = tmp_path / "out"
    out.mkdir()
    code = "import sys; from seqpack.io.atomic import atomic_directory\nwith atomic_directory(sys.argv[1]): pass\n"
    with atomic_directory(out / "a") as mine:  # live, in this namespace; the other one cannot see our pid
        (mine / "half.bin").write_bytes(b"x" * 100)
        other = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", code, str(out / "b")],
                               cwd=REPO, env=ENV, timeout=60, capture_output=True, text=True)
        assert other.returncode == 0, other.stderr
        assert (mine / "half.bin").is_file()
    assert (out / "a" / "half.bin").is_file() and (out / "b").is_dir() and not temporaries(out)
    assert digest([out / "a"])

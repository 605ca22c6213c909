"""Faults: special files and symlinks where a command expects a regular file (issue 26, family 2).

Classes: a FIFO given as the JSONL input, validation split, blend manifest, tokenizer, config, smoke
data, packed artifact, pack manifest, Energon manifest or skill marker (every reader refuses it at
once, naming the file, instead of waiting on the pipe); a character device as input (refused
unopened); a FIFO planted as the line-index cache (ignored); metadata paths that are a FIFO, a
character device or a symlink (refused, left as they are, the symlink's target untouched); an eval
``scores.json`` that is a symlink to a file outside the run directory (refused, the file untouched).

Every command runs on a worker thread with a deadline: a regression that blocks on a FIFO fails
the test (the FIFO is then opened from the other side to release the reader) instead of hanging it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from faults_helpers import Run, digest, temporaries

from seqpack.faces.cli import main

DEADLINE_S = 60.0


def _release(fifos: list[Path]) -> None:
    """Unblock a reader or writer stuck on each FIFO (open the other end, then close it)."""
    for fifo in fifos:
        for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
            try:
                os.close(os.open(fifo, flags))
            except OSError:
                pass


@pytest.fixture
def bounded(cli) -> Callable[..., Run]:
    """``bounded(*args, fifos=[...])``: ``cli(*args)`` that must finish within the deadline."""

    def run(*args: object, fifos: list[Path] = ()) -> Run:
        box: dict[str, Run | BaseException] = {}

        def target() -> None:
            try:
                box["run"] = cli(*args)
            except BaseException as exc:  # noqa: BLE001 - reported below
                box["run"] = exc

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(DEADLINE_S)
        if thread.is_alive():
            _release(list(fifos))
            thread.join(10)
            pytest.fail(f"seqpack {' '.join(map(str, args))} did not finish within {DEADLINE_S:g} s (blocked on a FIFO?)")
        result = box["run"]
        if isinstance(result, BaseException):
            raise result
        return result

    return run


@pytest.fixture
def fifo(tmp_path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        path = tmp_path / "fifos" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        return path

    return make


@pytest.mark.slow
def test_a_fifo_as_any_input_is_refused_at_once(bounded, fifo, data, tmp_path):
    out = tmp_path / "out"
    cases = [
        (("pack", "{f}", "--out", out, "--pack-size", 256), "in.jsonl", "JSONL file is a FIFO"),
        (("pack", data, "--validation", "{f}", "--out", out, "--pack-size", 256), "val.jsonl", "JSONL file is a FIFO"),
        (("pack", "{f}", "--out", out, "--pack-size", 256), "blend.yaml", "blend manifest is a FIFO"),
        (("pack", data, "--tokenizer", "{f}", "--out", out, "--pack-size", 256), "tokenizer.json",
         "tokenizer file is a FIFO"),
        (("plan", "--jsonl", "{f}"), "plan.jsonl", "JSONL file is a FIFO"),
        (("batches", "{f}"), "batches.jsonl", "JSONL file is a FIFO"),
        (("energon-prepare", "{f}", "--out", out / "ds"), "energon.jsonl", "JSONL file is a FIFO"),
        (("validate", "{f}"), "config.yaml", "config file is a FIFO"),
        (("smoke", "--path", "offline", "--config", "{f}"), "smoke.yaml", "config file is a FIFO"),
        (("smoke", "--path", "offline", "--data", "{f}"), "smoke.jsonl", "JSONL file is a FIFO"),
        (("inspect", "{f}"), "packs.idx.parquet", "packed Parquet file is a FIFO"),
    ]
    for args, name, needle in cases:
        path = fifo(name)
        run = bounded(*[str(path) if a == "{f}" else a for a in args], fifos=[path])
        run.refused(str(path), needle)
        assert stat.S_ISFIFO(os.lstat(path).st_mode)
    assert not out.exists() or not temporaries(out)


def test_a_character_device_as_input_is_refused_unopened(bounded, tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    bounded("pack", "/dev/zero", "--out", tmp_path / "o", "--pack-size", 256).refused("/dev/zero",
                                                                                     "is a character device")
    bounded("batches", "/dev/zero").refused("is a character device")


def test_a_fifo_where_a_manifest_or_marker_should_be(bounded, data, tmp_path, monkeypatch):
    from seqpack.verbs import PackOptions, pack

    first = pack(PackOptions(input=data, out=tmp_path / "packs", pack_size=256))
    first.manifest_path.unlink()
    os.mkfifo(first.manifest_path)
    before = sorted(p.name for p in first.root.iterdir())
    run = bounded("pack", data, "--out", tmp_path / "packs", "--pack-size", 256, fifos=[first.manifest_path])
    run.refused("cannot tell that it wrote", "is a FIFO")
    assert sorted(p.name for p in first.root.iterdir()) == before  # nothing deleted
    run = bounded("inspect", first.root, "--json", fifos=[first.manifest_path])
    assert run.code == 1 and "is a FIFO" in run.out and "Traceback" not in run.err  # an integrity issue

    project = tmp_path / "proj"
    assert bounded("install-skill", "--client", "claude", "--project", project).code == 0
    marker = project / ".claude" / "skills" / "megatron-sequence-packing" / ".seqpack-install.json"
    marker.unlink()
    os.mkfifo(marker)
    bounded("install-skill", "--client", "claude", "--project", project, "--force", fifos=[marker]).refused(
        "has no valid .seqpack-install.json", "is a FIFO")
    assert stat.S_ISFIFO(os.lstat(marker).st_mode)


@pytest.mark.slow
def test_a_fifo_as_the_energon_manifest(bounded, data, tmp_path):
    out = tmp_path / "ds"
    assert bounded("energon-prepare", data, "--out", out).code == 0
    manifest = out / "seqpack_energon.json"
    manifest.unlink()
    os.mkfifo(manifest)
    bounded("energon-prepare", data, "--out", out, "--overwrite", fifos=[manifest]).refused(
        "has no valid seqpack_energon.json", "is a FIFO")
    bounded("inspect", out, fifos=[manifest]).refused("is a FIFO")
    assert stat.S_ISFIFO(os.lstat(manifest).st_mode) and (out / "shards").is_dir()


def test_a_fifo_planted_as_the_line_index_cache_is_ignored(bounded, data, tmp_path):
    cache = data.parent / ".seqpack-cache" / f"{data.name}.idx.npz"
    cache.parent.mkdir()
    os.mkfifo(cache)
    run = bounded("pack", data, "--out", tmp_path / "o", "--pack-size", 256, fifos=[cache])
    assert run.code == 0, run.err
    assert stat.S_ISFIFO(os.lstat(cache).st_mode)  # not replaced either: seqpack never writes a FIFO


def _char_device(path: Path) -> bool:
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.stat(os.devnull).st_rdev)
    except (OSError, AttributeError):
        return False
    return True


def test_metadata_paths_that_are_special_files_or_symlinks_are_refused(bounded, data, tmp_path):
    targets = tmp_path / "targets"
    targets.mkdir()
    fifo_path = targets / "meta.fifo"
    os.mkfifo(fifo_path)
    real = targets / "real.json"
    real.write_text("[]\n")
    link = targets / "link.json"
    link.symlink_to(real)
    cases = [(fifo_path, "is a FIFO"), (link, "is a symbolic link")]
    device = targets / "meta.chr"
    if _char_device(device):
        cases.append((device, "is a character device"))
    for target, needle in cases:
        kind = stat.S_IFMT(os.lstat(target).st_mode)
        run = bounded("pack", data, "--out", tmp_path / "o", "--pack-size", 256, "--metadata-path", target,
                      fifos=[fifo_path])
        run.refused(str(target), "field 'metadata_path'", needle)
        assert stat.S_IFMT(os.lstat(target).st_mode) == kind  # left as it was, not replaced by a file
    assert real.read_text() == "[]\n" and link.is_symlink()
    assert not (tmp_path / "o").exists()  # refused before any work
    assert not temporaries(targets)


@pytest.mark.slow
def test_eval_score_never_writes_scores_through_a_symlink(bounded, tmp_path, eval_env):
    from seqpack_evals.runner import RunOptions, run_eval
    from seqpack_evals.tasks import load_tasks

    repo = Path(__file__).resolve().parents[2]
    fixtures = repo / "tests" / "fixtures" / "evals"
    key = repo / "evals" / "tasks.json"
    dataset = load_tasks(key)
    agent = " ".join(["python", str(fixtures / "fake_agent.py"), "--answers", str(fixtures / "answers.json"),
                      "--tasks", str(key)])
    run_dir = tmp_path / "run"
    run_eval(dataset, dataset.select(["nm-struct-pack"]), agent, run_dir, mode="baseline", timeout=60,
             options=RunOptions(read_only=[str(fixtures), str(key)], product_env=eval_env))
    outside = tmp_path / "elsewhere" / "precious.json"
    outside.parent.mkdir()
    outside.write_text('{"mine": true}\n')
    (run_dir / "scores.json").symlink_to(outside)
    before = digest([outside])
    bounded("eval", "score", run_dir).refused("scores.json", "is a symbolic link")
    assert digest([outside]) == before and (run_dir / "scores.json").is_symlink()
    (run_dir / "scores.json").unlink()
    assert bounded("eval", "score", run_dir).code in (0, 1)  # a regular place: written
    assert json.loads((run_dir / "scores.json").read_text())["tasks"]


def test_the_layer_refuses_without_opening(tmp_path):
    """The library face: a FIFO is refused by stat, so even a reader with no writer never blocks."""
    from seqpack.io import atomic, reading
    from seqpack.core.errors import InputError

    path = tmp_path / "p"
    os.mkfifo(path)
    for call in (reading.open_regular, reading.read_bytes, reading.read_text, reading.regular_file):
        with pytest.raises(InputError, match="is a FIFO"):
            call(path, what="input")
    assert reading.read_bytes(os.devnull) == b""  # the null device reads as an empty file
    with pytest.raises(Exception, match="is a character device"):
        atomic.check_write_target(os.devnull)  # and is never replaced by a write

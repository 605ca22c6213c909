"""Faults: --overwrite / --force / reuse meet a place they must not delete or a damaged artifact.

Classes: energon-prepare --out . / --out holding the input / a foreign or edited dataset / home /
root; pack --overwrite over a foreign manifest or a stray file; pack reuse of a truncated,
overwritten or deleted Parquet, of a stale manifest without file records; install-skill --force
over a foreign directory or an added file; --out naming a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from faults_helpers import assert_accounted, digest, temporaries

from seqpack.core.errors import ArtifactError
from seqpack.packing.offline.artifact import MANIFEST_NAME
from seqpack.verbs import PackOptions, pack


def _pack(data: Path, out: Path, **kw):
    return pack(PackOptions(input=data, out=out, pack_size=256, **kw))


# --------------------------------------------------------------------------------------------
# energon-prepare --overwrite
# --------------------------------------------------------------------------------------------


def test_energon_overwrite_refuses_the_current_directory(cli, data):
    before = digest([data.parent])
    cli("energon-prepare", data.name, "--out", ".", "--overwrite", cwd=data.parent).refused(
        "will not replace this directory", "current directory")
    assert digest([data.parent]) == before and not temporaries(data.parent.parent)


def test_energon_overwrite_refuses_a_directory_holding_the_input(cli, data):
    before = digest([data.parent])
    cli("energon-prepare", data, "--out", data.parent, "--overwrite").refused("holds an input of this run")
    assert digest([data.parent]) == before


def test_energon_overwrite_refuses_home_and_root(cli, data, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine\n")
    monkeypatch.setenv("HOME", str(home))
    cli("energon-prepare", data, "--out", home, "--overwrite").refused("home directory")
    assert (home / "notes.txt").read_text() == "mine\n"
    cli("energon-prepare", data, "--out", "/", "--overwrite").refused("root of the file system")


def test_energon_overwrite_refuses_a_directory_it_did_not_write(cli, data, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("\\begin{document}\n")
    cli("energon-prepare", data, "--out", foreign, "--overwrite").refused("has no valid seqpack_energon.json")
    assert (foreign / "thesis.tex").is_file() and not temporaries(tmp_path)


def test_energon_overwrite_replaces_its_own_dataset_but_not_an_added_file(cli, data, tmp_path):
    out = tmp_path / "ds"
    assert cli("energon-prepare", data, "--out", out).code == 0
    assert cli("energon-prepare", data, "--out", out, "--overwrite").code == 0  # its own: replaced
    (out / "shards" / "my-notes.md").write_text("added by hand\n")
    cli("energon-prepare", data, "--out", out, "--overwrite").refused("files seqpack did not write",
                                                                     "shards/my-notes.md")
    assert (out / "shards" / "my-notes.md").read_text() == "added by hand\n" and not temporaries(tmp_path)


def test_out_naming_a_file_is_refused(cli, data, tmp_path):
    target = tmp_path / "a-file.txt"
    target.write_text("keep me\n")
    cli("energon-prepare", data, "--out", target, "--overwrite").refused("names a file")
    cli("pack", data, "--out", target, "--pack-size", 256, "--overwrite").refused("names a file")
    assert target.read_text() == "keep me\n"


# --------------------------------------------------------------------------------------------
# pack: reuse verifies, overwrite replaces only its own
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "delete", "metadata"])
def test_pack_reuse_rebuilds_a_damaged_pack_of_its_own(data, tmp_path, damage):
    first = _pack(data, tmp_path / "packs")
    parquet = first.files["training"]
    good = parquet.read_bytes()
    if damage == "truncate":
        parquet.write_bytes(good[: len(good) // 2])
    elif damage == "overwrite":  # same size, other content: only the hash tells
        parquet.write_bytes(bytes(reversed(good)))
    elif damage == "delete":
        parquet.unlink()
    else:
        first.metadata_path.write_text("[]\n")
    again = _pack(data, tmp_path / "packs")
    assert again.reused is False and again.rebuilt, again.rebuilt
    assert parquet.read_bytes() == good and again.fingerprint == first.fingerprint
    assert_accounted(again.manifest)
    assert _pack(data, tmp_path / "packs").reused is True  # and the rebuilt one verifies
    assert not temporaries(tmp_path)


def test_pack_cli_says_rebuilt(cli, data, tmp_path):
    assert cli("pack", data, "--out", tmp_path / "p", "--pack-size", 256).code == 0
    parquet = next((tmp_path / "p").rglob("*.parquet"))
    parquet.write_bytes(parquet.read_bytes()[:100])
    run = cli("pack", data, "--out", tmp_path / "p", "--pack-size", 256)
    assert run.code == 0 and "rebuilt:" in run.out and "100 bytes" in run.out


def test_pack_reuse_without_file_records_rebuilds(data, tmp_path):
    first = _pack(data, tmp_path / "packs")
    manifest = json.loads(first.manifest_path.read_text())
    del manifest["files"]  # as an older seqpack wrote it: nothing to verify against
    first.manifest_path.write_text(json.dumps(manifest))
    again = _pack(data, tmp_path / "packs")
    assert not again.reused and "records no file sizes" in again.rebuilt
    assert "files" in json.loads(first.manifest_path.read_text())


def test_pack_refuses_a_stray_file_even_with_overwrite(data, tmp_path):
    first = _pack(data, tmp_path / "packs")
    stray = first.root / "my_extra.idx.parquet"
    stray.write_bytes(b"not mine to delete")
    before = digest([first.root])
    for overwrite in (False, True):
        with pytest.raises(ArtifactError, match="my_extra.idx.parquet.*stray"):
            _pack(data, tmp_path / "packs", overwrite=overwrite)
    assert digest([first.root]) == before


def test_pack_refuses_a_foreign_or_corrupt_manifest_even_with_overwrite(data, tmp_path):
    first = _pack(data, tmp_path / "packs")
    for text in ('{"format": "someone-else/1"}', '{"format": '):
        first.manifest_path.write_text(text)
        before = digest([first.root])
        with pytest.raises(ArtifactError, match="cannot tell that it wrote"):
            _pack(data, tmp_path / "packs", overwrite=True)
        assert digest([first.root]) == before


def test_pack_overwrite_replaces_its_own_pack(data, tmp_path):
    first = _pack(data, tmp_path / "packs")
    again = _pack(data, tmp_path / "packs", overwrite=True)
    assert not again.reused and again.rebuilt is None
    assert again.files["training"].read_bytes() == first.files["training"].read_bytes()
    assert not temporaries(tmp_path)


def test_pack_into_an_existing_empty_directory(data, tmp_path):
    first = _pack(data, tmp_path / "a")
    target = tmp_path / "b" / first.root.name
    target.mkdir(parents=True)  # empty: nothing to lose
    assert not _pack(data, tmp_path / "b").reused and (target / MANIFEST_NAME).is_file()


# --------------------------------------------------------------------------------------------
# install-skill --force
# --------------------------------------------------------------------------------------------


def test_install_skill_force_replaces_only_its_own_installation(cli, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    dest = project / ".claude" / "skills" / "megatron-sequence-packing"
    dest.mkdir(parents=True)
    (dest / "SKILL.md").write_text("my own skill, not seqpack's\n")
    cli("install-skill", "--client", "claude", "--project", project, "--force").refused(
        "no valid .seqpack-install.json")
    assert (dest / "SKILL.md").read_text() == "my own skill, not seqpack's\n"
    (dest / "SKILL.md").unlink()
    dest.rmdir()
    assert cli("install-skill", "--client", "claude", "--project", project).code == 0
    assert cli("install-skill", "--client", "claude", "--project", project, "--force").code == 0
    (dest / "references" / "my-notes.md").write_text("added\n")
    cli("install-skill", "--client", "claude", "--project", project, "--force").refused(
        "files seqpack did not write", "references/my-notes.md")
    assert (dest / "references" / "my-notes.md").is_file() and not temporaries(project)


def test_overwrite_places_are_refused_by_the_library_too(tmp_path, monkeypatch):
    from seqpack.io.ownership import check_replace_target

    monkeypatch.chdir(tmp_path)
    inp = tmp_path / "sub" / "in.jsonl"
    inp.parent.mkdir()
    inp.write_text("{}\n")
    for target, why in ((tmp_path, "current directory"), (tmp_path.parent, "contains the current directory"),
                        (inp.parent, "holds an input"), (Path(os.sep), "root of the file system")):
        with pytest.raises(ArtifactError, match=why):
            check_replace_target(target, inputs=[inp])
    check_replace_target(tmp_path / "elsewhere", inputs=[inp])  # a place of its own is fine


def test_a_truncated_energon_shard_is_refused_before_training(cli, data, tmp_path):
    from seqpack.packing.energon.prepare import read_manifest

    out = tmp_path / "ds"
    assert cli("energon-prepare", data, "--out", out).code == 0
    shard = next((out / "shards").glob("*.tar"))
    shard.write_bytes(shard.read_bytes()[:512])
    with pytest.raises(ArtifactError, match=r"shards/train-00000.tar is not the size the manifest recorded"):
        read_manifest(out)

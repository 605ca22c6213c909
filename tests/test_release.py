"""The release artifacts as a user gets them: ``python -m build`` makes the sdist and the wheel, ``twine check``
accepts both, and a clean venv with only the wheel (no torch, no megatron-core) runs the light verbs and the MCP
server, while a verb that needs an extra says which one in one line and exits 2.
"""

from __future__ import annotations

import email
import json
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from seqpack import __version__
from tests.release_env import clean_env, run, tool_names

pytestmark = pytest.mark.slow  # builds distributions and venvs

HEAVY = ("torch", "megatron-core", "megatron-energon", "transformer-engine", "tokenizers", "pillow", "jinja2")


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(zf.read(name))


def test_sdist_and_wheel_pass_twine_check(built_dists, tmp_path):
    sdist, wheel = built_dists
    out = run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel]).stdout
    assert out.count("PASSED") == 2, out
    # negative control: twine refuses a wheel that is not a zip
    broken = tmp_path / wheel.name
    broken.write_bytes(wheel.read_bytes()[: len(wheel.read_bytes()) // 2])
    assert run([sys.executable, "-m", "twine", "check", broken], check=False).returncode != 0


def test_wheel_declares_a_light_core_and_the_extras(built_dists):
    sdist, wheel = built_dists
    meta = _metadata(wheel)
    assert meta["Version"] == __version__ and wheel.name.startswith(f"seqpack-{__version__}-")
    requires = meta.get_all("Requires-Dist") or []
    core = [r for r in requires if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("<")[0].split("=")[0].strip() for r in core) == ["mcp", "numpy", "orjson",
                                                                                         "pyarrow", "pyyaml"]
    assert not any(h in r for r in core for h in HEAVY), core
    assert set(meta.get_all("Provides-Extra")) >= {"train", "energon", "hf", "vlm", "gpu", "ray", "all", "test"}
    by_extra = {}
    for r in requires:
        if "extra ==" in r:
            name, extra = r.split(";")[0].strip(), r.split("extra ==")[1].strip().strip("'\"")
            by_extra.setdefault(extra, []).append(name)
    assert any(n.startswith("torch") for n in by_extra["train"]) and any("megatron-core" in n for n in by_extra["train"])
    assert any("megatron-energon" in n for n in by_extra["energon"])
    assert any("transformer-engine" in n for n in by_extra["gpu"])
    assert "<!-- mcp-name: io.github." in meta.get_payload()  # the PyPI page proves the registry name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "seqpack/skill_assets/megatron-sequence-packing/SKILL.md" in names
    with tarfile.open(sdist) as tf:
        assert any(n.endswith("skills/megatron-sequence-packing/SKILL.md") for n in tf.getnames())


#: Module folders that must never ship: the eval harness, the upstream lane, and their old names inside the package.
NOT_SHIPPED = ("seqpack_evals/", "seqpack_lane/", "seqpack/evaluation/", "seqpack/upstream_lane/",
               "reference_impl/evaluation/", "reference_impl/upstream_lane/", "docgen.py")


def _prompt_probes(min_chars: int = 60) -> list[str]:
    """A distinctive line of every task prompt in evals/tasks.json (the answer key's questions)."""
    root = Path(__file__).resolve().parents[1]
    tasks = json.loads((root / "evals" / "tasks.json").read_text(encoding="utf-8"))
    tasks = tasks["evals"] if isinstance(tasks, dict) else tasks
    probes = []
    for task in tasks:
        lines = [ln.strip() for ln in str(task["prompt"]).splitlines() if len(ln.strip()) >= min_chars]
        if lines:
            probes.append(max(lines, key=len)[:200])
    return probes


def _leaks(names_and_texts: list[tuple[str, str]], probes: list[str]) -> list[str]:
    """Files of a distribution that are harness or lane modules, or that hold a task's prompt text."""
    found = [name for name, _ in names_and_texts if any(part in name for part in NOT_SHIPPED)]
    for name, text in names_and_texts:
        hit = next((p for p in probes if p in text), None)
        if hit is not None:
            found.append(f"{name}: holds the prompt text {hit[:60]!r}")
    return found


def _wheel_texts(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as zf:
        return [(n, zf.read(n).decode("utf-8", "replace")) for n in zf.namelist() if not n.endswith(".png")]


def test_the_wheel_ships_only_the_product(built_dists):
    _, wheel = built_dists
    texts = _wheel_texts(wheel)
    probes = _prompt_probes()
    assert len(probes) > 150  # every task is probed, not a handful
    assert _leaks(texts, probes) == []
    names = [n for n, _ in texts]
    assert "seqpack/__init__.py" in names and "seqpack/verbs/planning.py" in names
    # negative controls: a harness module, a lane module and a prompt copied into a shipped file are caught
    planted = [("seqpack_evals/runner.py", ""), ("seqpack_lane/client.py", ""),
               ("seqpack/data/notes.txt", "intro\n" + probes[7] + "\n")]
    assert len(_leaks(texts + planted, probes)) == 3


def test_light_install_has_no_heavy_package(light_install):
    listed = run([light_install / "python", "-m", "pip", "list", "--format", "json"]).stdout
    names = {p["name"].lower() for p in json.loads(listed)}
    assert "seqpack" in names and not names & set(HEAVY), names & set(HEAVY)
    probe = run([light_install / "python", "-c", "import torch"], check=False, env=clean_env())
    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr


def test_light_install_runs_the_light_verbs(light_install, tmp_path):
    env = clean_env(light_install)
    seqpack = light_install / "seqpack"
    where = run([light_install / "python", "-c", "import seqpack; print(seqpack.__file__)"],
                env=env, cwd=tmp_path).stdout
    assert where.startswith(str(light_install.parent)), where  # the wheel's copy, not the checkout
    align = json.loads(run([seqpack, "align", "--tp", "4", "--cp", "2", "--sp", "--json"], env=env, cwd=tmp_path).stdout)
    assert align["pad_seq_to_mult"] == 8
    ok = run([seqpack, "validate", "--example", "offline_8k_tp4_cp2_sp"], env=env, cwd=tmp_path, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run([seqpack, "validate", "--example", "broken_offline_cp2"], env=env, cwd=tmp_path, check=False)
    assert bad.returncode == 1 and "[PACK-OFFLINE-MBS1]" in bad.stdout
    plan = run([seqpack, "plan", "--lengths", "900,300,1500", "--json"], env=env, cwd=tmp_path)
    assert json.loads(plan.stdout)["recommended_pack_size"] > 0
    demo = run([seqpack, "demo-data"], env=env, cwd=tmp_path).stdout.strip()
    packed = run([seqpack, "pack", demo, "--out", tmp_path / "packs", "--pack-size", "4096", "--cp", "2", "--json"],
                 env=env, cwd=tmp_path)
    (parquet,) = (tmp_path / "packs").glob("*/training_4096.idx.parquet")
    assert json.loads(packed.stdout)["splits"]["training"]["accounting"]["packed"] == 2000
    assert "usable" in run([seqpack, "inspect", parquet, "--cp", "2"], env=env, cwd=tmp_path).stdout
    # install-skill works from the wheel's own copy of the skill
    installed = run([seqpack, "install-skill", "--client", "codex", "--project", tmp_path / "proj", "--json"], env=env,
                    cwd=tmp_path)
    assert Path(json.loads(installed.stdout)["destination"], "SKILL.md").is_file()


@pytest.mark.parametrize("argv, extra", [
    (["smoke", "--no-cp"], "train"),
    (["batches", "DEMO", "--mode", "in-batch"], "train"),
    (["energon-prepare", "DEMO", "--out", "ds"], "energon"),
])
def test_light_install_names_the_missing_extra_in_one_line(light_install, tmp_path, argv, extra):
    env = clean_env(light_install)
    seqpack = light_install / "seqpack"
    demo = run([seqpack, "demo-data"], env=env, cwd=tmp_path).stdout.strip()
    proc = run([seqpack, *[demo if a == "DEMO" else a for a in argv]], env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"seqpack {argv[0]}: error: the '{extra}' extra is not installed (torch is missing). "
                     f"Fix: pip install 'seqpack[{extra}]'"], proc.stderr
    assert not (tmp_path / "ds").exists()  # refused before doing anything


@pytest.mark.anyio
async def test_light_install_serves_mcp_without_torch(light_install, tmp_path):
    """The stdio server of the light install lists every tool, answers a light tool, and a tool that needs an
    extra answers isError with the install hint (the start-up time is measured in bench/bench_light_install.py)."""
    params = StdioServerParameters(command=str(light_install / "seqpack"), args=["mcp", "--root", str(tmp_path)],
                                   env=clean_env(light_install), cwd=str(tmp_path))
    with (tmp_path / "stderr.log").open("w") as errlog:
        started = time.monotonic()
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=60) as session:
                init = await session.initialize()
                assert init.server_info.name == "seqpack" and init.server_info.version == __version__
                tools = {t.name: t for t in (await session.list_tools()).tools}
                listed_after = time.monotonic() - started
                assert set(tools) == tool_names()
                assert "Needs the optional 'train' extra" in tools["run_packing_smoke_test"].description
                ok = await session.call_tool("derive_alignment", {"tp": 4, "cp": 2, "sp": True})
                assert ok.is_error is False and ok.structured_content["pad_seq_to_mult"] == 8
                heavy = await session.call_tool("run_packing_smoke_test", {"cp_check": False})
                assert heavy.is_error is True
                assert heavy.content[0].text == ("Error executing tool run_packing_smoke_test: the 'train' extra is not "
                                                 "installed (torch is missing). Fix: pip install 'seqpack[train]'")
                info = await session.call_tool("server_info", {})
                assert not any(info.structured_content["heavy_modules_loaded"][m] for m in ("torch", "megatron.core"))
    print(f"light install: tools/list answered {listed_after:.2f} s after the server process started")
    await anyio.sleep(0)

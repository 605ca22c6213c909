"""Every face reports the alignment of ``seqpack.core.alignment`` (docs/alignment.md's table), cell by cell.

For every topology of the generated table (TP 1-8, CP 1-8, SP off/on), every packing path and both
Megatron-Bridge targets, the required minimum and the recommended value the alignment module states are the
ones ``align`` reports (library, CLI and the MCP tool derive_alignment, all 1024 cells), the ones ``validate``
resolves for a config on that path (library and the validate_config tool, all 1024 cells); ``inspect`` calls
packs usable exactly at the required multiple (and ``recommended_met`` exactly at the recommended one);
``validate``'s text, ``plan`` and ``pack`` say which value they use; the generated table shows the same
numbers. The MCP tools that take a topology but no path or version are compared with every cell of their
path: plan_pack_length and inspect_packed_dataset with the 256 offline cells, inspect_in_batch with the 256
in-batch cells, inspect_global_batch with the 128 Bridge-main global-batch cells; pack_dataset, which writes
a dataset per call, with one offline cell per distinct (required, required width, recommended) triple (50).
Negative controls: a face that reported the skill's lcm for global-batch packing under Bridge main (the bug
PR #6127's product fixes) disagrees on the cells where SP, CP > 1 and TP > 1 meet; every MCP sweep's records
disagree, on some cells and only SP-on ones, with the requirement of the cell with SP off.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from seqpack.config import validate_config
from seqpack.core.alignment import ALIGNMENT_PATHS, alignment_requirement, alignment_table, derive_alignment
from seqpack.core.versions import BRIDGE_TARGETS

ROOT = Path(__file__).resolve().parents[1]
TABLE = alignment_table()

PATH_CONFIG = {
    "offline": {"dataset.enable_offline_packing": True, "dataset.offline_packing_specs.packed_sequence_size": 4096},
    "in_batch": {"dataset.kind": "direct_hf", "dataset.enable_in_batch_packing": True, "train.micro_batch_size": 2},
    "energon": {"dataset.kind": "energon", "dataset.packing_buffer_size": 16},
    "global_batch": {"dataset.enable_global_batch_packing": True, "model.max_seqlen_per_dp_cp_rank": 4096},
}


def _config(path: str, tp: int, cp: int, sp: bool) -> list[tuple[str, object]]:
    return [("model.tensor_model_parallel_size", tp), ("model.context_parallel_size", cp),
            ("model.sequence_parallel", sp), ("dist.world_size", 2 * tp * cp), ("model.seq_length", 4096),
            *PATH_CONFIG[path].items()]


@pytest.mark.parametrize("version", BRIDGE_TARGETS)
@pytest.mark.parametrize("path", ALIGNMENT_PATHS)
def test_validate_resolves_the_modules_numbers_on_every_cell(path, version):
    cells = [r for r in TABLE if r.path == path and r.bridge_version == version]
    assert len(cells) == 128
    for r in cells:
        resolved = validate_config(None, _config(path, r.tp, r.cp, r.sp), bridge_version=version).resolved
        assert resolved["alignment_requirement"] == r.to_dict(), (path, version, r.tp, r.cp, r.sp)
        assert resolved["pad_seq_to_mult_required"] == r.required
        expected = r.recommended if r.available else derive_alignment(r.tp, r.cp, r.sp).pad_seq_to_mult
        assert resolved["pad_seq_to_mult"] == expected, (path, version, r.tp, r.cp, r.sp)


def test_the_generated_table_shows_the_modules_numbers():
    text = (ROOT / "docs" / "alignment.md").read_text(encoding="utf-8")
    for version in BRIDGE_TARGETS:
        for path in ALIGNMENT_PATHS:
            head = f"### {path} ({version})"
            section = text.split(head, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
            cells = [r for r in TABLE if r.path == path and r.bridge_version == version]
            if not cells[0].available:
                assert "Not available" in section
                continue
            rows = [line for line in section.splitlines() if re.match(r"\| TP\d", line)]
            assert len(rows) == 16
            for line in rows:
                tp_text, sp_text, *values = [c.strip() for c in line.strip("|").split("|")]
                tp, sp = int(tp_text[2:]), sp_text == "on"
                for cp, value in enumerate(values, start=1):
                    r = alignment_requirement(path, tp, cp, sp, bridge_version=version)
                    numbers = [int(x) for x in re.findall(r"\d+", value)]
                    assert numbers == ([r.required] if r.required == r.recommended else [r.required, r.recommended])


def test_inspect_calls_packs_usable_exactly_at_the_required_multiple(tmp_path):
    """Packs whose every physical segment is a multiple of m, width 4096 x lcm: usable iff m is a multiple of
    the required value; recommended_met iff of the recommended one (offline, 0.6.2 and main)."""
    from seqpack.core.alignment import Topology
    from seqpack.packing.parquet import write_packed_parquet
    from seqpack.verbs.inspection import inspect_packed_dataset

    cache: dict[int, Path] = {}

    def packs(m: int) -> Path:
        if m not in cache:  # two segments of physical length m and 2m (stored: one more token each)
            row = {"input_ids": [5] * (m + 1) + [6] * (2 * m + 1), "loss_mask": [0] + [1] * m + [0] + [1] * (2 * m),
                   "seq_start_id": [0, m + 1]}
            cache[m] = write_packed_parquet([row], tmp_path / f"m{m}.idx.parquet")
        return cache[m]

    for version in BRIDGE_TARGETS:
        for tp, cp, sp in [(4, 2, True), (8, 1, True), (2, 2, True), (1, 4, False), (3, 2, True), (2, 3, False)]:
            r = alignment_requirement("offline", tp, cp, sp, bridge_version=version)
            width = 4 * 840 * 8  # a multiple of every width requirement here
            for m in sorted({r.required, r.recommended, max(1, r.required // 2)}):
                rep = inspect_packed_dataset(packs(m), Topology(tp, cp, sp), pack_size=width, eos_id=0,
                                             pad_to_max_length=True, bridge_version=version)
                t = rep.topology
                assert (t["required"], t["recommended"]) == (r.required, r.recommended)
                assert t["usable"] is (m % r.required == 0), (version, tp, cp, sp, m)
                assert t["recommended_met"] is (m % r.recommended == 0 and m % r.required == 0), (version, tp, cp, sp, m)


def test_a_face_using_the_lcm_for_global_batch_would_disagree():
    """Negative control: the lcm is not #6127's product where SP, CP > 1 and TP > 1 meet."""
    differs = [r for r in TABLE if r.path == "global_batch" and r.available
               and derive_alignment(r.tp, r.cp, r.sp).pad_seq_to_mult != r.recommended]
    assert differs and all(r.sp and r.cp > 1 and r.tp > 1 for r in differs)
    assert {(r.tp, r.cp) for r in differs} >= {(2, 2), (4, 2)}


# ------------------------------------------------------------------------------------------------
# the faces: align (library, CLI), validate's text, pack and plan


def _align_args(r) -> list[str]:
    return ["align", "--tp", str(r.tp), "--cp", str(r.cp), *(["--sp"] if r.sp else []), "--path", r.path,
            "--bridge-version", r.bridge_version, "--json"]


@pytest.mark.slow  # 1024 cells through the library and the CLI
def test_align_reports_the_modules_numbers_on_every_cell(capsys):
    import json

    from seqpack.faces.cli import main
    from seqpack.verbs.alignment import AlignOptions, align

    for r in TABLE:
        rep = align(AlignOptions(tp=r.tp, cp=r.cp, sp=r.sp, path=r.path, bridge_version=r.bridge_version))
        assert (rep.required, rep.required_width, rep.recommended) == (r.required, r.required_width, r.recommended)
        assert rep.requirement == r.to_dict()
        if r.available:
            assert rep.pad_seq_to_mult == r.recommended and rep.reports == "recommended"
        assert main(_align_args(r)) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["required"], out["recommended"], out["pad_seq_to_mult"]) == (
            r.required, r.recommended, rep.pad_seq_to_mult), (r.path, r.bridge_version, r.tp, r.cp, r.sp)


@pytest.fixture
def anyio_backend():
    return "asyncio"


# ------------------------------------------------------------------------------------------------
# the MCP tools, on every cell they can be asked about
#
# Each sweep records, per cell (path, Bridge version, TP, CP, SP), what a tool reports, and compares it with a
# projection of the module's requirement for that cell. Negative control: the same records compared with the
# requirement of the cell with SP switched off (a face that ignored SP) disagree on some cells, all with SP on.
# The calls run in-process (an in-memory client); jobs run on the worker thread rather than in a forked child
# (jobs.ISOLATE off: the fork costs about 0.5 s a call and changes nothing the tools report; the job hook has
# its own tests in test_mcp_server.py and tests/faults/).

Cell = tuple  # (path, bridge_version, tp, cp, sp)


def _truth(path: str, version: str, tp: int, cp: int, sp: bool):
    return alignment_requirement(path, tp, cp, sp, bridge_version=version)


def _sp_ignored(path: str, version: str, tp: int, cp: int, sp: bool):
    """A deliberately wrong expectation: the requirement as if SP were off."""
    return alignment_requirement(path, tp, cp, False, bridge_version=version)


def _disagreements(seen: dict, project, source=_truth) -> list:
    return [cell for cell, got in seen.items() if got != project(source(*cell))]


def _assert_agree(seen: dict, project, cells: int) -> None:
    """Every recorded cell agrees with the module; the SP-blind expectation disagrees on some (all SP on)."""
    assert len(seen) == cells
    bad = _disagreements(seen, project)
    assert bad == [], [(cell, seen[cell], project(_truth(*cell))) for cell in bad[:3]]
    wrong = _disagreements(seen, project, _sp_ignored)
    assert wrong and all(cell[-1] for cell in wrong)


def _cell(r) -> Cell:
    return (r.path, r.bridge_version, r.tp, r.cp, r.sp)


def _topo(r) -> dict:
    return {"tp": r.tp, "cp": r.cp, "sp": r.sp}


def _up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@pytest.fixture
async def mcp_client(tmp_path, monkeypatch):
    import json

    from mcp import Client

    from seqpack.faces.mcp import jobs
    from seqpack.faces.mcp.server import build_server

    monkeypatch.setattr(jobs, "ISOLATE", False)
    # two samples one token apart: no multiple above 1 divides every length
    rows = [{"prompt": "q" * (3 + i), "completion": "a" * n} for i, n in enumerate([2, 5, 3, 8, 13, 21, 34, 55])]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    async with Client(build_server([tmp_path]), raise_exceptions=True) as client:
        yield client


@pytest.mark.slow  # 1024 calls
@pytest.mark.anyio
async def test_mcp_derive_alignment_reports_the_modules_numbers_on_every_cell(mcp_client):
    from tests.test_mcp_server import call

    seen = {}
    for r in TABLE:
        out = await call(mcp_client, "derive_alignment",
                         {**_topo(r), "path": r.path, "bridge_version": r.bridge_version})
        seen[_cell(r)] = (out["required"], out["recommended"], out["requirement"]["citations"])
    _assert_agree(seen, lambda r: (r.required, r.recommended, [str(c) for c in r.citations]), 1024)


@pytest.mark.slow  # 1024 calls
@pytest.mark.anyio
async def test_mcp_validate_config_resolves_the_modules_numbers_on_every_cell(mcp_client):
    import json

    from tests.test_mcp_server import call

    def override(key: str, value: object) -> str:
        return f"{key}={json.dumps(value)}"

    seen = {}
    for r in TABLE:
        out = await call(mcp_client, "validate_config", {
            "overrides": [override(k, v) for k, v in _config(r.path, r.tp, r.cp, r.sp)],
            "bridge_version": r.bridge_version})
        resolved = out["resolved"]
        seen[_cell(r)] = (resolved["alignment_requirement"], resolved["pad_seq_to_mult_required"],
                          resolved["pad_seq_to_mult"])

    def project(r):
        chosen = r.recommended if r.available else derive_alignment(r.tp, r.cp, r.sp).pad_seq_to_mult
        return json.loads(json.dumps(r.to_dict())), r.required, chosen

    _assert_agree(seen, project, 1024)


@pytest.mark.slow  # 128 topologies x 3 calls, and the server's first build
@pytest.mark.anyio
async def test_mcp_plan_pack_length_uses_the_modules_numbers_on_every_offline_cell(mcp_client):
    """plan_pack_length plans offline packs and takes no Bridge version: one call per topology is compared
    with the offline cells of both versions (256); the required minimum is accepted when given, and half of
    it (CP > 1) is refused with the rule's id."""
    from tests.test_mcp_server import call, call_error

    base = {"lengths": [5, 3, 3, 2, 7], "token_slots": 256}
    by_topology: dict = {}
    for r in (r for r in TABLE if r.path == "offline"):
        key = (r.tp, r.cp, r.sp)
        if key not in by_topology:
            out = await call(mcp_client, "plan_pack_length",
                             {**base, **_topo(r), "candidates": [_up(64, r.recommended)]})
            given = await call(mcp_client, "plan_pack_length", {**base, **_topo(r), "pad_seq_to_mult": r.required,
                                                              "candidates": [_up(64, r.required)]})
            refused = None
            if r.cp > 1:
                refused = "[PACK-OFFLINE-PAD-MULT-TOPOLOGY]" in await call_error(
                    mcp_client, "plan_pack_length", {**base, **_topo(r), "pad_seq_to_mult": r.required // 2})
            a = out["alignment"]
            by_topology[key] = (a["reports"], a["required"], a["required_width"], a["recommended"],
                                out["pad_seq_to_mult"], given["pad_seq_to_mult"], given["alignment"]["required"],
                                refused)
    seen = {_cell(r): by_topology[(r.tp, r.cp, r.sp)] for r in TABLE if r.path == "offline"}
    assert len(by_topology) == 128

    def project(r):
        return ("recommended", r.required, r.required_width, r.recommended, r.recommended,
                r.required, r.required, True if r.cp > 1 else None)

    _assert_agree(seen, project, 256)


@pytest.mark.slow  # 256 cells x 2 inspections
@pytest.mark.anyio
async def test_mcp_inspect_packed_dataset_reports_the_modules_numbers_on_every_offline_cell(mcp_client, tmp_path):
    """Per cell, packs whose physical segments are multiples of m, width a multiple of the required width:
    at m = required the packs are usable (recommended_met iff required is a multiple of recommended), at
    m = required / 2 (required > 1) they are not."""
    from seqpack.packing.parquet import write_packed_parquet
    from tests.test_mcp_server import call

    files: dict = {}

    def packs(m: int) -> str:
        if m not in files:  # two segments of physical length m and 2m (stored: one more token each)
            row = {"input_ids": [5] * (m + 1) + [6] * (2 * m + 1), "loss_mask": [0] + [1] * m + [0] + [1] * (2 * m),
                   "seq_start_id": [0, m + 1]}
            files[m] = str(write_packed_parquet([row], tmp_path / f"m{m}.idx.parquet"))
        return files[m]

    seen = {}
    for r in (r for r in TABLE if r.path == "offline"):
        args = {**_topo(r), "bridge_version": r.bridge_version, "fixed_width": True}
        t = (await call(mcp_client, "inspect_packed_dataset", {
            **args, "path": packs(r.required), "pack_size": _up(3 * r.required + 2, r.required_width)}))["topology"]
        half = None
        if r.required > 1:
            m = r.required // 2
            half = (await call(mcp_client, "inspect_packed_dataset", {
                **args, "path": packs(m), "pack_size": _up(3 * m + 2, r.required_width)}))["topology"]["usable"]
        seen[_cell(r)] = (t["required"], t["required_width"], t["recommended"], t["usable"], t["recommended_met"], half)

    def project(r):
        return (r.required, r.required_width, r.recommended, True, r.required % r.recommended == 0,
                False if r.required > 1 else None)

    _assert_agree(seen, project, 256)


@pytest.mark.slow  # 128 topologies
@pytest.mark.anyio
async def test_mcp_inspect_in_batch_uses_the_modules_numbers_on_every_in_batch_cell(mcp_client):
    """inspect_in_batch takes no Bridge version: one call per topology, compared with both versions' in-batch
    cells (256); the value it reports and every batch's value is the recommended one (the required one too)."""
    from tests.test_mcp_server import call

    by_topology: dict = {}
    for r in (r for r in TABLE if r.path == "in_batch" and r.bridge_version == "main"):
        out = await call(mcp_client, "inspect_in_batch", {**_topo(r), "input_path": "data.jsonl", "mbs": 2,
                                                          "seq_length": _up(256, r.recommended), "num_batches": 2})
        batches = {b["pad_seq_to_mult"] for b in out["batches"]}
        m = out["alignment"]["pad_seq_to_mult"]
        aligned = all(n % m == 0 for b in out["batches"] for n in b["aligned_lengths"])
        by_topology[(r.tp, r.cp, r.sp)] = (m, batches, aligned)
    seen = {_cell(r): by_topology[(r.tp, r.cp, r.sp)] for r in TABLE if r.path == "in_batch"}
    _assert_agree(seen, lambda r: (r.recommended, {r.recommended, r.required}, True), 256)


@pytest.mark.slow  # 128 topologies
@pytest.mark.anyio
async def test_mcp_inspect_global_batch_uses_the_modules_numbers_on_every_global_batch_cell(mcp_client):
    """inspect_global_batch runs seqpack's global-batch path (Megatron-Bridge PR #6127's checks) and takes no
    Bridge version: compared with the Bridge-main cells (128); under 0.6.2 the table says the path is not
    available, which validate_config's sweep covers. Besides the SP-blind control, a face that reported the
    skill's lcm here (the bug #6127's product fixes) disagrees on some cells."""
    from tests.test_mcp_server import call

    seen = {}
    for r in (r for r in TABLE if r.path == "global_batch" and r.bridge_version == "main"):
        out = await call(mcp_client, "inspect_global_batch", {
            **_topo(r), "input_path": "data.jsonl", "seq_length": _up(512, r.recommended * r.cp), "gbs": 4,
            "num_steps": 1})
        seen[_cell(r)] = (out["settings"]["pad_seq_to_mult"],)
    _assert_agree(seen, lambda r: (r.recommended,), 128)
    assert _disagreements(seen, lambda r: (derive_alignment(r.tp, r.cp, r.sp).pad_seq_to_mult,))


def _one_cell_per_requirement() -> list:
    """One offline cell per distinct (required, required width, recommended), the Bridge version alternating."""
    by_key: dict = {}
    for r in (r for r in TABLE if r.path == "offline"):
        by_key.setdefault((r.required, r.required_width, r.recommended), {}).setdefault(r.bridge_version, r)
    return [cells[BRIDGE_TARGETS[i % len(BRIDGE_TARGETS)]] for i, cells in enumerate(by_key.values())]


@pytest.mark.slow  # 50 cells: 2 packs, 2 inspections and (CP > 1) a refusal each
@pytest.mark.anyio
async def test_mcp_pack_dataset_uses_the_modules_numbers(mcp_client):
    """pack_dataset writes a dataset per call, so it runs on one offline cell per distinct (required, required
    width, recommended) triple of the table (50 of the 256 offline cells, both Bridge versions): what pack
    chooses depends on the cell only through that triple. Per cell, packed by default the manifest records the
    recommended value (inspect_packed_dataset reads it back: usable, recommended met, at a fixed width: the
    runtime rounding of a free width to 16 is a training setting, rule PACK-OFFLINE-WIDTH-ALIGNED); packed with
    the required minimum it records that (usable); half of it (CP > 1) is refused with the rule's id."""
    from tests.test_mcp_server import call, call_error

    cells = _one_cell_per_requirement()
    assert len(cells) == 50 and {r.bridge_version for r in cells} == set(BRIDGE_TARGETS)
    seen = {}
    for r in cells:
        args = {**_topo(r), "bridge_version": r.bridge_version, "input_path": "data.jsonl", "output_dir": "packs",
                "pack_size": _up(256, math.lcm(r.recommended, r.required_width))}
        reports = []
        for extra in ({}, {"pad_seq_to_mult": r.required}):
            out = await call(mcp_client, "pack_dataset", {**args, **extra})
            rep = await call(mcp_client, "inspect_packed_dataset", {**_topo(r), "bridge_version": r.bridge_version,
                                                                    "path": out["root"], "fixed_width": True})
            t = rep["topology"]
            reports.append((rep["settings"]["pad_seq_to_mult"], t["required"], t["recommended"], t["usable"],
                            t["recommended_met"]))
        refused = None
        if r.cp > 1:
            refused = "[PACK-OFFLINE-PAD-MULT-TOPOLOGY]" in await call_error(
                mcp_client, "pack_dataset", {**args, "pad_seq_to_mult": r.required // 2})
        seen[_cell(r)] = (*reports, refused)

    def project(r):
        return ((r.recommended, r.required, r.recommended, True, True),
                (r.required, r.required, r.recommended, True, r.required % r.recommended == 0),
                True if r.cp > 1 else None)

    _assert_agree(seen, project, 50)


@pytest.mark.slow  # packs the demo data
def test_validate_text_pack_and_plan_say_which_value_they_report(capsys, tmp_path):
    from seqpack.data import demo_path
    from seqpack.faces.cli import main

    example = ROOT / "reference_impl" / "seqpack" / "config" / "examples" / "offline_8k_tp4_cp2_sp.yaml"
    assert main(["validate", str(example), "--set", "dataset.offline_packing_specs.pad_seq_to_mult=4"]) == 0
    assert "pad_seq_to_mult=4 (set in the config; required 4, recommended 8)" in capsys.readouterr().out
    gb = ["--set", "model.tensor_model_parallel_size=2", "--set", "model.sequence_parallel=true",
          "--set", "dist.world_size=16"]
    main(["validate", "--example", "global_batch_cp2", "--bridge-version", "main", *gb])
    text = capsys.readouterr().out
    assert "path=global_batch" in text and "pad_seq_to_mult=8 (recommended; required 8)" in text
    assert main(["plan", "--lengths", "900,300,1500,700", "--candidates", "2048,4096", "--token-slots", "8192",
                 "--tp", "4", "--cp", "2", "--sp"]) == 0
    assert "pad_seq_to_mult=8 (recommended; required 4)" in capsys.readouterr().out
    assert main(["pack", str(demo_path("prompt_completion")), "--out", str(tmp_path / "p"), "--pack-size", "4096",
                 "--tp", "4", "--cp", "2", "--sp", "--pad-seq-to-mult", "4", "--no-progress"]) == 0
    assert "pad_seq_to_mult=4 (given; required 4, recommended 8)" in capsys.readouterr().out
    # negative control: a value below the required minimum is refused by pack, as by the module
    assert main(["pack", str(demo_path("prompt_completion")), "--out", str(tmp_path / "q"), "--pack-size", "4096",
                 "--cp", "2", "--pad-seq-to-mult", "2", "--no-progress"]) == 2
    assert "PACK-OFFLINE-PAD-MULT-TOPOLOGY" in capsys.readouterr().err


def test_pack_and_plan_use_the_recommended_value_on_every_offline_cell():
    from seqpack.verbs.packing import PackOptions
    from seqpack.verbs.planning import PlanOptions

    for r in (r for r in TABLE if r.path == "offline" and r.bridge_version == "0.6.2"):
        topo = dict(tp=r.tp, cp=r.cp, sp=r.sp)
        assert PackOptions(input="x.jsonl", out="o", pack_size=4096, **topo).multiple() == r.recommended
        assert PlanOptions(lengths=[1], **topo).multiple() == r.recommended
        # the required minimum is accepted as an explicit value; half of it (when CP > 1) is refused
        given = PackOptions(input="x.jsonl", out="o", pack_size=4096, pad_seq_to_mult=r.required, **topo)
        assert given.multiple() == r.required
        if r.cp > 1:
            from seqpack.core.errors import UsageError

            with pytest.raises(UsageError, match="PACK-OFFLINE-PAD-MULT-TOPOLOGY|required"):
                PackOptions(input="x.jsonl", out="o", pack_size=4096, pad_seq_to_mult=r.required // 2, **topo).multiple()

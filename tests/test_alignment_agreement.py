"""Every face reports the alignment of ``seqpack.core.alignment`` (docs/alignment.md's table), cell by cell.

For every topology of the generated table (TP 1-8, CP 1-8, SP off/on), every packing path and both
Megatron-Bridge targets, the required minimum and the recommended value the alignment module states are the
ones ``align`` reports (library and CLI; the MCP tool on TP 1/2/4/8 x CP 1-4), the ones ``validate``
resolves for a config on that path; ``inspect`` calls packs usable exactly at the required multiple (and
``recommended_met`` exactly at the recommended one); ``validate``'s text, ``plan`` and ``pack`` say which
value they use; the generated table shows the same numbers. Negative control: a face that reported the skill's lcm for global-batch packing under Bridge main
(the bug PR #6127's product fixes) disagrees on the cells where SP, CP > 1 and TP > 1 meet.
"""

from __future__ import annotations

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
# the faces: align (library, CLI, MCP), validate's text, pack and plan


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


@pytest.mark.slow  # an in-memory MCP server, 256 calls
@pytest.mark.anyio
async def test_the_mcp_tool_reports_the_modules_numbers(tmp_path):
    import json

    from mcp import Client

    from seqpack.faces.mcp.server import build_server

    cells = [r for r in TABLE if r.tp in (1, 2, 4, 8) and r.cp in (1, 2, 3, 4)]
    async with Client(build_server([tmp_path]), raise_exceptions=True) as client:
        for r in cells:
            result = await client.call_tool("derive_alignment", {"tp": r.tp, "cp": r.cp, "sp": r.sp, "path": r.path,
                                                                 "bridge_version": r.bridge_version})
            assert result.is_error is False, result.content[0].text
            out = result.structured_content
            assert json.loads(result.content[0].text) == out
            assert (out["required"], out["recommended"]) == (r.required, r.recommended), (r.path, r.tp, r.cp, r.sp)
            assert out["requirement"]["citations"] == [str(c) for c in r.citations]


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

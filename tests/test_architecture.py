"""The architecture holds: layers import downward only, registries feed every face, shared helpers serve.

docs/architecture.md describes what is checked here.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

from seqpack.core import choices, limits, packing_paths
from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.faces.cli import build_parser, main
from seqpack.core.errors import ArtifactError, UsageError

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "reference_impl" / "seqpack"

#: Layers from the bottom up (DESIGN.md section 2); a module may import its own layer and those below.
LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("", "core", "io", "config"),
    "data": ("data",),
    "packing": ("packing",),
    "training": ("training",),
    "smoke": ("smoke",),
    "verbs": ("verbs",),
    "faces": ("faces", "__main__"),
}
ORDER = list(LAYERS)
#: Modules of the bottom layer never import these, not even inside a function.
HEAVY = ("torch", "numpy", "pyarrow", "megatron")


def _layer(module: str) -> str:
    top = module.split(".")[1] if "." in module else ""
    for name, tops in LAYERS.items():
        if top in tops:
            return name
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS (and to docs/architecture.md)")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.append((module, path))
    return out


# ------------------------------------------------------------------------------------------------
# Layers
# ------------------------------------------------------------------------------------------------


def test_imports_point_down_the_layers():
    wrong = []
    for module, path in _modules():
        mine = ORDER.index(_layer(module))
        for target in _imports(path):
            if (target == "seqpack" or target.startswith("seqpack.")) and ORDER.index(_layer(target)) > mine:
                wrong.append(f"{module} ({_layer(module)}) imports {target} ({_layer(target)})")
    assert not wrong, "\n".join(wrong)


def test_the_bottom_layer_imports_nothing_heavy():
    heavy = []
    for module, path in _modules():
        if _layer(module) == "base":
            heavy += [f"{module} imports {t}" for t in _imports(path) if t.split(".")[0] in HEAVY]
    assert not heavy, "\n".join(heavy)


def test_a_layer_violation_would_be_caught(tmp_path):
    # negative control: the same check on a module of the config layer that imports the packing layer
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from seqpack.packing.offline.prepare import prepare_packed_dataset\n")
    assert ORDER.index(_layer(_imports(bad)[0])) > ORDER.index(_layer("seqpack.config.bad"))


def test_light_modules_load_without_numpy_or_torch():
    code = ("import sys; import seqpack.core.alignment, seqpack.config, seqpack.core.choices, "
            "seqpack.core.limits, seqpack.core.packing_paths, seqpack.verbs; "
            "from seqpack.config import load_config; load_config(None).active_paths(); "
            "print(sorted(m for m in ('torch', 'numpy', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# The packing-path registry
# ------------------------------------------------------------------------------------------------


def test_builtin_paths_are_complete_specs():
    from seqpack.config import load_config, validate_config
    from seqpack.config.rules import FAMILIES, RULES_BY_ID

    assert packing_paths.path_names() == ("offline", "in_batch", "energon", "global_batch")
    for spec in packing_paths.paths():
        assert spec.rule_family in FAMILIES, spec.name
        assert spec.micro_batch_rule in RULES_BY_ID, spec.name
        assert set(spec.dataset_kinds) <= set(choices.DATASET_KINDS)
        for part in ("loader", "smoke_adapter", "smoke_data"):
            assert callable(spec.load(part)), (spec.name, part)
        cfg = load_config(dict(spec.smoke_config))
        assert cfg.active_paths() == [spec.name]  # the default smoke config turns on exactly this path
        assert cfg.dataset.kind in spec.dataset_kinds
        assert cfg.train.micro_batch_size == spec.default_micro_batch_size
        from seqpack.config.validate import version_target

        target = version_target(cfg)[0]  # the Bridge the path follows
        report = validate_config(cfg, bridge_version=target)
        assert report.ok, (spec.name, report.rule_ids)
        assert cfg.model.context_parallel_size == 2  # so the CP check runs by default
        broken = validate_config(cfg, [("train.micro_batch_size", 2 if spec.default_micro_batch_size == 1 else 1)],
                                 bridge_version=target)
        assert spec.micro_batch_rule in broken.rule_ids  # the named rule is the one that guards the MBS
    assert packing_paths.batch_modes() == ("offline", "in-batch", "global-batch")
    assert all(callable(packing_paths.path_for_mode(m).load("batches")) for m in packing_paths.batch_modes())


def test_registry_refuses_bad_registrations():
    spec = packing_paths.get_path("offline")
    with pytest.raises(UsageError, match="already registered"):
        packing_paths.register_path(spec)
    with pytest.raises(UsageError, match="must be an identifier"):
        dataclasses.replace(spec, name="has space")
    with pytest.raises(UsageError, match="batch mode 'in-batch' already belongs to in_batch"):
        packing_paths.register_path(dataclasses.replace(spec, name="other", batches="x:y", batch_mode="in-batch"))
    with pytest.raises(UsageError, match="unknown packing path 'nope'"):
        packing_paths.get_path("nope")


def _toy_spec() -> packing_paths.PackingPath:
    """A path defined only here: in-batch packing under another name, switched on by a dataset seed."""
    in_batch = packing_paths.get_path("in_batch")
    config = json.loads(json.dumps(in_batch.smoke_config))
    config["dataset"]["seed"] = 4242

    def toy_batches(cfg, jsonl, workdir):
        batches = in_batch.load("smoke_adapter")(cfg, jsonl, workdir)
        batches.details["adapter"] = "toy"
        return batches

    return packing_paths.PackingPath(
        name="toy", title="A toy path", dataset_kinds=("gpt_sft",), config_switch="dataset.seed=4242",
        enabled=lambda cfg: cfg.dataset.enable_in_batch_packing and cfg.dataset.seed == 4242,
        micro_batch_rule="PACK-IN-BATCH-MBS", default_micro_batch_size=4, rule_family="in_batch",
        loader=in_batch.loader, smoke_adapter=toy_batches, smoke_data=in_batch.smoke_data, smoke_config=config,
    )


@pytest.fixture
def toy_path():
    spec = packing_paths.register_path(_toy_spec())
    try:
        yield spec
    finally:
        packing_paths.unregister_path("toy")


def test_a_registered_path_appears_everywhere_the_registry_is_read(toy_path, capsys):
    from seqpack.config import load_config
    from seqpack.config.model_support import PATHS, check_model_support

    assert "toy" in choices.PACKING_PATHS and "toy" in PATHS
    assert load_config(dict(toy_path.smoke_config)).active_paths() == ["in_batch", "toy"]
    assert [r.status for r in check_model_support("llama3", "toy")] == ["unknown"]
    with pytest.raises(SystemExit):
        main(["smoke", "--help"])
    assert "global_batch, toy" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")
    smoke = next(a for a in build_parser()._subparsers._group_actions[0].choices["smoke"]._actions
                 if a.dest == "path")
    assert "toy" in smoke.choices
    packing_paths.unregister_path("toy")
    assert "toy" not in choices.PACKING_PATHS and "toy" not in smoke.choices


@pytest.mark.slow
def test_a_registered_path_runs_through_the_smoke_cli(toy_path, capsys):
    assert main(["smoke", "--path", "toy", "--size", "tiny", "--no-cp", "--json"]) == 1  # incomplete: no CP
    report = json.loads(capsys.readouterr().out)["reports"][0]
    assert report["path"] == "toy" and report["data"]["adapter"] == "toy"
    assert report["skipped"] == ["cp_matches_cp1"]
    assert all(c["status"] == "passed" for c in report["checks"] if c["name"] != "cp_matches_cp1")


# ------------------------------------------------------------------------------------------------
# Choices and limits feed every face
# ------------------------------------------------------------------------------------------------


def _cli_choices(command: str, dest: str) -> tuple[str, ...]:
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    return tuple(next(a for a in sub._actions if a.dest == dest).choices)


@pytest.fixture
def mcp_tools():
    import anyio
    from mcp import Client

    from seqpack.faces.mcp.server import build_server

    async def listed():
        async with Client(build_server([REPO], skill_dir=None)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    return anyio.run(listed)


def _enum(schema: dict) -> tuple[str, ...]:
    if "anyOf" in schema:
        schema = next(s for s in schema["anyOf"] if "enum" in s)
    return tuple(schema["enum"])


def test_choice_lists_come_from_one_place(mcp_tools):
    from seqpack.packing.global_batch.schedule import scheduler_names

    assert _cli_choices("pack", "algorithm") == choices.ALGORITHMS
    assert _cli_choices("plan", "algorithm") == choices.ALGORITHMS
    assert _cli_choices("pack", "truncation") == _cli_choices("batches", "truncation") == choices.TRUNCATION_MODES
    assert _cli_choices("pack", "loss_mode") == choices.LOSS_MODES
    assert _cli_choices("batches", "scheduler") == scheduler_names()
    assert set(scheduler_names()) == {"dp_balanced", "balanced"}
    assert _cli_choices("batches", "mode") == packing_paths.batch_modes()
    assert _cli_choices("smoke", "path") == ("all", *packing_paths.path_names())
    props = {name: tool.input_schema["properties"] for name, tool in mcp_tools.items()}
    assert _enum(props["plan_pack_length"]["algorithm"]) == choices.ALGORITHMS
    assert _enum(props["simulate_packing"]["oversize"]) == choices.OVERSIZE_MODES
    assert _enum(props["pack_dataset"]["loss_mode"]) == choices.LOSS_MODES
    assert _enum(props["inspect_global_batch"]["scheduler"]) == scheduler_names()
    assert _enum(props["run_packing_smoke_test"]["path"]) == packing_paths.path_names()
    assert _enum(props["check_model_support"]["path"]) == packing_paths.path_names()
    from seqpack.config.rules import FAMILIES

    assert set(_enum(props["list_rules"]["family"])) == set(FAMILIES)


def test_limits_are_published_and_enforced(mcp_tools):
    from seqpack.verbs import PlanOptions, SimulateOptions, plan, simulate_packing

    props = {name: tool.input_schema["properties"] for name, tool in mcp_tools.items()}
    assert props["derive_alignment"]["tp"]["maximum"] == limits.MAX_PARALLEL_SIZE
    assert props["simulate_packing"]["max_bins"]["maximum"] == limits.MAX_BINS_RETURNED
    assert props["plan_pack_length"]["candidates"]["maxItems"] == limits.MAX_CANDIDATES
    with pytest.raises(UsageError, match=rf"n={limits.MAX_PLAN_SAMPLES + 1} is over the limit of {limits.MAX_PLAN_SAMPLES}.*limits.py"):
        plan(PlanOptions(mix="uniform", n=limits.MAX_PLAN_SAMPLES + 1))
    with pytest.raises(UsageError, match="pack_size=4194305 is over the limit"):
        simulate_packing(SimulateOptions(lengths=[1], pack_size=limits.MAX_PACK_LEN + 1))
    with pytest.raises(UsageError, match="the limit is 16"):
        plan(PlanOptions(lengths=[5], candidates=tuple(range(8, 8 + 17 * 8, 8))))


# ------------------------------------------------------------------------------------------------
# MCP tools return the verbs' dataclasses
# ------------------------------------------------------------------------------------------------


def test_tool_output_schemas_are_the_result_dataclasses(mcp_tools):
    from seqpack.faces.mcp.registry import TOOLS
    from seqpack.core.results import Result, public_fields

    for name, spec in TOOLS.items():
        result_type = typing.get_type_hints(spec.fn)["return"]
        assert dataclasses.is_dataclass(result_type) and issubclass(result_type, Result), name
        schema = mcp_tools[name].output_schema
        assert list(schema["properties"]) == public_fields(result_type), name


# ------------------------------------------------------------------------------------------------
# Shared helpers
# ------------------------------------------------------------------------------------------------


def test_positive_int():
    assert positive_int("n", np.int64(3)) == 3 and type(positive_int("n", np.int64(3))) is int
    assert positive_int("n", None, allow_none=True) is None
    assert non_negative_int("n", 0) == 0
    for bad in (True, 0, -1, 2.0, "3", None):
        with pytest.raises(UsageError, match="n must be a positive integer"):
            positive_int("n", bad)
    with pytest.raises(UsageError, match="n must be an integer >= 0"):
        non_negative_int("n", -1)
    with pytest.raises(UsageError, match="n=9 is over the limit of 8") as err:
        positive_int("n", 9, maximum=8)
    assert err.value.field == "n" and "limits.py" in err.value.fix


def test_atomic_directory(tmp_path):
    from seqpack.io.atomic import atomic_directory

    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        assert not target.exists() and tmp.parent == tmp_path
        (tmp / "a.txt").write_text("a")
    assert (target / "a.txt").read_text() == "a" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    with pytest.raises(RuntimeError), atomic_directory(target, replace=True) as tmp:  # a failure keeps the old one
        (tmp / "b.txt").write_text("b")
        raise RuntimeError("boom")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    with atomic_directory(target, replace=True) as tmp:
        (tmp / "c.txt").write_text("c")
    assert sorted(p.name for p in target.iterdir()) == ["c.txt"]

    with pytest.raises(ArtifactError, match="appeared while it was being written"):
        with atomic_directory(target) as tmp:  # replace=False: what is there stays
            (tmp / "d.txt").write_text("d")
    assert sorted(p.name for p in target.iterdir()) == ["c.txt"] and len(list(tmp_path.iterdir())) == 1


def test_both_runtime_loaders_refuse_tokenizer_arguments_with_a_ready_dataset(write_jsonl):
    from seqpack.packing.global_batch.dataset import GlobalBatchSFTDataset, build_global_batch_loader
    from seqpack.packing.in_batch import SFTJsonlDataset, build_in_batch_loader
    from seqpack.core.packing_paths import get_path

    data = write_jsonl([{"prompt": "p" * 5, "completion": "c" * 5}] * 8)
    for name, build, dataset_class in (("in_batch", build_in_batch_loader, SFTJsonlDataset),
                                       ("global_batch", build_global_batch_loader, GlobalBatchSFTDataset)):
        cfg = dict(get_path(name).smoke_config)
        ds = dataset_class(data, seq_length=256)
        for kwargs in ({"tokenizer": "byte"}, {"schema": "chat"}, {"truncation": "left"}):
            with pytest.raises(UsageError, match="cannot be applied to a ready dataset"):
                build(cfg, ds, num_workers=0, **kwargs)
        assert len(list(build(cfg, ds, num_workers=0, drop_last=False))) > 0


def _package_figures():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "package_figures.py"
    spec = importlib.util.spec_from_file_location("package_figures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_no_module_over_800_lines_and_no_function_over_120_in_the_shipped_package():
    figures = _package_figures()
    got = figures.measure(Path(__file__).resolve().parents[1] / "reference_impl" / "seqpack").to_dict()
    assert got["modules_over_limit"] == 0, got["largest_modules"]
    assert got["functions_over_limit"] == 0, got["longest_functions"]
    assert got["root_modules"] <= 8


def test_negative_control_the_package_figures_see_long_functions_big_modules_and_cycles(tmp_path):
    figures = _package_figures()
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    body = "\n".join(f"    x{i} = {i}" for i in range(figures.MAX_FUNCTION_LINES))
    (pkg / "a.py").write_text(f"import toy.b\n\n\ndef long():\n{body}\n" + "#\n" * figures.MAX_MODULE_LINES)
    (pkg / "b.py").write_text("def f():\n    import toy.a\n")
    got = figures.measure(pkg).to_dict()
    assert got["modules_over_limit"] == 1 and got["functions_over_limit"] == 1
    assert got["cycles"] == [["toy.a", "toy.b"]]

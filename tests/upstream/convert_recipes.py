"""Convert Megatron-Bridge recipes from a snapshot into seqpack configs (test data for tests/upstream).

    python tests/upstream/convert_recipes.py            # rewrite tests/upstream/recipes/
    python tests/upstream/convert_recipes.py --check    # exit 1 if the committed files differ

Reads the recipes of a bare git snapshot of NVIDIA-NeMo/Megatron-Bridge (``fetch`` puts it under
``/work/.mirror``) with :mod:`recipe_interpreter`; no Bridge code is imported or copied. Every recipe
that turns a packing path on is converted, plus a fixed sample of those that do not. Each output
file is one seqpack config in YAML with the recipe's name, file, line and the upstream commit in
its header; ``index.json`` lists them with the conversion notes (world size assumed, fields that
have no seqpack equivalent).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recipe_interpreter import Interpreter, Obj, Snapshot, Unknown, Unsupported  # noqa: E402
from upstream_snapshots import BRIDGE as BRIDGE_REPO  # noqa: E402
from upstream_snapshots import BRIDGE_COMMIT, mirror, resolve_commit  # noqa: E402

MCORE_REPO = "NVIDIA/Megatron-LM"
#: Bridge's pinned Megatron-Core submodule (3rdparty/Megatron-LM at BRIDGE_COMMIT), for class defaults.
MCORE_PIN = "2a75ac12c54ba6a42b34024756820bf819a2e25f"
OUT = HERE / "recipes"
RECIPE_DIRS = re.compile(r"^src/megatron/bridge/recipes/[\w]+/(h100|gb200|gb300)/\w+\.py$")

DATASET_KINDS = {
    "GPTSFTDatasetConfig": "gpt_sft",
    "DirectHFSFTDatasetConfig": "direct_hf",
    "EnergonDatasetConfig": "energon",
    "MockVLMSFTDatasetConfig": "mock_vlm",
    "GPTDatasetConfig": "pretrain",
    "MockGPTDatasetConfig": "pretrain",
}
TASK_ENCODERS = {
    "QwenVLEnergonTaskEncoderConfig": "qwen_vl",
    "HFEnergonTaskEncoderConfig": "hf",
    "NemotronOmniEnergonTaskEncoderConfig": "nemotron_omni",
}
#: Recipe module file -> seqpack model-support family.
FAMILY_BY_MODULE = {
    "qwen3_next": "qwen3_next", "glm45": "glm45", "deepseek_v4": "deepseek_v4", "qwen35_vl": "qwen35_vl",
    "gemma3_vl": "gemma3_vl", "gemma4_vl": "gemma4_vl", "glm_45v": "glm45v", "kimi_k25_vl": "kimi_k25_vl",
    "ministral3": "ministral3", "nemotron_nano_v2_vl": "nemotron_nano_v2_vl", "nemotron_omni": "nemotron_omni",
    "qwen3_omni": "qwen3_omni", "exaone45": "exaone45", "nemotron_3_super": "nemotron3_super",
    "qwen25_vl": "qwen_vl", "qwen3_vl": "qwen3_vl", "qwen2_audio": None, "megatron_mimo": "megatron_mimo", "llama3": "llama3", "gemma2": "gemma3", "gemma3": "gemma3",
    "gpt_oss": "gpt_oss",
}
MODEL_FIELDS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "sequence_parallel", "seq_length",
    "calculate_per_token_loss", "mtp_num_layers", "cuda_graph_impl", "num_moe_experts",
    "overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "max_seqlen_per_dp_cp_rank",
)
SPEC_FIELDS = (
    "packed_sequence_size", "max_single_sequence_length", "pad_cu_seqlens", "pad_seq_to_mult",
    "packed_train_data_path", "packed_val_data_path", "packed_metadata_path",
)
DATASET_FIELDS = (
    "seq_length", "enable_offline_packing", "enable_in_batch_packing", "defer_in_batch_packing_to_step",
    "packing_buffer_size", "dataloader_type", "pad_to_max_length", "pad_to_multiple_of", "micro_batch_size",
    "max_train_samples", "hf_rewrite",
)


def list_recipes(snap: Snapshot, git_files: list[str]) -> list[tuple[str, str, int]]:
    """(module path, function, line) of every public ``*_config`` recipe in the hardware directories."""
    out = []
    for path in sorted(p for p in git_files if RECIPE_DIRS.match(p)):
        tree = ast.parse(snap.read(path) or "")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_config") and not node.name.startswith("_"):
                out.append((path, node.name, node.lineno))
    return out


def _plain(value: Any) -> Any:
    """A JSON-able value, or Unknown when the recipe's value is not a plain literal."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return Unknown("list item") if any(isinstance(i, Unknown) for i in items) else items
    if isinstance(value, dict):
        items = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if not isinstance(v, Unknown)}
    if isinstance(value, Obj) and value.type_name.startswith("result of") and "Enum" in value.type_name:
        return Unknown(value.type_name)
    return Unknown(type(value).__name__)


def _scope(value: Any) -> list[str] | Unknown:
    """Bridge's cuda_graph_scope (a string, a list of strings or enum members) as seqpack's list."""
    if isinstance(value, str):
        return [] if value in ("full", "") else [value]
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, tuple) and len(v) == 3 and v[0] == "class":  # CudaGraphScope.attn
                out.append(v[2])
            else:
                return Unknown("cuda_graph_scope item")
        return [] if out == ["full"] else out
    if value is None:
        return []
    return Unknown("cuda_graph_scope")


def convert(cfg: Obj, function: str, module_file: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The seqpack config of an evaluated recipe, plus notes on what was assumed or left out."""
    notes: list[str] = []
    dataset = cfg.get("dataset")
    if not isinstance(dataset, Obj) or dataset.type_name not in DATASET_KINDS:
        name = dataset.type_name if isinstance(dataset, Obj) else repr(dataset)
        return None, [f"dataset type {name} has no seqpack equivalent"]
    model, train, ddp, dist = cfg.get("model"), cfg.get("train"), cfg.get("ddp"), cfg.get("dist")
    out: dict[str, Any] = {"model": {}, "dataset": {"kind": DATASET_KINDS[dataset.type_name]}, "train": {},
                           "ddp": {}, "dist": {}}

    def put(section: str, key: str, value: Any, origin: str) -> None:
        value = _plain(value)
        if isinstance(value, Unknown):
            notes.append(f"{origin}: not a literal in the recipe ({value.what}); seqpack default used")
            return
        out[section][key] = value

    if isinstance(model, Obj):
        for name in MODEL_FIELDS:
            value = model.get(name)
            if isinstance(value, Unknown):
                continue
            if name == "cuda_graph_impl" and value in (None, "none"):
                value = "none"
            put("model", name, value, f"model.{name}")
        scope = _scope(model.get("cuda_graph_scope"))
        if isinstance(scope, Unknown):
            notes.append("model.cuda_graph_scope: not a literal; seqpack default used")
        else:
            out["model"]["cuda_graph_scope"] = scope
        if out["model"].get("mtp_num_layers") is None:
            out["model"].pop("mtp_num_layers", None)
        if out["model"].get("num_moe_experts") in (None, 0):
            out["model"].pop("num_moe_experts", None)
    family = FAMILY_BY_MODULE.get(Path(module_file).stem)
    if family:
        out["model"]["family"] = family
    for name in DATASET_FIELDS:
        if name in dataset.attrs or name in dataset.defaults:
            value = dataset.get(name)
            if not isinstance(value, Unknown):
                put("dataset", name, value, f"dataset.{name}")
    for key in [k for k, v in out["dataset"].items() if v is None and k != "seq_length"]:
        del out["dataset"][key]
    specs = dataset.get("offline_packing_specs")
    if isinstance(specs, Obj):
        out["dataset"]["offline_packing_specs"] = {}
        for name in SPEC_FIELDS:
            value = specs.get(name)
            if not isinstance(value, Unknown):
                put("dataset", "_specs_" + name, value, f"offline_packing_specs.{name}")
        for key in [k for k in out["dataset"] if k.startswith("_specs_")]:
            out["dataset"]["offline_packing_specs"][key[len("_specs_"):]] = out["dataset"].pop(key)
    kwargs = dataset.get("dataset_kwargs")
    if isinstance(kwargs, dict):
        plain = _plain(kwargs)
        relevant = {k: v for k, v in plain.items() if k in ("pad_to_max_length", "pad_seq_length_to_mult", "max_num_samples")}
        if relevant:
            out["dataset"]["dataset_kwargs"] = relevant
    encoder = dataset.get("task_encoder")
    if isinstance(encoder, Obj):
        out["dataset"]["task_encoder"] = TASK_ENCODERS.get(encoder.type_name, encoder.type_name)
    if isinstance(train, Obj):
        for name in ("micro_batch_size", "global_batch_size", "num_epochs"):
            value = train.get(name)
            if value is not None and not isinstance(value, Unknown):
                put("train", name, value, f"train.{name}")
    if isinstance(ddp, Obj):
        for name in ("average_in_collective", "use_megatron_fsdp"):
            value = ddp.get(name)
            if not isinstance(value, Unknown):
                put("ddp", name, value, f"ddp.{name}")
    if isinstance(dist, Obj):
        for name in ("eval_context_parallel_size", "use_decentralized_pg"):
            value = dist.get(name)
            if value is not None and not isinstance(value, Unknown):
                put("dist", name, value, f"dist.{name}")
    comm = cfg.get("comm_overlap")
    if isinstance(comm, Obj):
        for name in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
            if comm.attrs.get(name) is True:
                out["model"][name] = True
    m = out["model"]
    model_parallel = m.get("tensor_model_parallel_size", 1) * m.get("pipeline_model_parallel_size", 1) * m.get(
        "context_parallel_size", 1)
    gpus = re.search(r"_(\d+)gpu_", function)
    if gpus:
        out["dist"]["world_size"] = int(gpus.group(1))
    else:
        out["dist"]["world_size"] = model_parallel
        notes.append(f"dist.world_size: the recipe name gives no GPU count; assumed TP*PP*CP = {model_parallel}")
    for section, values in out.items():
        for key in [k for k, v in values.items() if v is None and k != "offline_packing_specs"]:
            del values[key]
    specs_out = out["dataset"].get("offline_packing_specs") or {}
    for key in [k for k, v in specs_out.items() if v is None and k != "pad_seq_to_mult"]:
        del specs_out[key]
    return {k: v for k, v in out.items() if v}, notes


def packing_path(config: dict[str, Any]) -> str:
    """The packing path a converted config turns on ("none" when unpacked)."""
    d = config.get("dataset", {})
    if d.get("enable_offline_packing"):
        return "offline"
    if d.get("enable_global_batch_packing"):  # seqpack's own switch; no Bridge recipe sets it at 067f987
        return "global_batch"
    if d.get("enable_in_batch_packing"):
        return "in_batch_deferred" if d.get("defer_in_batch_packing_to_step") else "in_batch"
    if d.get("kind") == "energon" and d.get("packing_buffer_size") is not None:
        return "energon"
    return "none"


def _yaml(config: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def build(bridge_dir: Path, mcore_dir: Path | None, commit: str = BRIDGE_COMMIT) -> dict[str, Any]:
    """Evaluate and convert every recipe; returns {"recipes": [...], "files": {name: text}}."""
    bridge = Snapshot(bridge_dir, commit)
    mcore = Snapshot(mcore_dir, MCORE_PIN) if mcore_dir is not None else None
    import subprocess

    files = subprocess.run(
        ["git", "--git-dir", str(bridge_dir), "ls-tree", "-r", "--name-only", commit, "--", "src/megatron/bridge/recipes"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    interp = Interpreter(bridge, mcore)
    entries: list[dict[str, Any]] = []
    for path, function, line in list_recipes(bridge, files):
        dotted = path[len("src/"):-3].replace("/", ".")
        entry: dict[str, Any] = {"recipe": f"{dotted}.{function}", "file": path, "line": line}
        try:
            mod = interp.module(dotted)
            fn = mod.globals[function] if mod else None
            cfg = interp.call_function(fn, [], {})  # type: ignore[arg-type]
            if not isinstance(cfg, Obj):
                raise Unsupported(f"returned {type(cfg).__name__}, not a config")
            config, notes = convert(cfg, function, path)
        except Unsupported as exc:
            config, notes = None, [f"not convertible: {exc}"]
        except RecursionError:
            config, notes = None, ["not convertible: recursion"]
        except Exception as exc:  # noqa: BLE001 - reported per recipe, never hidden
            config, notes = None, [f"not convertible: interpreter error {type(exc).__name__}: {exc}"]
        entry["notes"] = notes
        entry["path"] = packing_path(config) if config else None
        entry["config"] = config
        entries.append(entry)
    bridge.close()
    if mcore:
        mcore.close()
    return {"commit": commit, "recipes": entries}


def select(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every recipe with a packing path, plus a fixed sample of the rest: every SFT/PEFT recipe that
    runs unpacked and every fifth pretraining recipe (sorted by name)."""
    packed = [e for e in entries if e["config"] and e["path"] != "none"]
    unpacked = [e for e in entries if e["config"] and e["path"] == "none"]
    finetune = [e for e in unpacked if re.search(r"_(sft|peft)_", e["recipe"])]
    others = sorted((e for e in unpacked if e not in finetune), key=lambda e: e["recipe"])
    return packed + finetune + others[::5]


def header(entry: dict[str, Any], commit: str) -> str:
    lines = [
        f"# Megatron-Bridge recipe {entry['recipe'].rsplit('.', 1)[-1]}",
        f"# source: {BRIDGE_REPO}@{commit} {entry['file']}:{entry['line']}",
        "# converted to a seqpack config by tests/upstream/convert_recipes.py (do not edit by hand)",
    ]
    lines += [f"# note: {n}" for n in entry["notes"]]
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path = OUT, check: bool = False) -> list[str]:
    """Write (or compare) the converted files and index.json; returns the files that differ."""
    chosen = select(result["recipes"])
    wanted: dict[str, str] = {}
    index = []
    for e in chosen:
        name = e["recipe"].rsplit(".", 1)[-1] + ".yaml"
        wanted[name] = header(e, result["commit"]) + _yaml(e["config"])
        index.append({"file": name, "recipe": e["recipe"], "source": f"{e['file']}:{e['line']}", "path": e["path"],
                      "notes": e["notes"]})
    skipped = [{"recipe": e["recipe"], "source": f"{e['file']}:{e['line']}", "reason": "; ".join(e["notes"])}
               for e in result["recipes"] if not e["config"]]
    summary = {
        "upstream": f"{BRIDGE_REPO}@{result['commit']}",
        "megatron_core_pin": f"{MCORE_REPO}@{MCORE_PIN}",
        "recipes_found": len(result["recipes"]),
        "converted": sum(1 for e in result["recipes"] if e["config"]),
        "committed": len(chosen),
        "recipes": index,
        "not_convertible": skipped,
    }
    wanted["index.json"] = json.dumps(summary, indent=1) + "\n"
    stale = []
    existing = {p.name for p in out.glob("*")} if out.is_dir() else set()
    for name, text in wanted.items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
            if not check:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    for name in sorted(existing - set(wanted)):
        stale.append(name)
        if not check:
            (out / name).unlink()
    return stale


def snapshot_dirs() -> tuple[Path | None, Path | None]:
    """The Bridge and Megatron-LM mirrors, when present and holding the pinned commits."""
    bridge = mirror(BRIDGE_REPO)
    if bridge is not None and resolve_commit(BRIDGE_REPO, BRIDGE_COMMIT) is None:
        bridge = None
    mcore = mirror(MCORE_REPO)
    if mcore is not None and resolve_commit(MCORE_REPO, MCORE_PIN) is None:
        mcore = None
    return bridge, mcore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files are stale")
    args = parser.parse_args(argv)
    bridge, mcore = snapshot_dirs()
    if bridge is None:
        print(f"the {BRIDGE_REPO} snapshot at {BRIDGE_COMMIT[:12]} is not on this machine", file=sys.stderr)
        return 2
    stale = write(build(bridge, mcore), check=args.check)
    for name in stale:
        print(("stale: " if args.check else "wrote: ") + name, file=sys.stderr)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())

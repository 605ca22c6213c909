"""Read Megatron-Bridge's own config dump (``run_config.yaml``) as a seqpack config.

Bridge writes the whole ``ConfigContainer`` with ``ConfigContainer.to_yaml`` next to every checkpoint
(megatron-bridge 0.6.2, ``training/checkpointing.py``; the same serialization for
``logger.save_config_filepath``): every section, every field, nested dataclasses as mappings with a
``_target_`` class path, enums as ``{_target_, _call_, _args_, _name_}``, functions and dtypes as
``{_target_, _call_: false}``. :func:`is_bridge_dump` recognises that form (a top-level ``_target_``
naming a ``ConfigContainer``) and :func:`from_bridge_dump` maps the packing-relevant fields onto
seqpack's sections (the field names are Bridge's). Everything else (optimizer, logger, checkpoint,
tokenizer, the model's other hundreds of fields) is not packing-relevant and is left out; the
notes say what was inferred. A dump carries no world size (Bridge reads ``WORLD_SIZE`` at launch):
give it with ``--set dist.world_size=N``, or the rules that need the data-parallel size stay
unchecked.

Pure: no I/O, no upstream import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from seqpack.config.schema import DDPConfig, ModelConfig, OfflinePackingSpecs, TrainConfig
from seqpack.core.errors import ConfigError

#: Bridge dataset config class -> seqpack dataset kind (subclasses are matched by name suffix).
DATASET_KINDS: dict[str, str] = {
    "GPTSFTDatasetConfig": "gpt_sft",
    "DirectHFSFTDatasetConfig": "direct_hf",
    "EnergonDatasetConfig": "energon",
    "MockVLMSFTDatasetConfig": "mock_vlm",
    "GPTDatasetConfig": "pretrain",
    "MockGPTDatasetConfig": "pretrain",
    "GPTFIMDatasetConfig": "pretrain",
}
#: Bridge task-encoder class-name fragment -> seqpack's task_encoder name.
TASK_ENCODERS: tuple[tuple[str, str], ...] = (("QwenVL", "qwen_vl"), ("NemotronOmni", "nemotron_omni"),
                                              ("HFEnergon", "hf"))
#: Model provider class-name prefix -> seqpack model-support family (the longest prefix wins). Only
#: families whose rules depend on the name are needed; the others validate without a family.
PROVIDER_FAMILIES: dict[str, str] = {
    "Qwen3VL": "qwen3_vl", "Qwen35VL": "qwen35_vl", "Qwen25VL": "qwen_vl", "Qwen3Next": "qwen3_next",
    "Gemma3VL": "gemma3_vl", "Gemma4VL": "gemma4_vl", "GLM45V": "glm45v", "KimiK25VL": "kimi_k25_vl",
    "NemotronVL": "nemotron_nano_v2_vl", "NemotronOmni": "nemotron_omni", "Qwen3Omni": "qwen3_omni",
    "Exaone45": "exaone45", "Ministral3": "ministral3", "Llava": "llava", "MegatronMIMO": "megatron_mimo",
}
#: Dataset fields read from the dump (same names in Bridge and seqpack).
_DATASET_FIELDS = ("seq_length", "seed", "enable_offline_packing", "enable_in_batch_packing",
                   "defer_in_batch_packing_to_step", "packing_buffer_size", "dataloader_type", "pad_to_max_length",
                   "pad_to_multiple_of", "in_batch_packing_pad_to_multiple_of", "micro_batch_size", "num_workers",
                   "drop_last", "max_train_samples", "hf_rewrite", "enable_global_batch_packing",
                   "yields_unpacked_samples")
_PACKING_SWITCHES = ("enable_offline_packing", "enable_in_batch_packing", "enable_global_batch_packing")


def is_bridge_dump(data: Any) -> bool:
    """True for the mapping ``ConfigContainer.to_yaml`` writes (its top-level ``_target_`` is a ConfigContainer)."""
    target = data.get("_target_") if isinstance(data, Mapping) else None
    return isinstance(target, str) and target.rsplit(".", 1)[-1].endswith("ConfigContainer")


def _class(section: Any) -> str:
    target = section.get("_target_") if isinstance(section, Mapping) else None
    return target.rsplit(".", 1)[-1] if isinstance(target, str) else ""


def _plain(value: Any) -> Any:
    """An enum dump (``_args_``/``_name_``) as its value; other values unchanged."""
    if isinstance(value, Mapping) and "_target_" in value and "_args_" in value and "_name_" in value:
        args = value.get("_args_") or [value.get("_name_")]
        return args[0]
    return value


def _scope(value: Any) -> list[str]:
    """Bridge's ``cuda_graph_scope`` (a string, null or a list of strings / enum dumps) as seqpack's list."""
    if value is None or value in ("full", ""):
        return []
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, Mapping) and "_name_" in item:
            out.append(str(item["_name_"]))
        else:
            out.append(str(_plain(item)))
    return [] if out == ["full"] else out


def _language_fields(model: Mapping[str, Any], notes: list[str]) -> Mapping[str, Any]:
    """The mapping that holds the language model's fields: the provider itself, or the provider it nests
    (a multimodal container such as MegatronMIMOProvider keeps them in ``standard_provider``)."""
    if "tensor_model_parallel_size" in model:
        return model
    for key, value in model.items():
        if isinstance(value, Mapping) and "_target_" in value and "tensor_model_parallel_size" in value:
            notes.append(f"model fields read from the nested provider model.{key} ({_class(value)})")
            return value
    return model


def _model(outer: Mapping[str, Any], comm: Mapping[str, Any] | None, notes: list[str]) -> dict[str, Any]:
    model = _language_fields(outer, notes)
    out: dict[str, Any] = {}
    for f in fields(ModelConfig):
        if f.name in ("family", "is_hybrid_model") or f.name not in model:
            continue
        value = _plain(model[f.name])
        if f.name == "cuda_graph_scope":
            value = _scope(value)
        elif f.name in ("cuda_graph_impl", "vision_cuda_graph_impl") and value is None:
            value = "none"
        elif f.name in ("num_moe_experts", "mtp_num_layers") and value == 0:
            value = None
        if value is None and f.default is not None:
            continue  # Bridge's null where seqpack has a definite default
        out[f.name] = value
    provider = _class(outer)
    if "hybrid_override_pattern" in model or "hybrid_layer_pattern" in model or "Hybrid" in provider or "Mamba" in provider:
        out["is_hybrid_model"] = True
    hits = [p for p in PROVIDER_FAMILIES if provider.startswith(p)]
    if hits:
        out["family"] = PROVIDER_FAMILIES[max(hits, key=len)]
        notes.append(f"model.family={out['family']} from the provider class {provider}")
    for name in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
        if isinstance(comm, Mapping) and comm.get(name) is True:
            out[name] = True
    return out


def _dataset(dataset: Any, notes: list[str]) -> dict[str, Any]:
    if not isinstance(dataset, Mapping):
        raise ConfigError("the Bridge config dump has no dataset section", field="dataset")
    cls = _class(dataset)
    kind = next((k for name, k in DATASET_KINDS.items() if cls == name), None)
    if kind is None:
        kind = next((k for name, k in DATASET_KINDS.items() if cls.endswith(name)), None)
    if kind is None and "Energon" in cls:
        kind = "energon"
    if kind is None:
        on = [s for s in _PACKING_SWITCHES if dataset.get(s) is True]
        if on:
            raise ConfigError(f"dataset class {cls or '(none)'} is not one seqpack knows, yet it sets {on[0]}=true",
                              field=f"dataset.{on[0]}", fix="validate a dump whose dataset is one of "
                              + ", ".join(DATASET_KINDS))
        notes.append(f"dataset class {cls or '(none)'} has no packing path seqpack knows: checked as unpacked pretraining")
        return {"kind": "pretrain", **({"seq_length": dataset["seq_length"]} if isinstance(dataset.get("seq_length"), int) else {})}
    out: dict[str, Any] = {"kind": kind}
    for name in _DATASET_FIELDS:
        if name == "packing_buffer_size" and kind != "energon":
            continue
        if name in dataset and dataset[name] is not None:
            out[name] = _plain(dataset[name])
    if "random_seed" in dataset and "seed" not in out and isinstance(dataset["random_seed"], int):
        out["seed"] = dataset["random_seed"]
    specs = dataset.get("offline_packing_specs")
    if isinstance(specs, Mapping):
        names = {f.name for f in fields(OfflinePackingSpecs)}
        out["offline_packing_specs"] = {k: v for k, v in specs.items() if k in names and (v is not None or k == "pad_seq_to_mult")}
    kwargs = dataset.get("dataset_kwargs")
    if isinstance(kwargs, Mapping):
        out["dataset_kwargs"] = {k: v for k, v in kwargs.items() if not isinstance(v, Mapping)}
    encoder = task_encoder_name(dataset.get("task_encoder"))
    if encoder is not None:
        out["task_encoder"] = encoder
    return out


def task_encoder_name(encoder: Any) -> str | None:
    """seqpack's ``task_encoder`` name for Bridge's task-encoder object (its ``_target_`` class), or None
    when the mapping names no class."""
    if not isinstance(encoder, Mapping) or not _class(encoder):
        return None
    enc = _class(encoder)
    return next((name for frag, name in TASK_ENCODERS if frag in enc), enc)


def _pick(section: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(section, Mapping):
        return {}
    return {n: section[n] for n in names if section.get(n) is not None}


def from_bridge_dump(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The seqpack config (nested dict) of a Bridge config dump, and notes on what was inferred."""
    notes: list[str] = []
    model = data.get("model")
    if not isinstance(model, Mapping):
        raise ConfigError("the Bridge config dump has no model section", field="model")
    out: dict[str, Any] = {
        "model": _model(model, data.get("comm_overlap"), notes),
        "dataset": _dataset(data.get("dataset"), notes),
        "train": _pick(data.get("train"), tuple(f.name for f in fields(TrainConfig))),
        "validation": _pick(data.get("validation"), ("eval_micro_batch_size", "eval_global_batch_size")),
        "ddp": _pick(data.get("ddp"), tuple(f.name for f in fields(DDPConfig))),
        "dist": _pick(data.get("dist"), ("eval_context_parallel_size", "use_decentralized_pg")),
        "rerun_state_machine": _pick(data.get("rerun_state_machine"), ("check_for_nan_in_loss",)),
    }
    notes.append("dist.world_size is not in a Bridge dump (Bridge reads WORLD_SIZE at launch); "
                 "give it with --set dist.world_size=N")
    return {k: v for k, v in out.items() if v}, notes


__all__ = ["DATASET_KINDS", "PROVIDER_FAMILIES", "TASK_ENCODERS", "from_bridge_dump", "is_bridge_dump"]

"""seqpack's config, field by field, as the Megatron-Bridge ``ConfigContainer`` a user would write.

:func:`bridge_spec` turns a :class:`~seqpack.config.schema.TrainingConfig` into the JSON spec
the lane's ``validate.run`` op builds with the released classes. seqpack's field names are Bridge's,
so most fields are carried as they are; the rest is decided here, once, and listed in
:data:`NOT_CARRIED` and :data:`PLACEHOLDERS`:

* the dataset kind picks the dataset config class (``gpt_sft`` -> ``GPTSFTDatasetConfig``, ...);
  every dataset field the user set (not left at seqpack's default) is passed to it, so a field the
  release's class lacks fails there as it would for the user;
* the model is a small ``GPTModelProvider`` (the recipes' text model) with the Transformer-Engine-only
  features off (``transformer_impl="local"``, no fusions), as the CPU lane needs; its sizes are
  picked to fit the parallel layout (heads divisible by TP, layers by PP*VPP). Every packing-relevant
  model field is passed with seqpack's value, defaults included where Bridge's default differs;
* ``dist.world_size`` becomes ``WORLD_SIZE`` (Bridge reads the world size from the environment);
* sources seqpack does not model (dataset root, HF source, Energon path, processor) are placeholders.

Pure: no upstream import, no I/O; the caller creates the files :attr:`BridgeSpec.files` names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

from seqpack.config.schema import DatasetConfig, ModelConfig, OfflinePackingSpecs, TrainingConfig

#: seqpack dataset kind -> the Megatron-Bridge dataset config class.
DATASET_CLASSES: dict[str, str] = {
    "gpt_sft": "GPTSFTDatasetConfig",
    "direct_hf": "DirectHFSFTDatasetConfig",
    "energon": "EnergonDatasetConfig",
    "mock_vlm": "MockVLMSFTDatasetConfig",
    "pretrain": "MockGPTDatasetConfig",
}
#: seqpack's Energon task encoder name -> the Bridge task-encoder config class (None: Qwen-VL).
TASK_ENCODERS: dict[str | None, str] = {
    None: "QwenVLEnergonTaskEncoderConfig",
    "qwen_vl": "QwenVLEnergonTaskEncoderConfig",
    "hf": "HFEnergonTaskEncoderConfig",
    "nemotron_omni": "NemotronOmniEnergonTaskEncoderConfig",
}
#: seqpack fields with no ``ConfigContainer`` field, and why they are not carried.
NOT_CARRIED: dict[str, str] = {
    "model.family": "names the recipe / model family; the container holds the built provider, not a name "
    "(rules that read it concern the family's training step)",
    "model.is_hybrid_model": "selects a Mamba hybrid provider; the lane builds the GPT provider",
    "model.qwen3_vl_disttrain": "a Qwen3-VL provider setting; the lane builds the GPT provider",
    "dataset.kind": "selects the dataset config class (DATASET_CLASSES)",
    "dist.world_size": "Bridge reads the world size from WORLD_SIZE, which the spec sets",
}
#: Model fields that only a vision-language provider has (the GPT provider refuses them).
VLM_MODEL_FIELDS = ("vision_cuda_graph_impl", "max_vision_cuda_graph_seq_length")
#: Fields set on every built config that seqpack does not model, with the value used.
PLACEHOLDERS: dict[str, str] = {
    "GPTSFTDatasetConfig.dataset_root": "an existing empty directory (hf_dataset instead when hf_rewrite)",
    "DirectHFSFTDatasetConfig.source": "HFDatasetSourceConfig(path_or_dataset=<dir>, split='train'); "
    "validation and test splits off",
    "EnergonDatasetConfig.path / task_encoder.hf_processor_path": "an existing directory / a processor id",
    "MockVLMSFTDatasetConfig.hf_processor_path": "a processor id",
    "model.num_moe_experts": "unset with expert_model_parallel_size > 1: 2*EP (the model's own count: recipes "
    "read it from the HF config, seqpack's rules do not depend on it)",
    "model sizes": "2*PP*VPP layers, 4*TP heads of 16, vocabulary 256; a MoE model's first layer is dense "
    "(moe_layer_freq), as in DeepSeek-style recipes, so an 'mlp' CUDA-graph scope has a dense layer to capture",
    "mixed_precision": "bf16_mixed, the recipes' precision",
    "dist.use_gloo_process_groups": "false with use_decentralized_pg (Bridge requires NCCL-only groups there)",
    "tokenizer": "NullTokenizer",
    "optimizer / scheduler / logger / checkpoint": "Bridge's defaults (non-distributed Adam, lr 1e-4)",
}
#: The recipes' Transformer-Engine-only model features, off (the lane has no Transformer Engine).
TE_OFF: dict[str, Any] = {
    "transformer_impl": "local", "apply_rope_fusion": False, "gradient_accumulation_fusion": False,
    "bias_activation_fusion": False, "bias_dropout_fusion": False, "masked_softmax_fusion": False,
    "persist_layer_norm": False, "cross_entropy_loss_fusion": False, "moe_permute_fusion": False,
}
#: Model fields passed even at seqpack's default, because Bridge's default differs (or is a TE path).
ALWAYS_PASSED = ("moe_token_dispatcher_type", "cuda_graph_impl", "calculate_per_token_loss", "sequence_parallel")
#: The recipes' precision (resolved by ``runtime_config_update``); some MoE features need bf16 or fp16.
MIXED_PRECISION = "bf16_mixed"
#: The GPU the flex-dispatcher check is answered for (the lane has none; see ``ops/_build.gpu_stand_in``).
TARGET_GPU = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0}


@dataclass
class BridgeSpec:
    """The spec ``validate.run`` builds, the files it needs, and what was not carried."""

    spec: dict[str, Any]
    files: list[str] = field(default_factory=list)
    not_carried: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_vlm_provider(self) -> bool:
        """True when a set model field exists only on a vision-language provider."""
        return any(f"model.{name}" in self.not_carried for name in VLM_MODEL_FIELDS)


def _obj(name: str, **kwargs: Any) -> dict[str, Any]:
    return {"__class__": name, **kwargs}


def _set_fields(section: Any, defaults: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``section`` that differ from seqpack's defaults (dicts and lists: when non-empty)."""
    out = {}
    for f in fields(section):
        if f.name in skip:
            continue
        value, default = getattr(section, f.name), getattr(defaults, f.name)
        if value != default:
            out[f.name] = value
    return out


def _model(cfg: TrainingConfig, seq_length: int, not_carried: dict[str, Any]) -> dict[str, Any]:
    """The GPT provider: placeholder sizes that fit the layout, then seqpack's model fields."""
    m = cfg.model
    tp, pp, vpp = m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.virtual_pipeline_model_parallel_size
    heads = 4 * tp
    kwargs: dict[str, Any] = {
        "num_layers": 2 * pp * (vpp or 1), "hidden_size": 16 * heads, "num_attention_heads": heads,
        "ffn_hidden_size": 32 * heads, "vocab_size": 256, "make_vocab_size_divisible_by": 128,
        "seq_length": seq_length, **TE_OFF,
    }
    given = _set_fields(m, ModelConfig(), skip=("seq_length",))
    for name in ALWAYS_PASSED:
        given.setdefault(name, getattr(m, name))
    for name, value in given.items():
        key = f"model.{name}"
        if key in NOT_CARRIED or name in VLM_MODEL_FIELDS:
            not_carried[key] = value
            continue
        if name == "cuda_graph_scope":
            value = list(value)
        kwargs[name] = value
    if m.expert_model_parallel_size > 1 and not m.num_moe_experts:
        # an unset expert count is the model's own (recipes read it from the HF config); the lane's provider
        # needs a number
        kwargs["num_moe_experts"] = 2 * m.expert_model_parallel_size
    experts = kwargs.get("num_moe_experts")
    if experts:
        kwargs.setdefault("moe_router_topk", min(2, experts))
        kwargs.setdefault("moe_ffn_hidden_size", 32 * heads)
        kwargs["moe_layer_freq"] = [0] + [1] * (kwargs["num_layers"] - 1)
        kwargs["add_bias_linear"] = False  # as the MoE recipes: Megatron-Core allows MoE biases only at expert TP 1
    return _obj("GPTModelProvider", **kwargs)


def _specs(specs: OfflinePackingSpecs, path: Callable[[str], str]) -> dict[str, Any]:
    kwargs = _set_fields(specs, OfflinePackingSpecs())
    for name in ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path"):
        if kwargs.get(name):
            kwargs[name] = path(kwargs[name])
    if "pad_seq_to_mult" not in kwargs:
        kwargs["pad_seq_to_mult"] = specs.pad_seq_to_mult
    return _obj("PackedSequenceSpecs", **kwargs)


def _dataset(cfg: TrainingConfig, seq_length: int, root: str, path: Callable[[str], str],
             not_carried: dict[str, Any]) -> dict[str, Any]:
    d = cfg.dataset
    given = _set_fields(d, DatasetConfig(), skip=("kind", "seq_length"))
    cls = DATASET_CLASSES[d.kind]
    kwargs: dict[str, Any] = {"seq_length": seq_length}
    source = _obj("HFDatasetSourceConfig", path_or_dataset=f"{root}/hf", split="train")
    if d.kind == "gpt_sft":
        if d.hf_rewrite:
            kwargs.update(hf_dataset=source, do_validation=False, do_test=False)
        else:
            kwargs["dataset_root"] = f"{root}/sft"
    elif d.kind == "direct_hf":
        kwargs.update(source=source, do_validation=False, do_test=False)
    elif d.kind == "energon":
        kwargs.update(path=f"{root}/energon", micro_batch_size=cfg.train.micro_batch_size)
        encoder = given.pop("task_encoder", None)
        name = TASK_ENCODERS.get(encoder)
        kwargs["task_encoder"] = _obj(name, hf_processor_path="Qwen/Qwen2.5-VL-3B-Instruct") if name else encoder
    elif d.kind == "mock_vlm":
        kwargs["hf_processor_path"] = "Qwen/Qwen2.5-VL-3B-Instruct"
        if "seed" in given:  # the mock VLM dataset calls it random_seed
            kwargs["random_seed"] = given.pop("seed")
    else:  # pretrain: MCore's mock GPT dataset
        kwargs = {"seq_length": seq_length, "sequence_length": seq_length, "random_seed": d.seed,
                  "reset_position_ids": False, "reset_attention_mask": False, "eod_mask_loss": False}
        given.pop("seed", None)
    for name, value in given.items():
        if name == "offline_packing_specs" and value is not None:
            value = _specs(value, path)
        kwargs[name] = value
    return _obj(cls, **kwargs)


def bridge_spec(cfg: TrainingConfig, root: str) -> BridgeSpec:
    """The ``validate.run`` spec of ``cfg``; placeholder sources and mapped paths live under ``root``."""
    not_carried: dict[str, Any] = {}
    files: list[str] = []

    def path(value: str) -> str:
        # a user path, moved under root with its last part kept (its form is what Bridge checks): a glob gets
        # a file it matches, a name without a suffix is a directory holding one pack file, else a file
        name = str(value).rstrip("/").rsplit("/", 1)[-1] or "packs"
        target = f"{root}/paths/{len(files)}/{name}"
        if "*" in name or "?" in name:
            files.append(f"{root}/paths/{len(files)}/" + name.replace("*", "x").replace("?", "x"))
        elif "." not in name:
            files.append(f"{target}/part.idx.parquet")
        else:
            files.append(target)
        return target

    seq_length = cfg.seq_length  # model, else dataset, else the default (each side falls back to the other)
    data_seq_length = cfg.dataset.seq_length or seq_length
    for key in ("model.family", "model.is_hybrid_model", "model.qwen3_vl_disttrain"):
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in (None, False):
            not_carried[key] = value
    train: dict[str, Any] = {"micro_batch_size": cfg.train.micro_batch_size,
                             "global_batch_size": cfg.train.global_batch_size}
    if cfg.train.num_epochs is not None:
        train["num_epochs"] = cfg.train.num_epochs
    else:
        train["train_iters"] = 10
    validation = {k: v for k, v in (("eval_micro_batch_size", cfg.validation.eval_micro_batch_size),
                                    ("eval_global_batch_size", cfg.validation.eval_global_batch_size))
                  if v is not None}
    # decentralized process groups are NCCL only: Bridge requires Gloo groups off with them
    dist = {"use_decentralized_pg": cfg.dist.use_decentralized_pg,
            "use_gloo_process_groups": not cfg.dist.use_decentralized_pg}
    if cfg.dist.eval_context_parallel_size is not None:
        dist["eval_context_parallel_size"] = cfg.dist.eval_context_parallel_size
    container = _obj(
        "ConfigContainer",
        train=_obj("TrainingConfig", **train),
        validation=_obj("ValidationConfig", **validation),
        model=_model(cfg, seq_length, not_carried),
        dataset=_dataset(cfg, data_seq_length, root, path, not_carried),
        ddp=_obj("DistributedDataParallelConfig", average_in_collective=cfg.ddp.average_in_collective,
                 use_megatron_fsdp=cfg.ddp.use_megatron_fsdp),
        dist=_obj("DistributedInitConfig", **dist),
        rerun_state_machine=_obj("RerunStateMachineConfig",
                                 check_for_nan_in_loss=cfg.rerun_state_machine.check_for_nan_in_loss),
        optimizer=_obj("OptimizerConfig", lr=1e-4, use_distributed_optimizer=cfg.ddp.use_megatron_fsdp),
        scheduler=_obj("SchedulerConfig"),
        logger=_obj("LoggerConfig"),
        tokenizer=_obj("TokenizerConfig", tokenizer_type="NullTokenizer", vocab_size=256),
        checkpoint=_obj("CheckpointConfig"),
        mixed_precision=MIXED_PRECISION,
    )
    dirs = [f"{root}/sft/.keep", f"{root}/hf/.keep", f"{root}/energon/.keep"]
    spec = {"env": {"WORLD_SIZE": cfg.dist.world_size}, "files": dirs + files, "gpu": TARGET_GPU,
            "container": container}
    return BridgeSpec(spec=spec, files=files, not_carried=not_carried)

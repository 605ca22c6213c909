"""The training configuration model: Megatron-Bridge field names, typed, documented, strict.

Sections mirror Megatron-Bridge's ``ConfigContainer``: ``model``, ``dataset`` (with
``offline_packing_specs``), ``train``, ``validation``, ``ddp``, ``dist`` and
``rerun_state_machine``. Every field carries a one-line help text (``metadata["help"]``) which the
docs and the ``seqpack rules`` output reuse. Loading (YAML, JSON, dicts, dotted overrides) lives in
:mod:`seqpack.config.load`; the packing rules in :mod:`seqpack.config.rules`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from seqpack.core import packing_paths
from seqpack.core.choices import DATALOADER_TYPES, DATASET_KINDS


def _f(default: Any, help: str, *, minimum: int | None = None, factory: Any = None) -> Any:
    meta: dict[str, Any] = {"help": help}
    if minimum is not None:
        meta["minimum"] = minimum
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


DatasetKind = Literal[DATASET_KINDS]  # type: ignore[valid-type]
DataloaderType = Literal[DATALOADER_TYPES]  # type: ignore[valid-type]
CudaGraphImpl = Literal["none", "local", "transformer_engine"]
DispatcherType = Literal["alltoall", "allgather", "flex"]
FlexBackend = Literal["deepep", "hybridep"]

#: Dataset kinds that are fine-tuning datasets (the CP fine-tuning loss rules apply to them).
SFT_KINDS: tuple[str, ...] = ("gpt_sft", "direct_hf", "energon", "mock_vlm")

#: Default dataloader type per dataset kind (Megatron-Bridge's defaults).
DEFAULT_DATALOADER: dict[str, str] = {
    "gpt_sft": "batch",
    "direct_hf": "cyclic",
    "energon": "external",
    "mock_vlm": "single",
    "pretrain": "single",
}

#: Default sequence length when neither the model nor the dataset sets one (Bridge's SFT recipes).
DEFAULT_SEQ_LENGTH = 2048


@dataclass
class ModelConfig:
    """Model-parallel topology and model features that interact with packing."""

    tensor_model_parallel_size: int = _f(1, "Tensor-parallel size (TP).", minimum=1)
    pipeline_model_parallel_size: int = _f(1, "Pipeline-parallel size (PP).", minimum=1)
    virtual_pipeline_model_parallel_size: int | None = _f(
        None, "Virtual pipeline stages per PP rank (VPP), or null.", minimum=1
    )
    context_parallel_size: int = _f(1, "Context-parallel size (CP).", minimum=1)
    expert_model_parallel_size: int = _f(1, "Expert-parallel size (EP).", minimum=1)
    sequence_parallel: bool = _f(False, "Sequence parallelism (splits activations along the sequence over TP).")
    seq_length: int | None = _f(
        None, "Model sequence length; must equal dataset.seq_length when both are set.", minimum=1
    )
    calculate_per_token_loss: bool = _f(
        False, "Reduce the loss as a sum over tokens divided by the global token count."
    )
    max_seqlen_per_dp_cp_rank: int | None = _f(
        None, "Global-batch packing: tokens per DP*CP rank in one packed micro-batch.", minimum=1
    )
    sequence_packing_scheduler: str | None = _f(
        None, "Global-batch packing scheduler: 'dp_balanced' (Megatron-Core) or 'balanced' (seqpack)."
    )
    dynamic_context_parallel: bool = _f(
        False, "Dynamic context parallelism (global-batch packing, Megatron-Bridge PR #6127; provisional)."
    )
    mtp_num_layers: int | None = _f(None, "Multi-token-prediction layers (null or 0 = off).", minimum=0)
    cuda_graph_impl: CudaGraphImpl = _f("none", "CUDA graph implementation: none, local or transformer_engine.")
    cuda_graph_scope: list[str] = _f(
        None,
        "CUDA graph scope: [] = whole layer; attn, mlp, moe, moe_router, moe_preprocess, mamba; "
        "full_iteration (local impl only).",
        factory=list,
    )
    vision_cuda_graph_impl: CudaGraphImpl = _f("none", "CUDA graph implementation of a VLM's vision tower.")
    max_vision_cuda_graph_seq_length: int | None = _f(
        None, "Patch rows a captured vision graph holds (null: from the position embeddings).", minimum=1
    )
    num_moe_experts: int | None = _f(
        None, "Number of MoE experts (null = dense model, or the provider's own count when EP > 1).", minimum=1
    )
    moe_token_dispatcher_type: DispatcherType = _f("alltoall", "MoE token dispatcher: alltoall, allgather or flex.")
    moe_flex_dispatcher_backend: FlexBackend | None = _f(None, "Flex dispatcher backend: deepep or hybridep.")
    moe_hybridep_pad_uneven_dispatch_inputs: bool | None = _f(
        None, "HybridEP: pad uneven per-rank dispatch inputs to the EP group's maximum (null = Bridge decides)."
    )
    moe_expert_capacity_factor: float | None = _f(
        None, "MoE expert capacity factor; tokens over capacity are dropped (null = dropless)."
    )
    variable_seq_lengths: bool | None = _f(
        None, "Exchange tensor shapes between pipeline stages (null = Bridge decides; packing paths set it)."
    )
    overlap_moe_expert_parallel_comm: bool = _f(False, "Overlap MoE expert-parallel communication.")
    delay_wgrad_compute: bool = _f(False, "Delay weight-gradient computation (used with EP overlap).")
    family: str | None = _f(
        None, "Model family or recipe id (e.g. llama3, qwen3_next, glm45, qwen35_vl); see `seqpack rules`."
    )
    is_hybrid_model: bool = _f(False, "Hybrid Mamba/attention model.")
    qwen3_vl_disttrain: bool = _f(False, "Qwen3-VL DistTrain (disaggregated vision/language training).")


@dataclass
class OfflinePackingSpecs:
    """Offline packed SFT settings (Megatron-Bridge ``PackedSequenceSpecs``)."""

    packed_sequence_size: int = _f(-1, "Pack capacity P in runtime tokens; must be > 0 when packing.")
    max_single_sequence_length: int | None = _f(
        None, "Per-sample tokenization cap (defaults to seq_length); must be <= packed_sequence_size."
    )
    tokenizer_model_name: str | None = _f(None, "Overrides the tokenizer part of the pack cache directory name.")
    num_tokenizer_workers: int = _f(-1, "Tokenizer worker processes; <= 1 runs serially.")
    packed_train_data_path: str | None = _f(None, "Explicit packed training artifact (Parquet file, glob or dir).")
    packed_val_data_path: str | None = _f(None, "Explicit packed validation artifact.")
    packed_metadata_path: str | None = _f(None, "Explicit pack metadata JSON file.")
    pad_cu_seqlens: bool = _f(False, "Static-shape boundary arrays for CUDA graphs (needs fixed width and metadata).")
    pad_seq_to_mult: int | None = _f(1, "Per-sequence alignment multiple; derive it with `seqpack align`.")


@dataclass
class DatasetConfig:
    """Dataset and packing-path selection."""

    kind: DatasetKind = _f("gpt_sft", "Dataset config type: gpt_sft, direct_hf, energon, mock_vlm or pretrain.")
    seq_length: int | None = _f(None, "Dataset sequence length; must equal model.seq_length.", minimum=1)
    seed: int = _f(1234, "Dataset seed (sampling, shuffled packing).")
    enable_offline_packing: bool = _f(False, "Offline packed SFT: pack ahead of time into Parquet.")
    offline_packing_specs: OfflinePackingSpecs | None = _f(None, "Offline packing settings (required with offline).")
    enable_in_batch_packing: bool = _f(False, "Runtime in-batch packing: each micro-batch becomes one THD row.")
    defer_in_batch_packing_to_step: bool = _f(False, "Pack in the training step instead of the collate.")
    packing_buffer_size: int | None = _f(None, "Energon online packing: candidate samples per dataloader worker.")
    enable_global_batch_packing: bool = _f(False, "Global-batch online packing across DP ranks every step.")
    fold_alignment_padding: bool = _f(
        False, "Report each sequence's alignment padding as part of it (no padding between sequences, for "
        "FlashAttention: heads of 256 and wider); global-batch (PR #6127) and seqpack's in-batch path."
    )
    dataloader_type: DataloaderType | None = _f(None, "single, cyclic, batch or external (null = the kind's default).")
    pad_to_max_length: bool | None = _f(None, "Fixed final width (non-GPT-SFT datasets; GPT-SFT uses dataset_kwargs).")
    pad_to_multiple_of: int | None = _f(None, "Width multiple of unpacked batches (direct_hf / energon / mock_vlm).")
    in_batch_packing_pad_to_multiple_of: int | None = _f(
        None, "Collate alignment multiple; Bridge overwrites it with the derived value."
    )
    micro_batch_size: int | None = _f(None, "Energon dataset micro-batch size; must match train.micro_batch_size.")
    task_encoder: str | None = _f(None, "Energon task encoder (native packing is implemented for qwen_vl).")
    yields_unpacked_samples: bool | None = _f(
        None, "Declares per-sample (unpacked) output for global-batch packing (null = the kind's default)."
    )
    dataset_kwargs: dict[str, Any] = _f(
        None, "Extra dataset arguments, e.g. pad_to_max_length, pad_seq_length_to_mult.", factory=dict
    )
    num_workers: int = _f(2, "Dataloader workers per rank.", minimum=0)
    drop_last: bool = _f(True, "Drop the last incomplete global batch.")
    max_train_samples: int | None = _f(None, "Cap on training samples (epoch-level repetition).", minimum=1)
    hf_rewrite: bool = _f(False, "Regenerate HF-materialised data and packs.")


@dataclass
class TrainConfig:
    """Batch sizes and epochs."""

    micro_batch_size: int = _f(1, "Micro-batch size (MBS).", minimum=1)
    global_batch_size: int = _f(128, "Global batch size (GBS).", minimum=1)
    num_epochs: int | None = _f(None, "Finite epochs (GPT-SFT with the batch dataloader only).", minimum=1)


@dataclass
class ValidationSection:
    """Evaluation batch sizes."""

    eval_micro_batch_size: int | None = _f(None, "Evaluation micro-batch size (null = train MBS).", minimum=1)
    eval_global_batch_size: int | None = _f(None, "Evaluation global batch size (null = train GBS).", minimum=1)


@dataclass
class DDPConfig:
    """Distributed data-parallel settings."""

    average_in_collective: bool = _f(False, "Average gradients inside the collective instead of summing.")
    use_megatron_fsdp: bool = _f(False, "Megatron FSDP.")


@dataclass
class DistConfig:
    """World size and evaluation topology."""

    world_size: int = _f(1, "Total ranks (GPUs); DP = world_size / (TP*PP*CP).", minimum=1)
    eval_context_parallel_size: int | None = _f(None, "A distinct CP size for evaluation, or null.", minimum=1)
    use_decentralized_pg: bool = _f(False, "Decentralized process groups (needed to run a distinct eval CP).")


@dataclass
class RerunStateMachineConfig:
    """Loss/gradient sanity checks."""

    check_for_nan_in_loss: bool = _f(True, "Check the loss for NaN every step.")


@dataclass
class TrainingConfig:
    """A whole training configuration, as far as packing is concerned."""

    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    validation: ValidationSection = field(default_factory=ValidationSection)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    rerun_state_machine: RerunStateMachineConfig = field(default_factory=RerunStateMachineConfig)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain-dict form (round-trips through :func:`seqpack.config.load.config_from_dict`)."""
        return asdict(self)

    # -- resolved values used by the rules -------------------------------------------------------
    @property
    def seq_length(self) -> int:
        """The effective sequence length: model, else dataset, else the default 2048."""
        for value in (self.model.seq_length, self.dataset.seq_length):
            if value is not None:
                return value
        return DEFAULT_SEQ_LENGTH

    @property
    def dataloader_type(self) -> str:
        """The effective dataloader type (explicit, else the dataset kind's default)."""
        return self.dataset.dataloader_type or DEFAULT_DATALOADER[self.dataset.kind]

    @property
    def pad_to_max_length(self) -> bool:
        """Whether final pack width is fixed (dataset attribute or ``dataset_kwargs['pad_to_max_length']``)."""
        return bool(self.dataset.pad_to_max_length) or self.dataset.dataset_kwargs.get("pad_to_max_length") is True

    @property
    def energon_packing(self) -> bool:
        """Energon online (native) packing is selected by ``packing_buffer_size`` on an Energon dataset."""
        return self.dataset.kind == "energon" and self.dataset.packing_buffer_size is not None

    @property
    def yields_unpacked_samples(self) -> bool:
        """Declared capability, else the kind's default (GPT-SFT datasets yield unpacked samples)."""
        if self.dataset.yields_unpacked_samples is not None:
            return self.dataset.yields_unpacked_samples
        return self.dataset.kind == "gpt_sft"

    def active_paths(self) -> list[str]:
        """Names of the packing paths this config turns on (normally zero or one), per the path registry."""
        return packing_paths.active_paths(self)

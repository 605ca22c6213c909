"""Optional GPU backend: the same canonical batches through Megatron-Core + Transformer Engine.

Needs CUDA, ``transformer_engine`` (with its ``transformer_engine_torch`` extension) and
megatron-core; :func:`te_status` says what is missing. Three checks, each returning numbers:

* :func:`compare_partition_indices`: Transformer Engine's ``thd_get_partitioned_indices`` kernel
  against :func:`~seqpack.training.context_parallel.thd_partition_indices` (must be equal);
* :func:`check_mcore_packing`: a small Megatron-Core GPT (TE layer spec, bf16) run on a packed row
  with ``PackedSeqParams`` from :func:`~seqpack.training.packed_seq_params.to_packed_seq_params`,
  compared with every sequence run alone (per-sequence mean losses, bf16 tolerance), with a
  negative control (the same row without ``PackedSeqParams``, i.e. causal over the whole row);
* a leak check inside :func:`check_mcore_packing`: perturbing one sequence's tokens must not move
  the logits of the others (and does without ``PackedSeqParams``).

The TinyGPT reference and Megatron-Core's GPT have different architectures, so they are compared
through the same properties, not weight for weight. Everything here is imported lazily.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from seqpack.core.errors import UsageError

__all__ = [
    "TEStatus",
    "build_mcore_gpt",
    "check_mcore_packing",
    "compare_partition_indices",
    "init_single_gpu",
    "te_status",
]


@dataclass(frozen=True)
class TEStatus:
    """What the GPU backend found; ``ready`` is True when every requirement is met."""

    cuda: bool
    device: str | None
    torch: str
    transformer_engine: str | None
    megatron_core: str | None
    ready: bool
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _version(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return None
    return str(getattr(mod, "__version__", "unknown"))


def te_status() -> TEStatus:
    """Probe CUDA, Transformer Engine (and its torch extension) and Megatron-Core."""
    import torch

    cuda = bool(torch.cuda.is_available())
    device = torch.cuda.get_device_name(0) if cuda else None
    te = _version("transformer_engine.pytorch") and _version("transformer_engine")
    tex = _version("transformer_engine_torch")
    mcore = _version("megatron.core")
    missing = []
    if not cuda:
        missing.append("a CUDA device")
    if te is None or tex is None:
        missing.append("transformer-engine[pytorch] (transformer_engine.pytorch and transformer_engine_torch)")
    if mcore is None:
        missing.append("megatron-core")
    return TEStatus(cuda, device, torch.__version__, te, mcore, not missing, tuple(missing))


def compare_partition_indices(cases: Sequence[tuple[Sequence[int], int]]) -> list[dict[str, Any]]:
    """For every ``(physical cu_seqlens, cp_size)`` and every rank: TE's indices vs ours."""
    import torch
    import transformer_engine_torch as tex

    from seqpack.training.context_parallel import thd_partition_indices

    rows = []
    for cu, cp in cases:
        cu_gpu = torch.tensor(list(cu), dtype=torch.int32, device="cuda")
        total = int(cu[-1])
        for rank in range(cp):
            theirs = tex.thd_get_partitioned_indices(cu_gpu, total, cp, rank).long().cpu()
            ours = thd_partition_indices(list(cu), cp, rank)
            rows.append({"cu_seqlens": list(cu), "cp": cp, "rank": rank, "equal": bool(torch.equal(theirs, ours))})
    return rows


def init_single_gpu(seed: int) -> None:
    """One-process torch.distributed (NCCL) and Megatron-Core groups (TP=PP=CP=1) on GPU 0."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    torch.cuda.set_device(0)
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        dist.init_process_group("nccl", rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel()
    model_parallel_cuda_manual_seed(seed)


def build_mcore_gpt(
    *, vocab_size: int, max_sequence_length: int, hidden_size: int = 128, num_heads: int = 4, num_layers: int = 2
) -> Any:
    """A small bf16 Megatron-Core GPT with the Transformer Engine layer spec and RoPE, in eval mode on GPU."""
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_heads,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        init_method_std=0.1,
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
        vocab_size=vocab_size,
        max_sequence_length=max_sequence_length,
        position_embedding_type="rope",
    )
    return model.cuda().eval()


def _to_cuda(batch: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    return {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _logits(model: Any, tokens: Any, positions: Any, params: Any) -> Any:
    out = model(input_ids=tokens, position_ids=positions, attention_mask=None, packed_seq_params=params)
    return out[0].float()  # [T, V]


def check_mcore_packing(model: Any, batch: Mapping[str, Any], *, perturb_sequence: int = 0) -> dict[str, Any]:
    """Per-sequence mean losses packed vs alone, the no-PackedSeqParams control, and the leak check."""
    import torch

    from seqpack.training.boundaries import thd_layout
    from seqpack.training.loss import token_cross_entropy
    from seqpack.training.packed_seq_params import to_packed_seq_params
    from seqpack.training.step import sequence_loss_sums, split_sequences

    layout = thd_layout(batch)
    if layout.num_sequences < 2:
        raise UsageError("the leak check needs a batch with at least two sequences")
    gpu = _to_cuda(batch)
    params = to_packed_seq_params(gpu)
    labels, mask = gpu["labels"][0], gpu["loss_mask"][0]

    def per_sequence_means(logits: torch.Tensor) -> list[float]:
        sums, counts = sequence_loss_sums(token_cross_entropy(logits, labels, mask), mask, layout)
        return [float(s / c) if c else 0.0 for s, c in zip(sums[:-1].cpu(), counts[:-1].cpu())]

    with torch.no_grad():
        packed = _logits(model, gpu["tokens"], gpu["position_ids"], params)
        no_params = _logits(model, gpu["tokens"], gpu["position_ids"], None)
        alone = []
        for piece in split_sequences(batch):
            if piece["tokens"].shape[1] == 0 or float(piece["loss_mask"].sum()) == 0:
                alone.append(0.0)
                continue
            p = _to_cuda(piece)
            logits = _logits(model, p["tokens"], p["position_ids"], None)
            losses = token_cross_entropy(logits, p["labels"][0], p["loss_mask"][0])
            alone.append(float((losses * p["loss_mask"][0]).sum() / p["loss_mask"][0].sum()))

        start = int(layout.physical[perturb_sequence])
        length = int(layout.real_lengths()[perturb_sequence])
        tokens = gpu["tokens"].clone()
        tokens[0, start : start + length] = (tokens[0, start : start + length] + 7) % model.vocab_size
        seq_id, is_real = layout.token_segments()
        others = torch.nonzero((seq_id != perturb_sequence) & is_real & (seq_id > perturb_sequence)).flatten().cuda()
        leak_thd = float((_logits(model, tokens, gpu["position_ids"], params) - packed)[others].abs().max())
        leak_causal = float((_logits(model, tokens, gpu["position_ids"], None) - no_params)[others].abs().max())

    packed_means, control_means = per_sequence_means(packed), per_sequence_means(no_params)
    return {
        "packed_sequence_losses": packed_means,
        "alone_sequence_losses": alone,
        "no_params_sequence_losses": control_means,
        "packed_vs_alone_max_abs": max(abs(a - b) for a, b in zip(packed_means, alone)),
        "no_params_vs_alone_max_abs": max(abs(a - b) for a, b in zip(control_means, alone)),
        "leak_with_params": leak_thd,
        "leak_without_params": leak_causal,
    }

"""What global-batch packing does to a JSONL file, step by step, with the DP ranks simulated in one process.

:func:`simulate_steps` builds one loader per DP rank (exactly the training loaders: rules, alignment,
sampler, per-sample collate), pulls each rank's share of every step and runs
:func:`~seqpack.packing.global_batch.packs.simulate_step` (the training scheduler and pack
builder, without collectives). The smoke test's ``global_batch`` adapter and
``seqpack batches --mode global-batch`` (:func:`inspect_global_batch`) use it; the multi-process
behaviour is the same code plus the collectives of :mod:`.exchange`, and is tested under torchrun.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from typing import TYPE_CHECKING

from seqpack.core.arguments import positive_int
from seqpack.config import TrainingConfig, load_config
from seqpack.core.limits import MAX_STEPS_SHOWN
from seqpack.core.results import Result

if TYPE_CHECKING:  # torch modules: imported where they run
    from seqpack.packing.global_batch.dataset import GlobalBatchSettings, GlobalBatchSFTDataset
    from seqpack.packing.global_batch.packs import SimulatedStep
    from seqpack.packing.sft_dataset import RowScan

__all__ = ["GlobalBatchReport", "StepSummary", "global_batch_config", "inspect_global_batch", "simulate_steps"]


def global_batch_config(
    *,
    dp: int,
    seq_length: int,
    global_batch_size: int,
    max_seqlen_per_dp_cp_rank: int | None = None,
    cp: int = 1,
    tp: int = 1,
    sp: bool = False,
    scheduler: str = "dp_balanced",
    dataloader_type: str = "single",
    micro_batch_size: int = 1,
    seed: int = 1234,
    fold_alignment_padding: bool = False,
) -> TrainingConfig:
    """A GPT-SFT global-batch config for ``dp`` data-parallel replicas of TP x CP (command-line settings).

    ``max_seqlen_per_dp_cp_rank`` defaults to ``ceil(seq_length / cp)``, the smallest value the
    capacity rule accepts.
    """
    for name, value in (("dp", dp), ("cp", cp), ("tp", tp)):
        positive_int(name, value)
    cap = max_seqlen_per_dp_cp_rank if max_seqlen_per_dp_cp_rank is not None else math.ceil(seq_length / cp)
    return load_config({
        "model": {"seq_length": seq_length, "tensor_model_parallel_size": tp, "context_parallel_size": cp,
                  "sequence_parallel": sp, "max_seqlen_per_dp_cp_rank": cap, "calculate_per_token_loss": True,
                  "sequence_packing_scheduler": scheduler},
        "dataset": {"seq_length": seq_length, "seed": seed, "enable_global_batch_packing": True,
                    "dataloader_type": dataloader_type, "num_workers": 0,
                    "fold_alignment_padding": fold_alignment_padding},
        "train": {"micro_batch_size": micro_batch_size, "global_batch_size": global_batch_size},
        "dist": {"world_size": dp * cp * tp},
    })


def simulate_steps(
    cfg: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str],
    source: str | os.PathLike[str] | GlobalBatchSFTDataset,
    *,
    num_steps: int | None = None,
    row_scan: RowScan | None = None,
    drop_last: bool | None = None,
    pad_token_id: int | None = None,
) -> tuple[GlobalBatchSettings, list[SimulatedStep]]:
    """The first ``num_steps`` steps (all when None) of every DP rank, simulated in this process.

    With ``drop_last=False`` the final steps may be partial (ranks with fewer or no samples), so
    every usable row is packed exactly once. With ``drop_last`` (the config's ``dataset.drop_last``
    when None, True by default) a final step short of the global batch is not simulated, as training
    does not run it.
    """
    from seqpack.packing.global_batch.dataset import (
        GlobalBatchSFTDataset,
        build_global_batch_loader,
        settings_from_config,
    )
    from seqpack.packing.global_batch.packs import simulate_step

    cfg = load_config(cfg)
    settings = settings_from_config(cfg)
    positive_int("num_steps", num_steps, allow_none=True, maximum=MAX_STEPS_SHOWN)
    full = settings.micro_batches_per_rank * settings.dp_size
    drop = cfg.dataset.drop_last if drop_last is None else drop_last
    dataset = source if isinstance(source, GlobalBatchSFTDataset) else GlobalBatchSFTDataset(
        source, seq_length=settings.seq_length)
    feeds = [iter(build_global_batch_loader(cfg, dataset, dp_rank=d, row_scan=row_scan, drop_last=drop_last,
                                            num_workers=0))
             for d in range(settings.dp_size)]
    if pad_token_id is None:
        pad_token_id = dataset.tokenizer.pad_id
    steps: list[SimulatedStep] = []
    while num_steps is None or len(steps) < num_steps:
        per_rank = []
        for feed in feeds:
            mine: list[Any] = []
            for _ in range(settings.micro_batches_per_rank):
                item = next(feed, None)
                if item is None:
                    break
                mine.extend(item)
            per_rank.append(mine)
        if not any(per_rank) or (drop and sum(len(m) for m in per_rank) < full):
            break
        steps.append(simulate_step(
            per_rank, max_seqlen_per_dp_cp_rank=settings.max_seqlen_per_dp_cp_rank, cp_size=settings.cp_size,
            scheduler=settings.scheduler, pad_seq_to_mult=settings.pad_seq_to_mult, pad_token_id=pad_token_id,
            fold_alignment_padding=settings.fold_alignment_padding,
        ))
    return settings, steps


@dataclass(frozen=True)
class StepSummary(Result):
    """One simulated step: packs per (micro-batch, DP rank), rank loads and the FLOPs sums."""

    step: int
    num_samples: int
    num_micro_batches: int
    packs: list[list[dict[str, Any]]]  # [micro_batch][dp_rank] -> {"rows", "lengths", "tokens", "attention"}
    rank_tokens: list[int]
    rank_attention: list[int]
    imbalance: dict[str, float]
    seqlen_sum: int
    seqlen_squared_sum: int
    adjustments: list[str]


def _summary(index: int, sim: SimulatedStep) -> StepSummary:
    s = sim.schedule
    packs = []
    for k in range(s.num_micro_batches):
        row = []
        for d in range(s.dp_size):
            pack = s.pack(k, d)
            batch = sim.batches[d][k]
            row.append({"sample_ids": list(pack), "rows": list(batch["row_indices"]),
                        "lengths": [s.lengths[g] for g in pack], "tokens": s.pack_tokens(pack),
                        "attention": s.pack_attention(pack)})
        packs.append(row)
    tokens, attention = s.rank_loads()
    return StepSummary(index, s.num_samples, s.num_micro_batches, packs, tokens, attention, s.imbalance(),
                       s.seqlen_sum, s.seqlen_squared_sum, list(s.adjustments))


@dataclass(frozen=True)
class GlobalBatchReport(Result):
    """Result of :func:`inspect_global_batch`.

    ``full_steps``: complete global batches the rows fill; ``dropped_rows``: rows of the last,
    incomplete one, which training (``drop_last``) never runs and the simulation leaves out.
    ``balance``: the worst rank load (max / mean tokens over the steps shown) under the scheduler and
    under each other registered scheduler on the same steps, and a ``hint`` when another is clearly
    more even (the rank that waits longest sets the step time).
    """

    mode: str = field(default="global-batch", init=False)
    file: str
    rows: int
    settings: dict[str, Any]
    steps: list[StepSummary] = field(default_factory=list)
    full_steps: int = 0
    dropped_rows: int = 0
    balance: dict[str, Any] | None = None
    schema: str | None = None
    tokenizer: str | None = None
    warnings: list[str] = field(default_factory=list)


def inspect_global_batch(
    path: str | os.PathLike[str],
    cfg: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str],
    *,
    num_steps: int = 2,
    tokenizer: Any = None,
    schema: Any = None,
    truncation: str = "right",
) -> GlobalBatchReport:
    """The first ``num_steps`` global-batch steps of ``path`` under ``cfg``, DP ranks simulated."""
    from seqpack.packing.global_batch.dataset import GlobalBatchSFTDataset

    from seqpack.core.errors import InputError

    cfg = load_config(cfg)
    dataset = GlobalBatchSFTDataset(path, seq_length=cfg.seq_length, tokenizer=tokenizer, schema=schema,
                                    truncation=truncation)
    gbs = cfg.train.global_batch_size
    if len(dataset) < gbs:
        raise InputError(
            f"the file holds {len(dataset)} rows, fewer than one global batch of {gbs} samples (DP "
            f"{cfg.dist.world_size // (cfg.model.tensor_model_parallel_size * cfg.model.context_parallel_size)}): "
            "training would run no step", file=str(dataset.path), field="gbs",
            fix=f"lower --gbs to at most {len(dataset)} (a multiple of DP) or give more rows",
        )
    settings, steps = simulate_steps(cfg, dataset, num_steps=num_steps)
    return GlobalBatchReport(str(dataset.path), len(dataset), settings.to_dict(),
                             [_summary(i, sim) for i, sim in enumerate(steps)],
                             full_steps=len(dataset) // gbs, dropped_rows=len(dataset) % gbs,
                             balance=_balance(cfg, dataset, settings.scheduler, steps, num_steps),
                             schema=dataset.schema.kind, tokenizer=dataset.tokenizer.name)


#: Another scheduler is worth a hint when its worst rank load is at most this share of the current one's.
HINT_RATIO = 0.75


def _worst(steps: Any) -> float:
    return max((sim.schedule.imbalance()["tokens"] for sim in steps), default=1.0)


def _balance(cfg: Any, dataset: Any, scheduler: str, steps: Any, num_steps: int) -> dict[str, Any]:
    """The worst rank load under each registered scheduler on the same steps, and the hint."""
    from dataclasses import replace

    from seqpack.packing.global_batch.schedule import get_scheduler, scheduler_names

    worst = {scheduler: _worst(steps)}
    for other in scheduler_names():
        if other not in worst:
            alt = replace(cfg, model=replace(cfg.model, sequence_packing_scheduler=other))
            worst[other] = _worst(simulate_steps(alt, dataset, num_steps=num_steps)[1])
    best = min(worst, key=worst.get)
    hint = None
    if best != scheduler and worst[best] <= worst[scheduler] * HINT_RATIO:
        origin = get_scheduler(best).origin
        hint = (f"ranks are {worst[scheduler]:.2f}x imbalanced (max/mean tokens) under {scheduler}; --scheduler {best} "
                f"gives {worst[best]:.2f}x on the same steps"
                + ("" if origin == "Megatron-Core" else f" ({best} is {origin}'s own: Megatron-Core does not have it, "
                   "so a Bridge job runs it only through seqpack's global-batch path)"))
    return {"scheduler": scheduler, "max_over_mean_tokens": worst, "hint": hint}

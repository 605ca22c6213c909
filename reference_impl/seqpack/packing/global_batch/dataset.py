"""The GPT-SFT dataset that yields unpacked samples, the global-batch loader, and the config checks.

:func:`settings_from_config` is where the global-batch path meets the rule registry: it runs the
rules of :data:`GLOBAL_BATCH_RULE_IDS` through :func:`seqpack.config.validate.check_rules`
(PACK-EXCLUSIVE-GLOBAL-BATCH and every PACK-GLOBAL-* rule among them) and returns the resolved
numbers the rest of the path needs. :func:`build_global_batch_loader` builds a DataLoader for one
DP rank: the lazy JSONL dataset, an MBS=1 micro-batch sampler (``single`` or ``cyclic``,
:mod:`seqpack.packing.samplers`) and the per-sample collate, so every ``next()`` returns
``[unpacked_sample]``. CP ranks of one DP replica build the same loader (same ``dp_rank``) and so
see identical samples, as Megatron's samplers arrange.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch.utils.data

from seqpack.config import TrainingConfig, load_config
from seqpack.config.validate import check_rules
from seqpack.core.arguments import non_negative_int, positive_int
from seqpack.core.errors import InputError, UsageError
from seqpack.packing.global_batch.samples import UnpackedSampleCollator
from seqpack.packing.sft_dataset import RowScan, SFTJsonlDataset
from seqpack.packing.sft_loader import DatasetArgs, SamplerSettings, build_sft_loader, dataset_for

log = logging.getLogger(__name__)

__all__ = [
    "GLOBAL_BATCH_RULE_IDS",
    "EvaluationPlan",
    "GlobalBatchSFTDataset",
    "GlobalBatchSettings",
    "build_global_batch_loader",
    "settings_from_config",
]

#: Registry rules checked before anything of the global-batch path is built (in this order).
GLOBAL_BATCH_RULE_IDS: tuple[str, ...] = (
    "PACK-EXCLUSIVE-GLOBAL-BATCH",
    "PACK-GLOBAL-MBS1",
    "PACK-GLOBAL-PER-TOKEN-LOSS",
    "PACK-GLOBAL-AVG-COLLECTIVE",
    "PACK-GLOBAL-NO-CUDA-GRAPHS",
    "PACK-GLOBAL-NO-PP",
    "PACK-GLOBAL-NO-VPP",
    "PACK-GLOBAL-DATALOADER",
    "PACK-GLOBAL-MAX-SEQLEN-REQUIRED",
    "PACK-GLOBAL-CAPACITY",
    "PACK-GLOBAL-NO-HYBRID",
    "PACK-GLOBAL-NO-FSDP",
    "PACK-GLOBAL-UNPACKED-SAMPLES",
    "PACK-GLOBAL-SCHEDULER",
    "TOPO-WORLD-DIVISIBLE",
    "BATCH-GBS-DIVISIBLE",
    "SEQ-LENGTH-MATCH",
    "CP-SEQ-DIVISIBLE",
    "ALIGN-SEQ-LENGTH",
)


@dataclass(frozen=True)
class GlobalBatchSettings:
    """What the global-batch path needs from a config, resolved once."""

    dp_size: int
    cp_size: int
    max_seqlen_per_dp_cp_rank: int
    capacity: int
    scheduler: str
    pad_seq_to_mult: int
    seq_length: int
    global_batch_size: int
    dataloader_type: str
    seed: int

    @property
    def micro_batches_per_rank(self) -> int:
        """``next()`` calls each DP rank makes per step: GBS / (MBS * DP) with MBS = 1."""
        return self.global_batch_size // self.dp_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {**asdict(self), "micro_batches_per_rank": self.micro_batches_per_rank}


def settings_from_config(cfg: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str]) -> GlobalBatchSettings:
    """Check ``cfg`` with the global-batch rules (ConfigViolationError naming the rule) and resolve it."""
    from seqpack.config.resolve import resolve
    from seqpack.packing.global_batch.schedule import get_scheduler
    from seqpack.config.resolve import alignment_for_config

    cfg = load_config(cfg)
    if not cfg.dataset.enable_global_batch_packing:
        raise UsageError("the config does not enable global-batch packing",
                         field="dataset.enable_global_batch_packing",
                         fix="set dataset.enable_global_batch_packing=true")
    for finding in check_rules(cfg, GLOBAL_BATCH_RULE_IDS):
        log.warning("%s", finding.one_line())
    resolved = resolve(cfg)
    cap = int(cfg.model.max_seqlen_per_dp_cp_rank)
    return GlobalBatchSettings(
        dp_size=int(resolved.dp),
        cp_size=resolved.cp,
        max_seqlen_per_dp_cp_rank=cap,
        capacity=cap * resolved.cp,
        scheduler=get_scheduler(cfg.model.sequence_packing_scheduler).name,
        pad_seq_to_mult=alignment_for_config(cfg).pad_seq_to_mult,
        seq_length=cfg.seq_length,
        global_batch_size=cfg.train.global_batch_size,
        dataloader_type=cfg.dataloader_type,
        seed=cfg.dataset.seed,
    )


class GlobalBatchSFTDataset(SFTJsonlDataset):
    """Lazy GPT-SFT JSONL dataset whose items the global-batch collate turns into unpacked samples.

    Same file handling, tokenization, truncation and rejection semantics as
    :class:`~seqpack.packing.sft_dataset.SFTJsonlDataset`; an item is
    ``{"sample": TokenizedSample, "row_index": int}`` (before the shift: the per-sample collate
    :class:`~seqpack.packing.global_batch.samples.UnpackedSampleCollator` shifts, masks and
    pads). Declares :attr:`yields_unpacked_samples`, which PACK-GLOBAL-UNPACKED-SAMPLES checks.
    """

    #: The capability Bridge's dataset configs declare for global-batch packing.
    yields_unpacked_samples: bool = True

    def __getitem__(self, i: int) -> dict[str, Any]:
        location = self.file.location(i)
        sample = self._tokenize_at(location)
        if sample.truncated and not self._warned_truncation:
            self._warned_truncation = True
            log.warning("%s: %d ids cut to seq_length=%d by truncation=%r", location, sample.original_length,
                        self.seq_length, self.truncation)
        return {"sample": sample, "row_index": location.row}


@dataclass(frozen=True)
class EvaluationPlan:
    """How many validation samples a run consumes: ``num_evaluations * eval_iters * eval_global_batch_size``.

    Every evaluation pulls its samples inside collective calls, so running out half-way would stall
    every rank; :meth:`check` refuses a validation set that is too small before training starts.
    :meth:`for_run` counts evaluations as Megatron does: ``train_iters // eval_interval + 1``.
    """

    eval_iters: int
    eval_global_batch_size: int
    num_evaluations: int

    def __post_init__(self) -> None:
        for name in ("eval_iters", "eval_global_batch_size", "num_evaluations"):
            positive_int(name, getattr(self, name))

    @classmethod
    def for_run(cls, *, train_iters: int, eval_interval: int, eval_iters: int,
                eval_global_batch_size: int) -> EvaluationPlan:
        """The plan of a run with evaluations every ``eval_interval`` steps plus one at the end."""
        positive_int("eval_interval", eval_interval)
        non_negative_int("train_iters", train_iters)
        return cls(eval_iters, eval_global_batch_size, train_iters // eval_interval + 1)

    @property
    def samples_needed(self) -> int:
        """Validation samples the whole run reads."""
        return self.num_evaluations * self.eval_iters * self.eval_global_batch_size

    def check(self, available: int, *, file: str | None = None) -> None:
        """Raise InputError when ``available`` validation samples cannot feed every evaluation."""
        if available < self.samples_needed:
            possible = available // (self.eval_iters * self.eval_global_batch_size)
            raise InputError(
                f"the validation set holds {available} usable sample(s) but the run needs {self.samples_needed} "
                f"({self.num_evaluations} evaluation(s) x eval_iters {self.eval_iters} x eval global batch "
                f"{self.eval_global_batch_size}); only {possible} evaluation(s) would get their samples",
                file=file, field="validation samples",
                fix="add validation rows, lower eval_iters or the eval global batch size, or evaluate less often",
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {**asdict(self), "samples_needed": self.samples_needed}


def build_global_batch_loader(
    cfg: TrainingConfig | Mapping[str, Any] | str | os.PathLike[str],
    source: str | os.PathLike[str] | SFTJsonlDataset,
    *,
    dp_rank: int = 0,
    consumed_samples: int = 0,
    tokenizer: Any = None,
    schema: Any = None,
    truncation: str = "right",
    row_scan: RowScan | None = None,
    evaluation: EvaluationPlan | None = None,
    num_workers: int | None = None,
    drop_last: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> torch.utils.data.DataLoader:
    """DataLoader for DP rank ``dp_rank``: each ``next()`` is ``[unpacked_sample]`` (MBS = 1).

    Runs :func:`settings_from_config` first. ``source`` is a JSONL path or a ready
    :class:`GlobalBatchSFTDataset`. ``row_scan`` (from
    :func:`~seqpack.packing.sft_dataset.scan_rows`) restricts sampling to usable rows.
    ``evaluation`` marks a validation loader: the plan is checked against the usable rows up front.
    """
    cfg = load_config(cfg)
    settings = settings_from_config(cfg)
    dataset = dataset_for(source, dataset_class=GlobalBatchSFTDataset, seq_length=settings.seq_length,
                          args=DatasetArgs(tokenizer, schema, truncation, cache_dir))
    return build_sft_loader(
        dataset,
        sampler=SamplerSettings(
            dataloader_type=settings.dataloader_type,
            micro_batch_size=1,
            dp_size=settings.dp_size,
            seed=settings.seed,
            drop_last=cfg.dataset.drop_last if drop_last is None else drop_last,
        ),
        make_collate=lambda ds: UnpackedSampleCollator(pad_seq_to_mult=settings.pad_seq_to_mult,
                                                       pad_token_id=ds.tokenizer.pad_id),
        dp_rank=dp_rank,
        consumed_samples=consumed_samples,
        row_scan=row_scan,
        check_usable=None if evaluation is None else (lambda n, file: evaluation.check(n, file=file)),
        num_workers=cfg.dataset.num_workers if num_workers is None else num_workers,
        name="global-batch",
    )

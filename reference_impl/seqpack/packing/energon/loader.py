"""Datasets and savable loaders for Energon online packing, built from a ``TrainingConfig``.

* :func:`get_train_dataset` / :func:`get_val_dataset` run the registry's Energon rules
  (:data:`ENERGON_RULE_IDS`, via ``check_rules``) first, then build energon's pipeline with a
  :class:`~seqpack.packing.energon.encoder.PackingTaskEncoder`: micro-batch size 1,
  ``packing_buffer_size`` from the config (candidate samples per worker, so resident buffers
  hold about ``num_workers * packing_buffer_size`` encoded samples), ``WorkerConfig(rank=dp_rank, world_size=DP size,
  num_workers, seed_offset=dataset.seed)`` and error handlers that re-raise (energon's default
  handler logs and *skips* failing samples, packs or whole buffers).
  Train streams are infinite by default (``repeat=True``, what Megatron-Bridge uses); pass
  ``repeat=False`` for exactly one epoch. Validation streams are finite, unshuffled, and flush
  their partial buffer at the end.
* :func:`get_savable_loader` wraps energon's ``SavableDataLoader`` in an
  :class:`EnergonPackedLoader`, which iterates lazily (energon's iterator starts at the first
  ``next``, so a save right after ``iter()`` returns the starting state instead of deadlocking),
  counts the samples every worker delivers (finite streams: a worker delivering more than its
  share raises, an epoch ending short of it raises), refuses saves in the final-flush window of a
  finite epoch, and checks the resume settings on restore
  (:mod:`seqpack.packing.energon.checkpoint`).
* :func:`iter_energon_batches` yields canonical THD micro-batches with their sample keys for one
  finite pass, for smoke tests.
"""

from __future__ import annotations

import logging
import os
import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seqpack.config.load import load_config
from seqpack.config.resolve import resolve
from seqpack.config.schema import TrainingConfig
from seqpack.config.validate import check_rules
from seqpack.core.arguments import is_int, non_negative_int, positive_int
from seqpack.io import confine
from seqpack.core.errors import ArtifactError, PackingError, UsageError
from seqpack.packing.energon.checkpoint import LoaderCheckpoint, check_resume_settings, check_save_window
from seqpack.packing.energon.encoder import BOOKKEEPING_KEYS, PackingTaskEncoder
from seqpack.packing.energon.prepare import PreparedEnergonDataset, prepare_energon_dataset, read_manifest

log = logging.getLogger(__name__)

#: The vision preset used for a dataset with images when the caller names none.
DEFAULT_VISION = "qwen2_vl"

#: Registry rules checked before an Energon packing loader is built.
ENERGON_RULE_IDS: tuple[str, ...] = (
    "TOPO-WORLD-DIVISIBLE",
    "SEQ-LENGTH-MATCH",
    "CP-SEQ-DIVISIBLE",
    "CP-FT-PER-TOKEN-LOSS",
    "CP-FT-AVG-COLLECTIVE",
    "ALIGN-SEQ-LENGTH",
    "PACK-EXCLUSIVE-ENERGON-IN-BATCH",
    "PACK-EXCLUSIVE-GLOBAL-BATCH",
    "PACK-ENERGON-DEFER",
    "PACK-ENERGON-BUFFER-POSITIVE",
    "PACK-ENERGON-DATASET-KIND",
    "PACK-ENERGON-MBS1",
    "PACK-ENERGON-DATASET-MBS",
    "PACK-ENERGON-PER-TOKEN-LOSS",
    "PACK-ENERGON-AVG-COLLECTIVE",
    "PACK-ENERGON-NO-MTP",
    "PACK-ENERGON-NO-CUDA-GRAPHS",
    "PACK-ENERGON-NO-DISTTRAIN",
    "PACK-ENERGON-NO-PP",
    "PACK-ENERGON-EP-OVERLAP",
    "PACK-ENERGON-TASK-ENCODER",
    "PACK-ENERGON-DATALOADER",
    "PACK-FIXED-WIDTH-FORCED",
)

_WRAPPER_IDS = ("SavableDatasetWrapper", "SimpleSavableDatasetWrapper")


@dataclass(frozen=True)
class ResumeSettings:
    """Everything that must be unchanged for an exact resume (stored in every checkpoint)."""

    dataset_fingerprint: str
    split_part: str
    stream: str
    data_parallel_rank: int
    data_parallel_size: int
    num_workers: int
    micro_batch_size: int
    packing_buffer_size: int
    shuffle_buffer_size: int | None
    seed: int
    seq_length: int
    pad_seq_to_mult: int
    pad_to_max_length: bool
    tensor_model_parallel_size: int
    context_parallel_size: int
    sequence_parallel: bool
    tokenizer: str
    schema: dict
    media: dict | None
    energon_version: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass
class EnergonPackedDataset:
    """An energon dataset of packed micro-batches plus what the loader needs to know about it."""

    dataset: Any
    encoder: PackingTaskEncoder
    settings: ResumeSettings
    worker_samples: list[int]
    finite: bool
    prepared: PreparedEnergonDataset = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary."""
        return {
            "settings": self.settings.to_dict(),
            "worker_samples": list(self.worker_samples),
            "finite": self.finite,
            "root": str(self.prepared.root),
        }


# ------------------------------------------------------------------------------------------------
# Datasets
# ------------------------------------------------------------------------------------------------


def _config(cfg: TrainingConfig | Any) -> TrainingConfig:
    return cfg if isinstance(cfg, TrainingConfig) else load_config(cfg)


def _find_packing_dataset(ds: Any) -> Any:
    from megatron.energon import PackingDataset

    node = ds
    while node is not None:
        if isinstance(node, PackingDataset):
            return node
        node = getattr(node, "dataset", None)
    raise PackingError("the energon pipeline has no PackingDataset (packing_buffer_size was not applied)")


def _build(
    cfg: TrainingConfig | Any,
    data_dir: str | os.PathLike[str],
    *,
    split_part: str,
    val: bool,
    dp_rank: int,
    num_workers: int | None,
    shuffle_buffer_size: int | None,
    repeat: bool,
    tokenizer: Any,
    schema: Any,
    vision: Any,
) -> EnergonPackedDataset:
    import megatron.energon as me

    from seqpack.data.schemas import default_schema
    from seqpack.data.tokenizers import load_tokenizer

    cfg = _config(cfg)
    for finding in check_rules(cfg, ENERGON_RULE_IDS):
        log.warning("%s", finding.one_line())
    if not cfg.energon_packing:
        raise UsageError(
            "Energon online packing is off: it needs dataset.kind=energon and dataset.packing_buffer_size",
            field="dataset.packing_buffer_size",
            fix="set dataset.kind=energon and dataset.packing_buffer_size=16 (a starting point)",
        )
    r = resolve(cfg)
    dp = int(r.dp or 1)
    if not is_int(dp_rank) or not 0 <= dp_rank < dp:
        raise UsageError(f"dp_rank must be in [0, {dp}) for data-parallel size {dp}, got {dp_rank!r}", field="dp_rank")
    workers = cfg.dataset.num_workers if num_workers is None else num_workers
    workers = non_negative_int("num_workers", workers)
    positive_int("shuffle_buffer_size", shuffle_buffer_size, allow_none=True)

    prepared = read_manifest(data_dir)
    if split_part not in prepared.samples:
        raise UsageError(
            f"split '{split_part}' is not in this dataset (it has {', '.join(sorted(prepared.samples))})",
            file=str(prepared.root), field="split_part",
            fix="prepare the data with --val-fraction > 0 to get a val split" if split_part == "val" else None,
        )
    tok = load_tokenizer(tokenizer)
    sch = default_schema(prepared.schema) if schema is None else schema
    if sch.kind != prepared.schema:
        raise UsageError(f"schema is {sch.kind} but the dataset holds {prepared.schema} rows", field="schema")
    media = prepared.media
    pad_to_max = bool(r.pad_to_max_length or r.ep > 1)
    if pad_to_max and not r.pad_to_max_length:
        log.info("expert parallelism > 1: packs are padded to seq_length=%d (pad_to_max_length)", r.seq_length)
    encoder = PackingTaskEncoder(
        seq_length=r.seq_length,
        tokenizer=tok,
        schema=sch,
        pad_seq_to_mult=r.alignment.pad_seq_to_mult,
        pad_to_max_length=pad_to_max,
        vision=vision if vision is not None else (None if media is None else DEFAULT_VISION),
    )
    buffer = int(cfg.dataset.packing_buffer_size)  # type: ignore[arg-type]
    wc = me.WorkerConfig(
        rank=dp_rank,
        world_size=dp,
        num_workers=workers,
        seed_offset=cfg.dataset.seed,
        global_error_handler=me.reraise_exception,
        restore_error_handler=me.reraise_exception,
    )
    if val:
        ds = me.get_val_dataset(
            prepared.root, split_part=split_part, worker_config=wc, batch_size=1,
            packing_buffer_size=buffer, task_encoder=encoder,
        )
        finite, stream, shuffle = True, "val", None
    else:
        ds = me.get_train_dataset(
            prepared.root, split_part=split_part, worker_config=wc, batch_size=1,
            packing_buffer_size=buffer, shuffle_buffer_size=shuffle_buffer_size,
            max_samples_per_sequence=None, task_encoder=encoder, repeat=repeat,
        )
        finite, stream, shuffle = not repeat, ("train-repeat" if repeat else "train-once"), shuffle_buffer_size
    source = _find_packing_dataset(ds).dataset
    worker_samples = [int(source.len_worker(w)) for w in range(max(workers, 1))]
    settings = ResumeSettings(
        dataset_fingerprint=prepared.fingerprint,
        split_part=split_part,
        stream=stream,
        data_parallel_rank=dp_rank,
        data_parallel_size=dp,
        num_workers=workers,
        micro_batch_size=1,
        packing_buffer_size=buffer,
        shuffle_buffer_size=shuffle,
        seed=cfg.dataset.seed,
        seq_length=r.seq_length,
        pad_seq_to_mult=r.alignment.pad_seq_to_mult,
        pad_to_max_length=pad_to_max,
        tensor_model_parallel_size=r.tp,
        context_parallel_size=r.cp,
        sequence_parallel=r.sp,
        tokenizer=tok.fingerprint(),
        schema=sch.to_dict(),
        media=None if encoder.vlm is None else encoder.vlm.to_dict(),
        energon_version=str(me.__version__),
    )
    return EnergonPackedDataset(ds, encoder, settings, worker_samples, finite, prepared)


def get_train_dataset(
    cfg: TrainingConfig | Any,
    data_dir: str | os.PathLike[str],
    *,
    dp_rank: int = 0,
    num_workers: int | None = None,
    shuffle_buffer_size: int | None = None,
    repeat: bool = True,
    split_part: str = "train",
    tokenizer: Any = None,
    schema: Any = None,
    vision: Any = None,
) -> EnergonPackedDataset:
    """The packed training stream of data-parallel rank ``dp_rank`` (module docstring).

    ``cfg``: a TrainingConfig (or anything :func:`load_config` reads). ``num_workers`` defaults
    to ``dataset.num_workers``; the DP size, ``seq_length``, alignment, buffer size and seed come
    from the config. ``tokenizer``/``schema`` default to the byte tokenizer and the dataset's
    schema with default options. ``vision`` (a preset name, spec or VLM settings) decodes the
    dataset's images; it defaults to ``qwen2_vl`` when the dataset holds images, else text only.
    """
    return _build(
        cfg, data_dir, split_part=split_part, val=False, dp_rank=dp_rank, num_workers=num_workers,
        shuffle_buffer_size=shuffle_buffer_size, repeat=repeat, tokenizer=tokenizer, schema=schema,
        vision=vision,
    )


def get_val_dataset(
    cfg: TrainingConfig | Any,
    data_dir: str | os.PathLike[str],
    *,
    dp_rank: int = 0,
    num_workers: int | None = None,
    split_part: str = "val",
    tokenizer: Any = None,
    schema: Any = None,
    vision: Any = None,
) -> EnergonPackedDataset:
    """The finite, unshuffled packed validation stream (partial buffers are flushed, never dropped)."""
    return _build(
        cfg, data_dir, split_part=split_part, val=True, dp_rank=dp_rank, num_workers=num_workers,
        shuffle_buffer_size=None, repeat=False, tokenizer=tokenizer, schema=schema, vision=vision,
    )


# ------------------------------------------------------------------------------------------------
# Loader
# ------------------------------------------------------------------------------------------------


class EnergonPackedLoader:
    """A savable loader of packed micro-batches with the energon hazards handled (module docstring)."""

    def __init__(self, packed: EnergonPackedDataset, loader: Any) -> None:
        self.packed = packed
        self.loader = loader
        self.settings = packed.settings
        self._nw = packed.settings.num_workers
        self._rank = packed.settings.data_parallel_rank
        self._consumed = [0] * len(packed.worker_samples)
        self._packs = 0
        self._samples = 0
        self._epochs = 0
        self._epoch_complete = False
        self._start_state: Any = None  # the state the loader starts from (restored or initial)
        self._gen: Iterator[dict[str, Any]] | None = None
        self._started = False  # energon's iterator has been created

    # -- iteration ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._gen is None:
            self._gen = self._generate()
        return self._gen

    def _worker_of(self, batch: dict[str, Any]) -> int:
        key = batch.get("__restore_key__")
        if not isinstance(key, (list, tuple)) or len(key) < 2 or key[0] not in _WRAPPER_IDS:
            raise PackingError(f"unexpected batch restore key {key!r}; cannot tell which worker produced it")
        local = int(key[1]) - self._rank * self._nw
        if not 0 <= local < len(self._consumed):
            raise PackingError(f"batch restore key names worker {key[1]}, not a worker of rank {self._rank}")
        return local

    def _generate(self) -> Iterator[dict[str, Any]]:
        totals = self.packed.worker_samples
        it = iter(self.loader)
        self._started = True
        self._epoch_complete = False
        try:
            for batch in it:
                w = self._worker_of(batch)
                n = len(batch["sample_keys"])
                if self.packed.finite:
                    self._consumed[w] += n
                    if self._consumed[w] > totals[w]:
                        raise PackingError(
                            f"worker {w} delivered {self._consumed[w]} samples in this finite epoch but owns only "
                            f"{totals[w]}: samples are repeated (was the state restored from the end of an epoch?)"
                        )
                self._packs += 1
                self._samples += n
                yield batch
            if self.packed.finite:
                short = [(w, c, t) for w, (c, t) in enumerate(zip(self._consumed, totals)) if c != t]
                if short:
                    raise PackingError(
                        "the finite epoch ended but workers delivered fewer samples than they own "
                        f"(worker, delivered, owned): {short}; samples were dropped"
                    )
            self._epochs += 1
            self._epoch_complete = True
            self._consumed = [0] * len(totals)
        finally:
            self._gen = None

    # -- state --------------------------------------------------------------------------------
    def save_state(self) -> LoaderCheckpoint:
        """The current position as a :class:`LoaderCheckpoint` (refused in unsafe windows)."""
        if self.packed.finite and self._epoch_complete:
            raise PackingError(
                "the finite epoch is complete; there is nothing to resume",
                fix="build a fresh loader for another pass instead of restoring this state",
            )
        if self.packed.finite:
            check_save_window(self._consumed, self.packed.worker_samples, self.settings.packing_buffer_size)
        state = self.loader.save_state_rank() if self._started else self._start_state
        return LoaderCheckpoint(
            settings=self.settings.to_dict(),
            progress={
                "finite": self.packed.finite,
                "consumed_per_worker": list(self._consumed),
                "worker_samples": list(self.packed.worker_samples),
                "packs": self._packs,
                "samples": self._samples,
                "epochs_completed": self._epochs,
            },
            energon_state=state,
        )

    def restore_state(self, checkpoint: LoaderCheckpoint | dict[str, Any]) -> None:
        """Continue from ``checkpoint``; only before the first batch, and only with equal settings."""
        ckpt = LoaderCheckpoint.from_payload(checkpoint)
        if self._started or self._gen is not None:
            raise UsageError("restore_state must be called before iterating the loader")
        check_resume_settings(ckpt.settings, self.settings.to_dict())
        progress = ckpt.progress
        consumed = list(progress.get("consumed_per_worker", []))
        if len(consumed) != len(self._consumed):
            raise ArtifactError(
                f"checkpoint has {len(consumed)} worker counters, this loader {len(self._consumed)}",
                field="consumed_per_worker",
            )
        if ckpt.energon_state is not None:
            self.loader.restore_state_rank(ckpt.energon_state)
        self._start_state = ckpt.energon_state
        self._consumed = [int(c) for c in consumed]
        self._packs = int(progress.get("packs", 0))
        self._samples = int(progress.get("samples", 0))
        self._epochs = int(progress.get("epochs_completed", 0))

    def restore_sample(self, restore_key: Any) -> dict[str, Any]:
        """Rebuild one micro-batch from its ``__restore_key__``."""
        return self.loader.restore_sample(restore_key)

    @property
    def progress(self) -> dict[str, Any]:
        """Packs, samples and completed epochs so far."""
        return {"packs": self._packs, "samples": self._samples, "epochs_completed": self._epochs}


def get_savable_loader(
    packed: EnergonPackedDataset,
    *,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
    n_checkpoints: int | None = None,
) -> EnergonPackedLoader:
    """Wrap energon's ``SavableDataLoader`` over ``packed`` (arguments are energon's)."""
    from megatron.energon import get_savable_loader as energon_loader

    if not isinstance(packed, EnergonPackedDataset):
        raise UsageError("get_savable_loader needs the result of get_train_dataset/get_val_dataset")
    loader = energon_loader(
        packed.dataset,
        checkpoint_every_sec=checkpoint_every_sec,
        checkpoint_every_min_n_samples=checkpoint_every_min_n_samples,
        n_checkpoints=n_checkpoints,
    )
    return EnergonPackedLoader(packed, loader)


# ------------------------------------------------------------------------------------------------
# Smoke-test helper
# ------------------------------------------------------------------------------------------------


@dataclass
class EnergonMicroBatch:
    """One canonical THD micro-batch (``batch``) and the keys of the samples packed into it."""

    batch: dict[str, Any]
    sample_keys: list[str]

    @property
    def source_rows(self) -> list[int]:
        """0-based JSONL row of every packed sample (from the ``row<index>`` keys)."""
        return [row_of_key(k) for k in self.sample_keys]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary."""
        return {
            "sample_keys": list(self.sample_keys),
            "width": int(self.batch["tokens"].shape[1]),
            "cu_seqlens_q": self.batch["cu_seqlens_q"].tolist(),
        }


def row_of_key(key: str) -> int:
    """The source row index of a sample key ``row<index>``."""
    if not key.startswith("row") or not key[3:].isdigit():
        raise UsageError(f"not a seqpack sample key: {key!r}")
    return int(key[3:])


def iter_energon_batches(
    cfg: TrainingConfig | Any,
    data: str | os.PathLike[str],
    *,
    split_part: str = "train",
    num_workers: int = 0,
    dp_rank: int = 0,
    tokenizer: Any = None,
    schema: Any = None,
    work_dir: str | os.PathLike[str] | None = None,
    max_batches: int | None = None,
    vision: Any = None,
) -> Iterator[EnergonMicroBatch]:
    """One finite pass of packed micro-batches over ``data`` for config ``cfg``.

    ``data`` is a prepared dataset directory, or a JSONL file, which is then prepared into
    ``work_dir`` (default: a temporary directory removed when the iteration ends). The split is
    read once (``repeat=False`` for train, the finite val stream for ``"val"``); every sample
    appears exactly once across the yielded micro-batches. Bookkeeping keys are moved out of the
    batch into :attr:`EnergonMicroBatch.sample_keys`.
    """
    cfg = _config(cfg)
    tmp = contextlib.ExitStack()
    root = Path(data)
    try:
        if root.is_file():
            if work_dir is None:
                work_dir = tmp.enter_context(confine.scratch_directory("seqpack-energon-"))
            root = Path(work_dir) / "energon"
            prepare_energon_dataset(data, root, overwrite=True)
        kwargs = dict(
            dp_rank=dp_rank, num_workers=num_workers, tokenizer=tokenizer, schema=schema, split_part=split_part,
            vision=vision,
        )
        if split_part == "val":
            packed = get_val_dataset(cfg, root, **kwargs)
        else:
            packed = get_train_dataset(cfg, root, repeat=False, **kwargs)
        for k, batch in enumerate(get_savable_loader(packed)):
            if max_batches is not None and k >= max_batches:
                break
            keys = list(batch["sample_keys"])
            canonical = {key: value for key, value in batch.items() if key not in BOOKKEEPING_KEYS}
            yield EnergonMicroBatch(canonical, keys)
    finally:
        tmp.close()

"""Loader checkpoints for Energon online packing: what is saved, when saving is safe, how a state
file is read without unsafe unpickling, and which settings must match on resume.

A :class:`LoaderCheckpoint` holds

* ``energon_state``: what ``SavableDataLoader.save_state_rank()`` returned (per-worker restore
  keys of the buffered samples, pending group lengths, sample indices and RNG states; never the
  samples themselves), or ``None`` for "the start of the stream";
* ``settings``: :class:`~seqpack.packing.energon.loader.ResumeSettings` as a dict: the
  dataset fingerprint (shards and splits), data-parallel rank and size, worker count, shuffle
  buffer and seed, tokenizer, schema, sequence length, topology and alignment, packing buffer
  size, micro-batch size, stream kind and energon version. A restore into a loader whose settings
  differ is refused, naming the first differing field;
* ``progress``: samples consumed from every worker in the current epoch (finite streams), packs
  and samples so far, completed epochs.

Two energon hazards (energon.md section 8) are handled here:

* **End of a finite epoch.** Energon does not record that a worker's source is exhausted, so a
  state taken during a worker's final flush restores as "pending packs + a new epoch"
  (duplicates). A worker's source can only be exhausted at the last consumed pack when fewer
  than ``packing_buffer_size`` of its samples remain unconsumed (the failed refill left the
  buffer short of full, and packs only shrink it). :func:`check_save_window` therefore refuses a
  save when a worker that has started has fewer than ``packing_buffer_size`` samples left;
  infinite streams (``repeat=True``) have no such window.
* **Unsafe unpickling.** ``torch.load(weights_only=True)`` rejects energon states (a dict subclass),
  and ``weights_only=False`` runs arbitrary code from the file. :func:`load_checkpoint` uses a
  restricted unpickler that resolves only the classes an energon state contains (energon
  ``State`` classes, numpy arrays and dtypes, torch tensors, ``OrderedDict``) and refuses
  anything else with :class:`ArtifactError`.
"""

from __future__ import annotations

import importlib
import io
import logging
import os
import pickle
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from seqpack.io.atomic import atomic_output
from seqpack.core.errors import ArtifactError, PackingError

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "seqpack-energon-loader/1"


@dataclass
class LoaderCheckpoint:
    """A saved loader position (module docstring)."""

    settings: dict[str, Any]
    progress: dict[str, Any]
    energon_state: Any = field(default=None, repr=False)
    format: str = CHECKPOINT_FORMAT

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (the energon state itself is summarised, not dumped)."""
        state = self.energon_state
        workers = getattr(state, "worker_states", None)
        return {
            "format": self.format,
            "settings": dict(self.settings),
            "progress": dict(self.progress),
            "energon_state": None if state is None else {
                "type": type(state).__name__,
                "worker_states": None if workers is None else len(workers),
                "next_worker_id": getattr(state, "next_worker_id", None),
                "micro_batch_size": getattr(state, "micro_batch_size", None),
            },
        }

    def to_payload(self) -> dict[str, Any]:
        """The plain dict that :func:`save_checkpoint` writes."""
        return {
            "format": self.format,
            "settings": dict(self.settings),
            "progress": dict(self.progress),
            "energon_state": self.energon_state,
        }

    @classmethod
    def from_payload(cls, payload: Any, *, source: str = "<payload>") -> LoaderCheckpoint:
        """Rebuild a checkpoint from :meth:`to_payload` output (or accept a LoaderCheckpoint)."""
        if isinstance(payload, LoaderCheckpoint):
            payload = payload.to_payload()
        if not isinstance(payload, Mapping):
            raise ArtifactError(f"not a seqpack Energon loader checkpoint ({type(payload).__name__})", file=source)
        if payload.get("format") != CHECKPOINT_FORMAT:
            raise ArtifactError(
                f"checkpoint format is {payload.get('format')!r}, expected {CHECKPOINT_FORMAT!r}", file=source
            )
        for key in ("settings", "progress"):
            if not isinstance(payload.get(key), Mapping):
                raise ArtifactError(f"checkpoint has no '{key}' mapping", file=source, field=key)
        return cls(
            settings=dict(payload["settings"]),
            progress=dict(payload["progress"]),
            energon_state=payload.get("energon_state"),
        )


# ------------------------------------------------------------------------------------------------
# When saving is safe, and whether a restore target matches
# ------------------------------------------------------------------------------------------------


def check_save_window(consumed: Sequence[int], totals: Sequence[int], buffer_size: int) -> None:
    """Refuse a save inside the final-flush window of a finite epoch (module docstring).

    ``consumed[w]`` / ``totals[w]``: samples of local worker ``w`` consumed so far in this epoch /
    in the whole epoch. A worker that has not delivered anything yet is safe (its saved state is
    its initial one); otherwise at least ``buffer_size`` of its samples must remain.
    """
    for w, (done, total) in enumerate(zip(consumed, totals)):
        left = total - done
        if done > 0 and left < buffer_size:
            raise PackingError(
                f"cannot save the loader state: worker {w} has {left} of its {total} samples left in this "
                f"finite epoch, fewer than packing_buffer_size={buffer_size}, so its source may already be "
                "exhausted, and energon would restore that as the pending packs plus a whole new epoch "
                "(duplicated samples)",
                field="packing_buffer_size",
                fix="save earlier in the epoch, or train on the infinite stream (repeat=True) as Megatron-Bridge does",
            )


def check_resume_settings(saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise :class:`ArtifactError` naming the first setting that differs between save and now."""
    for key in sorted(set(saved) | set(current)):
        if key not in saved or key not in current:
            where = "the checkpoint" if key not in saved else "this loader"
            raise ArtifactError(
                f"cannot resume: setting '{key}' is missing from {where}", field=key,
                fix="restore with the same seqpack version and loader settings that saved the state",
            )
        if _canon(saved[key]) != _canon(current[key]):
            raise ArtifactError(
                f"cannot resume exactly: '{key}' was {saved[key]!r} when the state was saved but is "
                f"{current[key]!r} now",
                field=key,
                fix="rebuild the loader with the saved value (exact resume needs the same shards, splits, DP size, "
                "workers, shuffle settings, seed, tokenizer, seq_length, topology and packing buffer size)",
            )


def _canon(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------

#: Globals an energon loader state may reference (beyond energon ``State`` subclasses).
_ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("collections", "OrderedDict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("_codecs", "encode"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor"),
        ("torch", "Size"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("megatron.energon.savable_loader", "SavableDataLoaderState"),
        ("megatron.energon.savable_loader", "SavableDatasetCheckpoint"),
        ("megatron.energon.savable_loader", "SavableDatasetState"),
        ("megatron.energon.state", "FlexState"),
        ("megatron.energon.rng", "SystemRngState"),
        ("megatron.energon.flavors.webdataset.sample_loader", "SliceState"),
        (__name__, "LoaderCheckpoint"),
    }
)


def _is_energon_state_class(module: str, name: str) -> bool:
    """True for a class defined in ``megatron.energon`` that derives from energon's ``State``."""
    if module != "megatron.energon" and not module.startswith("megatron.energon."):
        return False
    try:
        from megatron.energon.state import State

        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(obj, type) and issubclass(obj, State) and obj.__module__ == module


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only allow-listed globals (energon state classes and friends)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS or _is_energon_state_class(module, name):
            return super().find_class(module, name)
        if module.startswith("numpy.dtypes") and name.endswith("DType"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global '{module}.{name}' from a loader checkpoint")


def _restricted_pickle_module() -> types.ModuleType:
    mod = types.ModuleType("seqpack_restricted_pickle")
    mod.Unpickler = _RestrictedUnpickler  # type: ignore[attr-defined]
    mod.UnpicklingError = pickle.UnpicklingError  # type: ignore[attr-defined]

    def load(fh: Any, **kwargs: Any) -> Any:
        return _RestrictedUnpickler(fh, **kwargs).load()

    def loads(data: bytes, **kwargs: Any) -> Any:
        return _RestrictedUnpickler(io.BytesIO(data), **kwargs).load()

    mod.load = load  # type: ignore[attr-defined]
    mod.loads = loads  # type: ignore[attr-defined]
    return mod


def save_checkpoint(checkpoint: LoaderCheckpoint, path: str | os.PathLike[str]) -> Path:
    """Write ``checkpoint`` with ``torch.save`` (atomically) and return the path."""
    import torch

    target = Path(path)
    with atomic_output(target) as fh:
        torch.save(checkpoint.to_payload(), fh)
    return target


def load_checkpoint(path: str | os.PathLike[str]) -> LoaderCheckpoint:
    """Read a checkpoint file with the restricted unpickler; never runs code from the file.

    Raises :class:`ArtifactError` for a missing or corrupt file, a refused global, or a payload
    that is not a seqpack Energon loader checkpoint.
    """
    import torch

    source = str(path)
    if not Path(path).is_file():
        raise ArtifactError("checkpoint file not found", file=source)
    try:
        payload = torch.load(source, map_location="cpu", weights_only=False, pickle_module=_restricted_pickle_module())
    except pickle.UnpicklingError as exc:
        raise ArtifactError(f"unsafe or unreadable checkpoint: {exc}", file=source) from None
    except (EOFError, RuntimeError, ValueError, OSError) as exc:
        raise ArtifactError(f"cannot read checkpoint: {type(exc).__name__}: {exc}", file=source) from None
    return LoaderCheckpoint.from_payload(payload, source=source)

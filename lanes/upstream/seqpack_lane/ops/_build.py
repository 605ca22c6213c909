"""Build Megatron-Bridge config objects from JSON specs (a helper of the lane's ops; not an op module).

A spec names upstream classes by short names from :data:`CLASSES` and gives their keyword arguments;
a nested ``{"__class__": NAME, ...}`` is built the same way. Nothing here decides a value: seqpack's
side translates its config into the spec (``lanes/upstream/seqpack_lane/bridge_config.py``), the
builder only turns names into the released classes, so a field the release lacks fails as it would
for a user (``TypeError: unexpected keyword argument``).
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

#: Short name -> "module:attribute" of the released class.
CLASSES: dict[str, str] = {
    "ConfigContainer": "megatron.bridge.training.config:ConfigContainer",
    "TrainingConfig": "megatron.bridge.training.config:TrainingConfig",
    "ValidationConfig": "megatron.bridge.training.config:ValidationConfig",
    "OptimizerConfig": "megatron.bridge.training.config:OptimizerConfig",
    "SchedulerConfig": "megatron.bridge.training.config:SchedulerConfig",
    "LoggerConfig": "megatron.bridge.training.config:LoggerConfig",
    "CheckpointConfig": "megatron.bridge.training.config:CheckpointConfig",
    "DistributedDataParallelConfig": "megatron.bridge.training.config:DistributedDataParallelConfig",
    "DistributedInitConfig": "megatron.bridge.training.config:DistributedInitConfig",
    "RerunStateMachineConfig": "megatron.bridge.training.config:RerunStateMachineConfig",
    "MockGPTDatasetConfig": "megatron.bridge.training.config:MockGPTDatasetConfig",
    "TokenizerConfig": "megatron.bridge.training.tokenizers.config:TokenizerConfig",
    "GPTModelProvider": "megatron.bridge.models:GPTModelProvider",
    "GPTSFTDatasetConfig": "megatron.bridge.data.builders.gpt_sft:GPTSFTDatasetConfig",
    "PackedSequenceSpecs": "megatron.bridge.data.packing.config:PackedSequenceSpecs",
    "DirectHFSFTDatasetConfig": "megatron.bridge.data.builders.direct_hf_sft:DirectHFSFTDatasetConfig",
    "MockVLMSFTDatasetConfig": "megatron.bridge.data.builders.mock_vlm_sft:MockVLMSFTDatasetConfig",
    "EnergonDatasetConfig": "megatron.bridge.data.builders.energon:EnergonDatasetConfig",
    "QwenVLEnergonTaskEncoderConfig": "megatron.bridge.data.builders.energon:QwenVLEnergonTaskEncoderConfig",
    "HFEnergonTaskEncoderConfig": "megatron.bridge.data.builders.energon:HFEnergonTaskEncoderConfig",
    "NemotronOmniEnergonTaskEncoderConfig": "megatron.bridge.data.builders.energon:NemotronOmniEnergonTaskEncoderConfig",
    "HFDatasetSourceConfig": "megatron.bridge.data.sources.hf:HFDatasetSourceConfig",
}


def resolve_class(name: str) -> Any:
    """The released class a short name stands for."""
    module, _, attr = CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def build(value: Any) -> Any:
    """``value`` with every ``{"__class__": NAME, **kwargs}`` turned into ``NAME(**kwargs)``, recursively."""
    if isinstance(value, list):
        return [build(v) for v in value]
    if isinstance(value, dict):
        if "__class__" in value:
            kwargs = {k: build(v) for k, v in value.items() if k != "__class__"}
            return resolve_class(value["__class__"])(**kwargs)
        return {k: build(v) for k, v in value.items()}
    return value


def touch(paths: list[str]) -> None:
    """Create the (empty) files a spec names, so that path checks see them exist."""
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()


@contextlib.contextmanager
def gpu_stand_in(name: str | None, major: int, minor: int = 0):
    """While active, ``torch.cuda.get_device_properties`` reports a GPU of this name and compute capability.

    Megatron-Bridge's flex-dispatcher check reads the GPU's architecture inside
    ``ConfigContainer.validate``; the CPU lane has none. The stand-in answers that one query as the
    target machine would; ``name=None`` leaves torch as it is.
    """
    import torch

    if name is None:
        yield
        return

    class _Props:
        def __init__(self) -> None:
            self.name, self.major, self.minor = name, major, minor

    original = torch.cuda.get_device_properties
    torch.cuda.get_device_properties = lambda *_a, **_k: _Props()
    try:
        yield
    finally:
        torch.cuda.get_device_properties = original

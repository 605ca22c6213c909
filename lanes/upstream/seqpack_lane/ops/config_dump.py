"""Lane ops: Bridge's own config dump (``ConfigContainer.to_yaml``) of configs built here, and their verdict.

``config_dump.write`` builds one ``ConfigContainer`` per case from Bridge's SFT template
(``recipes.common._sft_common``: a GPT-SFT dataset with offline packing, as every Bridge SFT recipe
starts) with a small ``GPTModelProvider`` (no hub id), applies the case's dotted settings, writes
the YAML exactly as Bridge writes ``run_config.yaml`` next to a checkpoint, then runs
``runtime_config_update`` and reports whether it raises. A case may swap the dataset for Bridge's
mock VLM SFT dataset (in-batch packing lives there in 0.6.2). Run in the upstream interpreter only.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

#: The small model every case starts from (Transformer Engine features off: the lane has no TE).
MODEL = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=8, num_query_groups=8,
             vocab_size=512, seq_length=2048, transformer_impl="local", apply_rope_fusion=False,
             gradient_accumulation_fusion=False, bias_activation_fusion=False, masked_softmax_fusion=False,
             persist_layer_norm=False, cross_entropy_loss_fusion=False)


def _set(obj, dotted: str, value) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    if not hasattr(obj, parts[-1]):
        raise AttributeError(f"{type(obj).__name__} has no field {parts[-1]!r} ({dotted})")
    setattr(obj, parts[-1], value)


def _build(case: dict):
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.bridge.recipes.common import _sft_common

    cfg = _sft_common()
    cfg.model = GPTModelProvider(**MODEL)
    cfg.tokenizer.tokenizer_type = "NullTokenizer"
    cfg.tokenizer.vocab_size = MODEL["vocab_size"]
    cfg.mixed_precision = None
    if case.get("dataset") == "mock_vlm":
        from megatron.bridge.data.builders.mock_vlm_sft import MockVLMSFTDatasetConfig

        cfg.dataset = MockVLMSFTDatasetConfig(seq_length=MODEL["seq_length"], hf_processor_path="stand-in/processor")
    for dotted, value in (case.get("set") or {}).items():
        _set(cfg, dotted, value)
    return cfg


def op_write(cases: list[dict], out_dir: str) -> list[dict]:
    """For each case (``name``, ``world_size``, optional ``dataset``, ``set``): its dump file and Bridge's verdict."""
    from megatron.bridge.training.config import runtime_config_update

    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    environ, cwd = dict(os.environ), os.getcwd()
    out = []
    for case in cases:
        answer: dict = {"name": case["name"]}
        try:
            os.chdir("/")  # the template's output folders are relative to the working directory
            os.environ["WORLD_SIZE"] = str(case.get("world_size", 1))
            cfg = _build(case)
            os.chdir(cwd)
            path = target / f"{case['name']}.yaml"
            cfg.to_yaml(str(path))
            answer["dump"] = str(path)
            try:
                runtime_config_update(cfg)
                answer["raises"] = False
            except Exception as exc:
                answer.update(raises=True, type=type(exc).__name__, message=str(exc)[:2000],
                              where=traceback.extract_tb(exc.__traceback__)[-1].name)
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(environ)
        out.append(answer)
    return out

"""A stand-in Hugging Face cache for running Bridge's recipe functions offline (lane helper, not an op module).

Bridge's recipes build their model provider with ``AutoBridge.from_hf_pretrained(<hub id>)``, which
reads only the hub repository's ``config.json`` (no weights: ``load_weights=False``). Offline, that
fails. This module writes, under ``$HF_HOME/hub``, a cache entry per hub id holding one
``config.json`` built from the installed ``transformers`` configuration class of the model type
(its defaults) plus the dimensions listed here, so the recipe code runs unchanged. Only shape
fields the recipes' parallel layouts and Megatron-Core's divisibility checks read are given
(layers, hidden size, heads, KV groups, experts, MTP layers); they follow the public model cards
where known. Model types ``transformers`` does not ship get a small configuration module of our
own (``auto_map``), loaded because those recipes pass ``trust_remote_code=True``.

Packing settings never come from here: they are the recipe's own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REVISION = "0" * 40

#: hub id -> (model_type, architecture, constructor arguments of the configuration class; a
#: ``text_config`` mapping builds the language part of a vision-language model).
STANDINS: dict[str, tuple[str, str, dict]] = {}


def _add(model_type: str, arch: str, ids: dict[str, dict]) -> None:
    for hub, overrides in ids.items():
        STANDINS[hub] = (model_type, arch, overrides)


def _dense(layers: int, hidden: int, heads: int, kv: int, ffn: int, **extra) -> dict:
    return dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
                intermediate_size=ffn, **extra)


_L3 = dict(vocab_size=128256, rope_theta=500000.0)
_L31 = dict(_L3, max_position_embeddings=131072, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
_add("llama", "LlamaForCausalLM", {
    "meta-llama/Llama-2-7b-hf": _dense(32, 4096, 32, 32, 11008, vocab_size=32000),
    "meta-llama/Meta-Llama-3-8B": _dense(32, 4096, 32, 8, 14336, **_L3),
    "meta-llama/Meta-Llama-3-70B": _dense(80, 8192, 64, 8, 28672, **_L3),
    "meta-llama/Meta-Llama-3.1-8B": _dense(32, 4096, 32, 8, 14336, **_L31),
    "meta-llama/Meta-Llama-3.1-70B": _dense(80, 8192, 64, 8, 28672, **_L31),
    "meta-llama/Meta-Llama-3.1-405B": _dense(126, 16384, 128, 8, 53248, **_L31),
    "meta-llama/Llama-3.2-1B": _dense(16, 2048, 32, 8, 8192, tie_word_embeddings=True, **_L31),
    "meta-llama/Llama-3.2-3B": _dense(28, 3072, 24, 8, 8192, tie_word_embeddings=True, **_L31),
})
_Q2S = dict(vocab_size=151936, tie_word_embeddings=True)
_Q2L = dict(vocab_size=152064)
_add("qwen2", "Qwen2ForCausalLM", {
    "Qwen/Qwen2-0.5B": _dense(24, 896, 14, 2, 4864, **_Q2S),
    "Qwen/Qwen2-1.5B": _dense(28, 1536, 12, 2, 8960, **_Q2S),
    "Qwen/Qwen2-7B": _dense(28, 3584, 28, 4, 18944, **_Q2L),
    "Qwen/Qwen2-72B": _dense(80, 8192, 64, 8, 29568, **_Q2L),
    "Qwen/Qwen2.5-0.5B": _dense(24, 896, 14, 2, 4864, **_Q2S),
    "Qwen/Qwen2.5-1.5B": _dense(28, 1536, 12, 2, 8960, **_Q2S),
    "Qwen/Qwen2.5-7B": _dense(28, 3584, 28, 4, 18944, **_Q2L),
    "Qwen/Qwen2.5-14B": _dense(48, 5120, 40, 8, 13824, **_Q2L),
    "Qwen/Qwen2.5-32B": _dense(64, 5120, 40, 8, 27648, **_Q2L),
    "Qwen/Qwen2.5-72B": _dense(80, 8192, 64, 8, 29568, **_Q2L),
})
_Q3 = dict(vocab_size=151936, head_dim=128)
_add("qwen3", "Qwen3ForCausalLM", {
    "Qwen/Qwen3-0.6B": _dense(28, 1024, 16, 8, 3072, tie_word_embeddings=True, **_Q3),
    "Qwen/Qwen3-1.7B": _dense(28, 2048, 16, 8, 6144, tie_word_embeddings=True, **_Q3),
    "Qwen/Qwen3-4B": _dense(36, 2560, 32, 8, 9728, tie_word_embeddings=True, **_Q3),
    "Qwen/Qwen3-8B": _dense(36, 4096, 32, 8, 12288, **_Q3),
    "Qwen/Qwen3-14B": _dense(40, 5120, 40, 8, 17408, **_Q3),
    "Qwen/Qwen3-32B": _dense(64, 5120, 64, 8, 25600, **_Q3),
})
_add("qwen3_moe", "Qwen3MoeForCausalLM", {
    "Qwen/Qwen3-30B-A3B": _dense(48, 2048, 32, 4, 6144, num_experts=128, num_experts_per_tok=8,
                                 moe_intermediate_size=768, **_Q3),
    "Qwen/Qwen3-235B-A22B": _dense(94, 4096, 64, 4, 12288, num_experts=128, num_experts_per_tok=8,
                                   moe_intermediate_size=1536, **_Q3),
})
_add("qwen3_next", "Qwen3NextForCausalLM", {"Qwen/Qwen3-Next-80B-A3B-Instruct": {}})
_add("gemma2", "Gemma2ForCausalLM", {
    "google/gemma-2-2b": _dense(26, 2304, 8, 4, 9216, head_dim=256),
    "google/gemma-2-9b": _dense(42, 3584, 16, 8, 14336, head_dim=256),
    "google/gemma-2-27b": _dense(46, 4608, 32, 16, 36864, head_dim=128),
})
_add("gemma3_text", "Gemma3ForCausalLM", {"google/gemma-3-1b-pt": _dense(26, 1152, 4, 1, 6912, head_dim=256)})
_add("gemma3", "Gemma3ForConditionalGeneration", {
    "google/gemma-3-4b-it": {"text_config": _dense(34, 2560, 8, 4, 10240, head_dim=256)},
    "google/gemma-3-12b-it": {"text_config": _dense(48, 3840, 16, 8, 15360, head_dim=256)},
    "google/gemma-3-27b-it": {"text_config": _dense(62, 5376, 32, 16, 21504, head_dim=128)},
})
_add("gemma4", "Gemma4ForConditionalGeneration", {
    "google/gemma-4-E4B-it": {},
    "google/gemma-4-26B-A4B-it": {"text_config": {"enable_moe_block": True, "num_experts": 128, "top_k_experts": 8,
                                                  "moe_intermediate_size": 704}},
})
_add("glm4_moe", "Glm4MoeForCausalLM", {
    "zai-org/GLM-4.5": _dense(92, 5120, 96, 8, 12288, n_routed_experts=160, num_experts_per_tok=8,
                              first_k_dense_replace=3, moe_intermediate_size=1536, num_nextn_predict_layers=1),
    "zai-org/GLM-4.5-Air": _dense(46, 4096, 96, 8, 10944, n_routed_experts=128, num_experts_per_tok=8,
                                  first_k_dense_replace=1, moe_intermediate_size=1408, num_nextn_predict_layers=1),
})
# GLM-4.5V and GLM-5.2: Bridge 0.6.2 reads fields transformers 5.12.1's classes lack (use_qk_norm,
# indexer_rope_interleave); they are given here.
_add("glm4v_moe", "Glm4vMoeForConditionalGeneration", {"zai-org/GLM-4.5V": {"text_config": {"head_dim": 128,
                                                                                           "use_qk_norm": False}}})
_add("glm_moe_dsa", "GlmMoeDsaForCausalLM", {"zai-org/GLM-5.2": {"indexer_rope_interleave": False}})
_add("gpt_oss", "GptOssForCausalLM", {
    "openai/gpt-oss-20b": dict(num_hidden_layers=24, num_local_experts=32),
    "openai/gpt-oss-120b": dict(num_hidden_layers=36, num_local_experts=128),
})
_add("deepseek_v2", "DeepseekV2ForCausalLM", {
    "deepseek-ai/DeepSeek-V2-Lite": _dense(27, 2048, 16, 16, 10944, n_routed_experts=64, num_experts_per_tok=6,
                                           first_k_dense_replace=1, moe_intermediate_size=1408, q_lora_rank=None),
    "deepseek-ai/DeepSeek-V2": _dense(60, 5120, 128, 128, 12288, n_routed_experts=160, num_experts_per_tok=6,
                                      first_k_dense_replace=1, moe_intermediate_size=1536),
})
_add("deepseek_v3", "DeepseekV3ForCausalLM", {
    "deepseek-ai/DeepSeek-V3": {},
    "moonshotai/Moonlight-16B-A3B": _dense(27, 2048, 16, 16, 11264, n_routed_experts=64, num_experts_per_tok=6,
                                           first_k_dense_replace=1, moe_intermediate_size=1408, vocab_size=163840,
                                           q_lora_rank=None),
})
_V4_ROPE = {"main": {"rope_type": "default", "rope_theta": 10000.0},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0,
                         "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}}
_add("deepseek_v4", "DeepseekV4ForCausalLM", {"deepseek-ai/DeepSeek-V4-Flash": {"rope_parameters": _V4_ROPE},
                                               "deepseek-ai/DeepSeek-V4-Pro": {"rope_parameters": _V4_ROPE}})
_add("olmoe", "OlmoeForCausalLM", {"allenai/OLMoE-1B-7B-0924": _dense(16, 2048, 16, 16, 1024, num_experts=64,
                                                                       num_experts_per_tok=8)})
_add("exaone4", "Exaone4ForCausalLM", {"LGAI-EXAONE/EXAONE-4.0-1.2B": _dense(30, 2048, 32, 8, 4096)})
_add("exaone_moe", "ExaoneMoeForCausalLM", {"LGAI-EXAONE/K-EXAONE-236B-A23B": {}})
_add("exaone4_5", "Exaone4_5_ForConditionalGeneration", {"LGAI-EXAONE/EXAONE-4.5-33B": {}})
# Nemotron-3 Super: 88 hybrid layers (Mamba, MoE, attention); its 32K recipe pins 4 layers to the last of 8
# pipeline stages, so the stand-in needs a realistic depth. The others take the class defaults.
_SUPER = {"hybrid_override_pattern": ("ME" * 4 + "*E" + "ME" * 3) * 5 + "ME" * 4, "n_routed_experts": 512,
          "num_experts_per_tok": 22, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2}
_add("nemotron_h", "NemotronHForCausalLM", {
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": {}, "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16": _SUPER,
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": {}, "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16": {},
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16": {},
})
_add("mistral3", "Mistral3ForConditionalGeneration", {
    "mistralai/Ministral-3-3B-Instruct-2512": {}, "mistralai/Ministral-3-8B-Instruct-2512": {},
    "mistralai/Ministral-3-14B-Instruct-2512": {},
})
_add("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", {
    "Qwen/Qwen2.5-VL-3B-Instruct": {"text_config": _dense(36, 2048, 16, 2, 11008)},
    "Qwen/Qwen2.5-VL-7B-Instruct": {"text_config": _dense(28, 3584, 28, 4, 18944)},
    "Qwen/Qwen2.5-VL-32B-Instruct": {"text_config": _dense(64, 5120, 40, 8, 27648)},
    "Qwen/Qwen2.5-VL-72B-Instruct": {"text_config": _dense(80, 8192, 64, 8, 29568)},
})
_add("qwen3_vl", "Qwen3VLForConditionalGeneration", {
    "Qwen/Qwen3-VL-8B-Instruct": {"text_config": _dense(36, 4096, 32, 8, 12288, head_dim=128)},
})
_add("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", {
    "Qwen/Qwen3-VL-30B-A3B-Instruct": {"text_config": _dense(48, 2048, 32, 4, 6144, num_experts=128,
                                                             num_experts_per_tok=8, moe_intermediate_size=768)},
    "Qwen/Qwen3-VL-235B-A22B-Instruct": {"text_config": _dense(94, 4096, 64, 4, 12288, num_experts=128,
                                                               num_experts_per_tok=8, moe_intermediate_size=1536)},
})
_add("qwen3_5", "Qwen3_5ForConditionalGeneration", {
    h: {} for h in ("Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-2B", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-27B",
                    "Qwen/Qwen3.5-9B-Base")})
_add("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", {
    h: {} for h in ("Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-397B-A17B",
                    "Qwen/Qwen3.5-35B-A3B-Base")})
_add("qwen2_audio", "Qwen2AudioForConditionalGeneration", {"Qwen/Qwen2-Audio-7B-Instruct": {}})
_add("qwen3_omni_moe", "Qwen3OmniMoeForConditionalGeneration", {"Qwen/Qwen3-Omni-30B-A3B-Instruct": {}})
_add("minimax_m3_vl", "MiniMaxM3SparseForConditionalGeneration", {"MiniMaxAI/MiniMax-M3": {}})
_add("step3p5", "Step3p5ForCausalLM", {"stepfun-ai/Step-3.5-Flash": {}})
_add("step3p7", "Step3p7ForConditionalGeneration", {"stepfun-ai/Step-3.7-Flash": {}})
# Model types transformers does not ship: a configuration module of our own (auto_map). ``_base`` names the
# transformers class whose defaults fill the top level; nested ``*_config`` mappings with a ``model_type``
# are filled from that type's class and become attribute objects when loaded.
_KIMI = _dense(61, 7168, 64, 64, 18432, n_routed_experts=384, num_experts_per_tok=8, first_k_dense_replace=1,
               moe_intermediate_size=2048, vocab_size=163840)
_add("kimi_k2", "DeepseekV3ForCausalLM", {"moonshotai/Kimi-K2-Instruct": {"_base": "deepseek_v3", **_KIMI}})
_add("kimi_k25", "KimiK25ForConditionalGeneration", {
    "moonshotai/Kimi-K2.5": {"text_config": {"model_type": "deepseek_v3", **_KIMI}, "vision_config": {}}})
_add("nemotron_vl", "NemotronH_Nano_VL_V2", {
    "nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16": {"llm_config": {"model_type": "nemotron_h"}, "vision_config": {}}})
_add("NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_Omni_Reasoning_V3", {
    "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16": {"llm_config": {"model_type": "nemotron_h"},
                                                            "vision_config": {}}})

_REMOTE_CODE = '''"""A stand-in configuration class written by seqpack's upstream lane (no model code)."""
from transformers import PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING


def _sub(value):
    if not isinstance(value, dict):
        return value
    value = dict(value)
    model_type = value.pop("model_type", None)
    return CONFIG_MAPPING[model_type](**value) if model_type in CONFIG_MAPPING else PretrainedConfig(**value)


class StandInConfig(PretrainedConfig):
    model_type = "{model_type}"

    def __init__(self, **kwargs):
        for key in [k for k in kwargs if k.endswith("_config")]:
            kwargs[key] = _sub(kwargs[key])
        super().__init__(**kwargs)
'''


def config_json(hub: str) -> tuple[dict, str | None]:
    """The stand-in ``config.json`` of ``hub`` and, for model types transformers lacks, the module source."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    model_type, arch, overrides = STANDINS[hub]
    if model_type in CONFIG_MAPPING_NAMES:  # the class derives dependent fields (layer types, rope) itself
        data = CONFIG_MAPPING[model_type](**overrides).to_dict()
        module = None
    else:
        rest = dict(overrides)
        base = rest.pop("_base", None)
        data = CONFIG_MAPPING[base](**rest).to_dict() if base else rest
        for key, sub in list(data.items()):
            if key.endswith("_config") and isinstance(sub, dict) and sub.get("model_type") in CONFIG_MAPPING_NAMES:
                fields = {k: v for k, v in sub.items() if k != "model_type"}
                data[key] = CONFIG_MAPPING[sub["model_type"]](**fields).to_dict()
        data.update(model_type=model_type, auto_map={"AutoConfig": "configuration_standin.StandInConfig"})
        module = _REMOTE_CODE.format(model_type=model_type)
    data["architectures"] = [arch]
    data.pop("transformers_version", None)
    return data, module


def write_cache(revisions: dict[str, set[str]] | None = None, hf_home: str | None = None) -> dict[str, str]:
    """Write every stand-in under ``$HF_HOME/hub`` (idempotent), also at the ``revisions`` a recipe pins per hub id;
    returns hub id -> problem for those that failed."""
    root = Path(hf_home or os.environ["HF_HOME"]) / "hub"
    problems: dict[str, str] = {}
    for hub in STANDINS:
        repo = root / ("models--" + hub.replace("/", "--"))
        try:
            data, module = config_json(hub)
        except Exception as exc:  # a config class that cannot be built with its defaults
            problems[hub] = f"{type(exc).__name__}: {exc}"
            continue
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(REVISION)
        for rev in {REVISION, *(revisions or {}).get(hub, ())}:
            snap = repo / "snapshots" / rev
            snap.mkdir(parents=True, exist_ok=True)
            (snap / "config.json").write_text(json.dumps(data, indent=1, default=str))
            if module is not None:
                (snap / "configuration_standin.py").write_text(module)
    return problems

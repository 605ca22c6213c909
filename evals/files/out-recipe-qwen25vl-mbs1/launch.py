from megatron.bridge.recipes.qwen_vl.h100.qwen25_vl import qwen25_vl_7b_sft_2gpu_h100_bf16_config
from override import apply

cfg = qwen25_vl_7b_sft_2gpu_h100_bf16_config()
apply(cfg)

from megatron.bridge.recipes.gpt_oss.h100.gpt_oss import gpt_oss_20b_sft_8gpu_h100_bf16_config
from override import apply

cfg = gpt_oss_20b_sft_8gpu_h100_bf16_config()
apply(cfg)

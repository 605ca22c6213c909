from megatron.bridge.recipes.llama.h100.llama3 import llama3_8b_sft_2gpu_h100_bf16_config
from megatron.bridge.training.finetune import finetune
from megatron.bridge.training.gpt_step import forward_step

from override import apply

cfg = llama3_8b_sft_2gpu_h100_bf16_config()
apply(cfg)
finetune(cfg, forward_step)

"""Near-miss negatives: questions that share words with sequence packing but must not trigger the skill.

They cover pretraining-style document concatenation, generic padding and batching, other
frameworks' packing switches and configs, and other meanings of "pack". The checks ask for the
core of a correct answer to the actual question and forbid seqpack-specific advice
(``pad_seq_to_mult``, the packing switches, the tool itself). The one number computed here
(tokens per step, a DeepSpeed batch product) is plain arithmetic done in code.
"""

from __future__ import annotations

import json

from reference_impl.evaluation.checks import Checks, any_of, number, word
from reference_impl.evaluation.builder import GenContext, make_task

#: Advice that only makes sense for Megatron sequence packing.
SKILL_ONLY: tuple[str, ...] = (
    word("seqpack"),
    word("pad_seq_to_mult"),
    "re:enable_(?:offline|in_batch|global_batch)_packing",
)

NOT_TRIGGERED = "Answers directly without loading the Megatron sequence packing skill or its tools"

#: (id, prompt, reference answer, required checks, assertion).
NEAR_MISSES: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("nm-pretrain-concat",
     "In Megatron-LM GPT pretraining, how are documents of different lengths turned into fixed-length training "
     "samples? Do I need to pad them?",
     "Pretraining concatenates the tokenized documents into one stream, separated by an end-of-document (EOD) "
     "token, and cuts it into seq_length+1 windows through the sample index, so no padding is needed. Attention "
     "crosses document boundaries unless reset_attention_mask / reset_position_ids are set.",
     ("re:concatenat", "re:\\bEOD\\b|end[- ]of[- ](?:document|text)"),
     "Explains concatenation with an end-of-document token, no padding"),
    ("nm-pytorch-pad-sequence",
     "In plain PyTorch I have a list of variable-length tensors for an LSTM. How do I put them in one batch?",
     "Use torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True) to pad them, and pack_padded_sequence with the "
     "lengths so the LSTM skips the padding.",
     ("re:pad_sequence|pack_padded_sequence",), "Recommends pad_sequence / pack_padded_sequence"),
    ("nm-hf-dynamic-padding",
     "Fine-tuning BERT for text classification with the Hugging Face Trainer: how do I pad each batch only to its "
     "longest example instead of 512?",
     "Tokenize without padding and pass data_collator=DataCollatorWithPadding(tokenizer) to the Trainer; it pads "
     "each batch to its longest example (padding='longest').",
     ("re:DataCollatorWithPadding|padding\\s*=\\s*['\"]?longest",), "Recommends DataCollatorWithPadding"),
    ("nm-trl-packing",
     "With Hugging Face TRL's SFTTrainer, how do I switch on packing of short examples into full-length "
     "sequences?",
     "Set packing=True in SFTConfig (together with the maximum sequence length) and pass the config to "
     "SFTTrainer.",
     ("re:packing\\s*=\\s*True",), "Uses TRL's packing=True option"),
    ("nm-struct-pack",
     "How do I pack two unsigned 16-bit integers and a 32-bit float into bytes in Python, little-endian?",
     "Use struct.pack('<HHf', a, b, x); '<' is little-endian, H an unsigned 16-bit int, f a 32-bit float.",
     ("re:struct\\.pack", "re:<\\s?H\\s?H\\s?f"), "Uses struct.pack with the format '<HHf'"),
    ("nm-parcel-bin-packing",
     "What algorithm should I use to load parcels of different weights into as few 20 kg boxes as possible?",
     "This is the bin packing problem: sort the parcels by weight, heaviest first, and use first-fit decreasing or "
     "best-fit decreasing; an ILP or OR-Tools solver gives the exact optimum for small instances.",
     ("re:bin[- ]packing", "re:first[- ]fit|best[- ]fit"), "Names bin packing and first/best-fit decreasing"),
    ("nm-k8s-binpack",
     "How do I make the Kubernetes scheduler pack pods tightly onto as few nodes as possible?",
     "Configure the NodeResourcesFit plugin with scoringStrategy type MostAllocated (or "
     "RequestedToCapacityRatio) in a scheduler profile, so nodes that are already busy score higher.",
     ("re:MostAllocated|RequestedToCapacityRatio",), "Uses the MostAllocated scoring strategy"),
    ("nm-git-repack",
     "Our .git folder is several GB. How can I repack it to save space?",
     "Run git gc --aggressive --prune=now, or git repack -a -d --depth=250 --window=250, after removing large "
     "unreachable objects.",
     ("re:git (?:gc|repack)",), "Recommends git gc / git repack"),
    ("nm-webpack-bundle",
     "Our webpack bundle doubled in size. How do I find which modules are responsible?",
     "Generate stats with webpack --profile --json > stats.json and open them in webpack-bundle-analyzer (or use "
     "the BundleAnalyzerPlugin) to see module sizes.",
     ("re:webpack-bundle-analyzer|BundleAnalyzerPlugin|stats\\.json",), "Recommends a bundle analyzer"),
    ("nm-bert-stride",
     "Extractive QA with a BERT tokenizer: the contexts are longer than 512 tokens. How do I split them into "
     "overlapping windows?",
     "Call the tokenizer with truncation='only_second', max_length=384, stride=128, "
     "return_overflowing_tokens=True and return_offsets_mapping=True; each window becomes its own feature.",
     ("re:\\bstride\\b", "re:return_overflowing_tokens"), "Uses stride with return_overflowing_tokens"),
    ("nm-ulysses-heads",
     "DeepSpeed Ulysses sequence parallelism: what constraint is there on the number of attention heads?",
     "The number of attention heads must be divisible by the sequence-parallel degree, because Ulysses uses "
     "all-to-all to give each rank a subset of the heads over the full sequence.",
     ("re:divisible|multiple", "re:\\bheads?\\b"), "States the heads must be divisible by the SP degree"),
    ("nm-vllm-batching",
     "How does vLLM batch requests of very different lengths during inference?",
     "vLLM uses continuous (iteration-level) batching with PagedAttention: requests join and leave the running "
     "batch at every decoding step and their KV caches live in fixed-size blocks, so there is no padding to a "
     "common length.",
     ("re:continuous batching|iteration-level|PagedAttention",), "Explains continuous batching / PagedAttention"),
    ("nm-megatron-vocab-padding",
     "In Megatron-LM my embedding has more rows than the tokenizer's vocabulary. Why is the vocab size padded, "
     "and to what multiple?",
     "Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (default 128) times the "
     "tensor-parallel size, so the embedding splits evenly across TP ranks and the GEMMs stay aligned.",
     ("re:make[-_]vocab[-_]size[-_]divisible[-_]by",), "Explains make_vocab_size_divisible_by times TP"),
    ("nm-sort-by-length-inference",
     "I run a Hugging Face encoder over 100k sentences for embeddings. Any trick to make batched inference "
     "faster?",
     "Sort (or bucket) the sentences by length before batching so each batch pads to a similar length, use "
     "torch.inference_mode() and fp16/bf16, then restore the original order.",
     ("re:sort|bucket",), "Suggests sorting or bucketing by length"),
)


def _tokens_per_step_task(ctx: GenContext) -> None:
    gbs, seq = 1024, 4096
    total = gbs * seq
    checks = Checks().need(any_of(number(total), "re:4\\.19?\\s?M\\b")).ban(*SKILL_ONLY)
    ctx.add(make_task(
        "nm-pretrain-tokens-per-step", "near_miss",
        f"For GPT pretraining with a global batch size of {gbs} and a sequence length of {seq}, how many tokens "
        "does one optimizer step consume?",
        f"{gbs} x {seq} = {total} tokens per step (about 4.19M).",
        [f"Computes {total} tokens", NOT_TRIGGERED],
        checks,
        topics=["negative"],
        truth={"tokens_per_step": total},
    ))


def _deepspeed_task(ctx: GenContext) -> None:
    task_id = "nm-deepspeed-batch-config"
    gpus, micro, accum, declared = 4, 4, 2, 64
    product = micro * accum * gpus
    config = {
        "train_batch_size": declared,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "zero_optimization": {"stage": 2},
        "bf16": {"enabled": True},
    }
    rel = ctx.put_text(task_id, "ds_config.json", json.dumps(config, indent=2) + "\n")
    checks = Checks().need(number(product), word("train_batch_size")).ban(*SKILL_ONLY)
    ctx.add(make_task(
        task_id, "near_miss",
        f"DeepSpeed refuses to start with ds_config.json (in this directory) on {gpus} GPUs, complaining about the "
        "batch size. What is inconsistent?",
        f"train_batch_size must equal train_micro_batch_size_per_gpu x gradient_accumulation_steps x GPUs = "
        f"{micro} x {accum} x {gpus} = {product}, but it is {declared}. Set train_batch_size to {product} or double "
        "gradient_accumulation_steps.",
        [f"Shows {micro} x {accum} x {gpus} = {product} != {declared}", NOT_TRIGGERED],
        checks,
        files=[rel],
        topics=["negative"],
        truth={"product": product, "declared": declared},
    ))


def build(ctx: GenContext) -> None:
    """Add the near-miss tasks to ``ctx``."""
    for task_id, prompt, answer, required, assertion in NEAR_MISSES:
        checks = Checks().need(*required).ban(*SKILL_ONLY)
        ctx.add(make_task(task_id, "near_miss", prompt, answer, [assertion, NOT_TRIGGERED], checks,
                          topics=["negative"]))
    _tokens_per_step_task(ctx)
    _deepspeed_task(ctx)


__all__ = ["NEAR_MISSES", "SKILL_ONLY", "build"]

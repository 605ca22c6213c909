"""Near-miss negatives: questions that share words with sequence packing but must not trigger the skill.

They cover pretraining-style document concatenation, generic padding and batching, other
frameworks' packing switches and configs, and other meanings of "pack". The answer fields ask
for the core of a correct answer to the actual question (each with the plausible wrong answers as
other options) and every task forbids seqpack-specific advice (``pad_seq_to_mult``, the packing
switches, the tool itself). Their ground truth is general knowledge of the named libraries
(``source.kind = general``); the two numbers computed here are plain arithmetic done in code.
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from seqpack_evals import claims
from seqpack_evals.builder import GenContext, make_task
from seqpack_evals.fields import AnswerField, choice_field, int_field, yes_no_field

NOT_TRIGGERED = "Answers directly without loading the Megatron sequence packing skill or its tools"
GENERAL = {"kind": "general"}


def pick(name: str, value: str, options: Mapping[str, Sequence[str]], *, says: str = "") -> AnswerField:
    """A choice read from the whole answer (the spellings are specific enough to stand alone)."""
    return choice_field(name, value, options, anywhere=True, says=says or name, hint="<" + " | ".join(options) + ">")


#: (id, prompt, reference answer, answer fields, library the fact belongs to).
NEAR_MISSES: tuple[tuple[str, str, str, tuple[AnswerField, ...], str], ...] = (
    ("nm-pretrain-concat",
     "In Megatron-LM GPT pretraining, how are documents of different lengths turned into fixed-length training "
     "samples? Do I need to pad them?",
     "Pretraining concatenates the tokenized documents into one stream, separated by an end-of-document (EOD) "
     "token, and cuts it into seq_length+1 windows through the sample index, so no padding is needed. Attention "
     "crosses document boundaries unless reset_attention_mask / reset_position_ids are set.",
     (pick("separator", "EOD token", {"EOD token": (r"\bEOD\b", r"end[- ]of[- ](?:document|text)"),
                                      "padding token": (r"\bpad(?:ding)? tokens? between",),
                                      "BOS token": (r"\bBOS\b",)}, says="what separates documents"),
      yes_no_field("padding_needed", False,
                   [r"padding (?:is )?(?:needed|required)", r"(?:must|have to|need to) pad"],
                   [r"no padding(?: is)? (?:needed|required)", r"(?:don't|do not|doesn't|does not) need (?:to )?pad",
                    r"\bno need to pad\b", r"without (?:any )?padding"],
                   anywhere=True, says="padding is needed")),
     "Megatron-LM"),
    ("nm-pytorch-pad-sequence",
     "In plain PyTorch I have a list of variable-length tensors for an LSTM. How do I put them in one batch?",
     "Use torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True) to pad them, and pack_padded_sequence with the "
     "lengths so the LSTM skips the padding.",
     (pick("api", "pad_sequence", {"pad_sequence": (r"\bpad_sequence\b", r"\bpack_padded_sequence\b"),
                                   "DataCollatorWithPadding": (r"DataCollatorWithPadding",),
                                   "torch.stack": (r"torch\.stack\b",)}, says="the PyTorch utility"),),
     "PyTorch"),
    ("nm-hf-dynamic-padding",
     "Fine-tuning BERT for text classification with the Hugging Face Trainer: how do I pad each batch only to its "
     "longest example instead of 512?",
     "Tokenize without padding and pass data_collator=DataCollatorWithPadding(tokenizer) to the Trainer; it pads "
     "each batch to its longest example (padding='longest').",
     (pick("collator", "DataCollatorWithPadding", {
         "DataCollatorWithPadding": (r"DataCollatorWithPadding", r"padding\s*=\s*['\"]?longest"),
         "padding=max_length": (r"padding\s*=\s*['\"]max_length",), "packing=True": (r"packing\s*=\s*True",)},
         says="the Trainer option"),),
     "transformers"),
    ("nm-trl-packing",
     "With Hugging Face TRL's SFTTrainer, how do I switch on packing of short examples into full-length "
     "sequences?",
     "Set packing=True in SFTConfig (together with the maximum sequence length) and pass the config to "
     "SFTTrainer.",
     (pick("option", "packing=True", {"packing=True": (r"packing\s*=\s*True",),
                                      "group_by_length=True": (r"group_by_length\s*=\s*True",),
                                      "DataCollatorWithPadding": (r"DataCollatorWithPadding",)},
           says="the SFTConfig switch"),),
     "TRL"),
    ("nm-struct-pack",
     "How do I pack two unsigned 16-bit integers and a 32-bit float into bytes in Python, little-endian?",
     "Use struct.pack('<HHf', a, b, x); '<' is little-endian, H an unsigned 16-bit int, f a 32-bit float.",
     (pick("format", "<HHf", {"<HHf": (r"(?-i:<\s?H\s?H\s?f)",), ">HHf": (r"(?-i:>\s?H\s?H\s?f)",),
                              "<hhf": (r"(?-i:<\s?h\s?h\s?f)",), "<HHd": (r"(?-i:<\s?H\s?H\s?d)",)},
           says="the struct format string"),),
     "Python struct"),
    ("nm-parcel-bin-packing",
     "What algorithm should I use to load parcels of different weights into as few 20 kg boxes as possible?",
     "This is the bin packing problem: sort the parcels by weight, heaviest first, and use first-fit decreasing or "
     "best-fit decreasing; an ILP or OR-Tools solver gives the exact optimum for small instances.",
     (pick("problem", "bin packing", {"bin packing": (r"bin[- ]packing",), "knapsack": (r"\bknapsack\b",),
                                      "travelling salesman": (r"travell?ing salesman|\bTSP\b",)},
           says="the problem's name"),
      pick("heuristic", "first/best-fit decreasing", {
          "first/best-fit decreasing": (r"(?:first|best)[- ]fit decreasing", r"\bFFD\b", r"\bBFD\b"),
          "next fit": (r"\bnext[- ]fit\b(?! decreasing)",), "greedy by value": (r"value[- ]to[- ]weight",)},
          says="the heuristic")),
     "algorithms"),
    ("nm-k8s-binpack",
     "How do I make the Kubernetes scheduler pack pods tightly onto as few nodes as possible?",
     "Configure the NodeResourcesFit plugin with scoringStrategy type MostAllocated (or "
     "RequestedToCapacityRatio) in a scheduler profile, so nodes that are already busy score higher.",
     (pick("scoring_strategy", "MostAllocated", {
         "MostAllocated": (r"\bMostAllocated\b", r"\bRequestedToCapacityRatio\b"),
         "LeastAllocated": (r"\bLeastAllocated\b",), "BalancedAllocation": (r"\bBalancedAllocation\b",)},
         says="the NodeResourcesFit scoring strategy"),),
     "Kubernetes"),
    ("nm-git-repack",
     "Our .git folder is several GB. How can I repack it to save space?",
     "Run git gc --aggressive --prune=now, or git repack -a -d --depth=250 --window=250, after removing large "
     "unreachable objects.",
     (pick("command", "git gc / git repack", {"git gc / git repack": (r"git (?:gc|repack)",),
                                              "git clone --depth": (r"git clone --depth",),
                                              "git lfs": (r"git lfs",)}, says="the command"),),
     "git"),
    ("nm-webpack-bundle",
     "Our webpack bundle doubled in size. How do I find which modules are responsible?",
     "Generate stats with webpack --profile --json > stats.json and open them in webpack-bundle-analyzer (or use "
     "the BundleAnalyzerPlugin) to see module sizes.",
     (pick("tool", "bundle analyzer", {"bundle analyzer": (r"webpack-bundle-analyzer", r"BundleAnalyzerPlugin",
                                                           r"stats\.json"),
                                       "source maps only": (r"source-map-explorer",),
                                       "minifier": (r"TerserPlugin",)}, says="the tool"),),
     "webpack"),
    ("nm-bert-stride",
     "Extractive QA with a BERT tokenizer: the contexts are longer than 512 tokens. How do I split them into "
     "overlapping windows?",
     "Call the tokenizer with truncation='only_second', max_length=384, stride=128, "
     "return_overflowing_tokens=True and return_offsets_mapping=True; each window becomes its own feature.",
     (pick("overflow_option", "return_overflowing_tokens", {
         "return_overflowing_tokens": (r"return_overflowing_tokens",),
         "truncation only": (r"truncation\s*=\s*True(?![^.\n]*overflow)",),
         "pad_to_multiple_of": (r"pad_to_multiple_of",)}, says="the tokenizer option that keeps the overflow"),),
     "transformers"),
    ("nm-ulysses-heads",
     "DeepSpeed Ulysses sequence parallelism: what constraint is there on the number of attention heads?",
     "The number of attention heads must be divisible by the sequence-parallel degree, because Ulysses uses "
     "all-to-all to give each rank a subset of the heads over the full sequence.",
     (pick("constraint", "divisible by the SP degree", {
         "divisible by the SP degree": (r"(?:divisible by|multiple of)[^.\n]{0,50}(?:degree|parallel|size|ranks|GPUs)",),
         "equal to the SP degree": (r"heads[^.\n]{0,30}(?:equal|the same as)[^.\n]{0,30}(?:degree|parallel|size)",),
         "power of two": (r"power of (?:two|2)",)}, says="the constraint on the head count"),),
     "DeepSpeed"),
    ("nm-vllm-batching",
     "How does vLLM batch requests of very different lengths during inference?",
     "vLLM uses continuous (iteration-level) batching with PagedAttention: requests join and leave the running "
     "batch at every decoding step and their KV caches live in fixed-size blocks, so there is no padding to a "
     "common length.",
     (pick("technique", "continuous batching", {
         "continuous batching": (r"continuous batching", r"iteration-level", r"PagedAttention"),
         "static padded batches": (r"pads? (?:all|every|each) requests? to (?:the )?(?:same|longest|max)",),
         "sequence packing": (r"packs? (?:the )?requests? into (?:one|a single) (?:row|sequence)",)},
         says="how requests are batched"),),
     "vLLM"),
    ("nm-megatron-vocab-padding",
     "In Megatron-LM my embedding has more rows than the tokenizer's vocabulary. Why is the vocab size padded, "
     "and to what multiple by default?",
     "Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (default 128) times the "
     "tensor-parallel size, so the embedding splits evenly across TP ranks and the GEMMs stay aligned.",
     (int_field("default_divisor", 128, r"make[_-]vocab[_-]size[_-]divisible[_-]by\s*\(?default",
                r"\bdefaults? (?:to|of|is)?", says="default of make_vocab_size_divisible_by"),),
     "Megatron-LM"),
    ("nm-sort-by-length-inference",
     "I run a Hugging Face encoder over 100k sentences for embeddings. Any trick to make batched inference "
     "faster?",
     "Sort (or bucket) the sentences by length before batching so each batch pads to a similar length, use "
     "torch.inference_mode() and fp16/bf16, then restore the original order.",
     (pick("trick", "sort by length", {"sort by length": (r"\bsort\w*", r"\bbucket\w*"),
                                       "pad to max length": (r"pad (?:everything|all|every \w+) to (?:512|the max)",),
                                       "bigger batch only": (r"just (?:use|increase) (?:a )?(?:bigger|larger) batch",)},
           says="the trick"),),
     "transformers"),
    ("nm-flash-attn-varlen",
     "Outside Megatron, in a plain PyTorch model using the flash-attn library, how do I run attention over a "
     "batch of variable-length sequences without padding them?",
     "Concatenate the sequences and call flash_attn_varlen_func with cu_seqlens_q/cu_seqlens_k (cumulative "
     "lengths, int32) and max_seqlen_q/max_seqlen_k; the kernel keeps the sequences apart.",
     (pick("function", "flash_attn_varlen_func", {
         "flash_attn_varlen_func": (r"flash_attn_varlen_(?:qkvpacked_)?func",),
         "flash_attn_func": (r"flash_attn_func\b",),
         "scaled_dot_product_attention": (r"scaled_dot_product_attention",)}, says="the flash-attn function"),),
     "flash-attn"),
    ("nm-npm-pack",
     "How do I create the tarball of my npm package locally, to check what would be published, without "
     "publishing it?",
     "Run npm pack in the package folder (npm pack --dry-run lists the files without writing the tarball); it "
     "writes <name>-<version>.tgz.",
     (pick("command", "npm pack", {"npm pack": (r"\bnpm pack\b",), "npm publish": (r"\bnpm publish\b(?! --dry-run)",),
                                   "tar": (r"\btar -?c",)}, says="the command"),),
     "npm"),
    ("nm-tkinter-pack",
     "In Tkinter, what do pack() and grid() do, and can I use both in the same parent frame?",
     "Both are geometry managers: pack() stacks widgets along a side, grid() places them in rows and columns. Do "
     "not mix them in the same parent container; Tkinter will hang trying to satisfy both.",
     (yes_no_field("mix_in_same_parent", False,
                   [r"(?:can|may) (?:safely )?(?:mix|use both)", r"mixing (?:them )?is fine"],
                   [r"(?:do not|don't|never|cannot|can't|should not|shouldn't) mix", r"not (?:mix|use both)"],
                   anywhere=True, says="both can be used in one parent"),),
     "Tkinter"),
    ("nm-numpy-packbits",
     "In NumPy, how do I store an array of booleans compactly, eight flags per byte?",
     "Use numpy.packbits(flags) (bitorder='big' by default) and numpy.unpackbits to get them back.",
     (pick("function", "numpy.packbits", {"numpy.packbits": (r"\bpackbits\b",),
                                          "astype(uint8)": (r"astype\(\s*(?:np\.)?uint8",),
                                          "tobytes": (r"\btobytes\b",)}, says="the NumPy function"),),
     "NumPy"),
    ("nm-ddp-no-sync",
     "PyTorch DDP with gradient accumulation over 4 micro-batches: how do I avoid an all-reduce after every "
     "micro-batch?",
     "Wrap the first three backward passes in model.no_sync() and do the last one outside it, so gradients are "
     "all-reduced once per optimizer step.",
     (pick("context_manager", "no_sync", {"no_sync": (r"\bno_sync\b",),
                                          "torch.no_grad": (r"\bno_grad\b",),
                                          "find_unused_parameters": (r"find_unused_parameters",)},
           says="the DDP context manager"),),
     "PyTorch"),
    ("nm-hf-group-by-length",
     "With the Hugging Face Trainer, how can I put examples of similar length in the same batch to reduce "
     "padding, without concatenating them?",
     "Set group_by_length=True in TrainingArguments (optionally length_column_name); the sampler groups examples "
     "of similar length into batches.",
     (pick("option", "group_by_length=True", {"group_by_length=True": (r"group_by_length\s*=\s*True",),
                                              "packing=True": (r"packing\s*=\s*True",),
                                              "pad_to_multiple_of": (r"pad_to_multiple_of",)},
           says="the TrainingArguments switch"),),
     "transformers"),
    ("nm-megatron-preprocess",
     "In Megatron-LM, how do I turn a JSONL text corpus into the indexed binary dataset used for GPT "
     "pretraining, with documents separated?",
     "Run tools/preprocess_data.py with --input corpus.jsonl --output-prefix NAME --tokenizer-type ... "
     "--workers N and --append-eod, which writes NAME_text_document.bin/.idx with an end-of-document token "
     "after each document.",
     (pick("script", "tools/preprocess_data.py", {"tools/preprocess_data.py": (r"preprocess_data\.py",),
                                                  "prepare_packed_data": (r"prepare\w*packed\w*",),
                                                  "merge_datasets": (r"merge_datasets\.py",)}, says="the script"),
      pick("eod_flag", "--append-eod", {"--append-eod": (r"--append-eod",), "--split-sentences": (r"--split-sentences",),
                                        "--keep-newlines": (r"--keep-newlines",)},
           says="the flag that separates documents")),
     "Megatron-LM"),
    ("nm-gradient-checkpointing",
     "My Hugging Face model runs out of GPU memory during fine-tuning because of activations. What is the "
     "standard switch to trade compute for memory?",
     "Enable gradient checkpointing: model.gradient_checkpointing_enable() or gradient_checkpointing=True in "
     "TrainingArguments; activations are recomputed in the backward pass.",
     (pick("switch", "gradient checkpointing", {
         "gradient checkpointing": (r"gradient[_ ]checkpointing",),
         "packing": (r"\bpacking\s*=\s*True",), "group_by_length": (r"group_by_length",)},
         says="the switch"),),
     "transformers"),
    ("nm-docker-multistage",
     "Our Python service's Docker image is 3 GB. What is the standard way to make it smaller?",
     "Use a multi-stage build: install and build in a builder stage, copy only the runtime artifacts into a "
     "slim base image, and add a .dockerignore; pip install --no-cache-dir keeps caches out.",
     (pick("technique", "multi-stage build", {"multi-stage build": (r"multi-?stage",),
                                              "docker squash": (r"--squash",),
                                              "compress the image": (r"gzip|compress the image",)},
           says="the technique"),),
     "Docker"),
    ("nm-qwen-vl-max-pixels",
     "Running Qwen2-VL inference with Hugging Face transformers, high-resolution photos make the prompts very long. "
     "How do I cap the number of visual tokens per image?",
     "Pass max_pixels (and min_pixels) to the processor, e.g. AutoProcessor.from_pretrained(model_id, "
     "max_pixels=1280*28*28): each image is resized so its area stays within the bounds, and every 28x28 pixels "
     "become one visual token.",
     (pick("setting", "max_pixels", {"max_pixels": (r"\bmax_pixels\b",), "max_length": (r"\bmax_length\b",),
                                     "max_new_tokens": (r"\bmax_new_tokens\b",)},
           says="the processor setting"),),
     "transformers"),
    ("nm-llava-visual-tokens",
     "With LLaVA-1.5 (CLIP ViT-L/14 at 336 pixels), how many visual tokens does one image add to the language "
     "model's input?",
     f"{(336 // 14) ** 2}: the 336x336 image is cut into 14x14-pixel patches, a {336 // 14}x{336 // 14} grid, and "
     "every patch becomes one token after the projector (no merging).",
     (int_field("visual_tokens", (336 // 14) ** 2, r"(?:visual|image) tokens?", says="visual tokens per image"),),
     "LLaVA"),
)


def _tokens_per_step_task(ctx: GenContext) -> None:
    gbs, seq = 1024, 4096
    total = gbs * seq
    ctx.add(make_task(
        "nm-pretrain-tokens-per-step", "near_miss",
        f"For GPT pretraining with a global batch size of {gbs} and a sequence length of {seq}, how many tokens "
        "does one optimizer step consume?",
        f"{gbs} x {seq} = {total} tokens per step (about 4.19M).",
        [int_field("tokens_per_step", total, r"\btokens(?: per (?:optimizer )?step)?\b", r"=", rel_tolerance=0.002,
                   says="tokens per step")],
        claims.skill_only(),
        assertions=[NOT_TRIGGERED],
        topics=["negative"],
        truth={"tokens_per_step": total},
        source=GENERAL,
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
    ctx.add(make_task(
        task_id, "near_miss",
        f"DeepSpeed refuses to start with ds_config.json (in this directory) on {gpus} GPUs, complaining about the "
        "batch size. What is inconsistent, and what train_batch_size would be consistent?",
        f"train_batch_size must equal train_micro_batch_size_per_gpu x gradient_accumulation_steps x GPUs = "
        f"{micro} x {accum} x {gpus} = {product}, but the file declares {declared}. Set train_batch_size to "
        f"{product} or double gradient_accumulation_steps.",
        [int_field("train_batch_size", product, r"global batch", says="consistent train_batch_size")],
        claims.skill_only(),
        assertions=[f"Shows {micro} x {accum} x {gpus} = {product} != {declared}", NOT_TRIGGERED],
        files=[rel],
        topics=["negative"],
        truth={"product": product, "declared": declared},
        source=GENERAL,
    ))


def build(ctx: GenContext) -> None:
    """Add the near-miss tasks to ``ctx``."""
    for task_id, prompt, answer, fields, library in NEAR_MISSES:
        ctx.add(make_task(task_id, "near_miss", prompt, answer, fields, claims.skill_only(),
                          assertions=[NOT_TRIGGERED], topics=["negative"],
                          source={"kind": "general", "library": library}))
    _tokens_per_step_task(ctx)
    _deepspeed_task(ctx)


__all__ = ["NEAR_MISSES", "NOT_TRIGGERED", "build", "pick"]

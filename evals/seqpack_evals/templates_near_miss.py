"""Near-miss negatives: questions that share words with sequence packing but must not trigger the skill.

They cover pretraining-style document concatenation, generic padding and batching, other
frameworks' packing switches and configs, and other meanings of "pack". The answer fields ask
for the core of a correct answer to the actual question (each with the plausible wrong answers as
other options) and every task forbids seqpack-specific advice (``pad_seq_to_mult``, the packing
switches, the tool itself). Their ground truth is general knowledge of the named libraries
(``source.kind = general``). The questions, answers and fields are data (``evals/data/near_miss.yaml``);
the three tasks whose numbers are plain arithmetic are built here, with the arithmetic done in code.
"""

from __future__ import annotations

import json
from typing import Sequence

from seqpack.core.errors import UsageError
from seqpack_evals import claims, tables
from seqpack_evals.builder import GenContext, make_task
from seqpack_evals.fields import AnswerField, int_field

_FILE = "near_miss"
NOT_TRIGGERED: str = tables.table(_FILE, "assertion", str)
GENERAL = {"kind": "general"}


def add_near_miss(ctx: GenContext, task_id: str, prompt: str, answer: str, fields: Sequence[AnswerField],
                  library: str) -> None:
    """Add one near-miss task: general knowledge of ``library``, the skill must not be used."""
    ctx.add(make_task(task_id, "near_miss", prompt, answer, fields, claims.skill_only(), assertions=[NOT_TRIGGERED],
                      topics=["negative"], source={"kind": "general", "library": library}))


def add_table(ctx: GenContext, section: str) -> None:
    """Add the near-miss tasks of ``near_miss.yaml``'s ``section`` (``general`` or ``moe``), in its order."""
    for i, item in enumerate(tables.table(_FILE, section, list)):
        where = f"near_miss.yaml: {section}[{i}]"
        d = tables.entry(item, where, ("id", "library", "prompt", "answer", "fields"))
        where = f"near_miss.yaml: {d['id']}"
        if not isinstance(d["fields"], list) or not d["fields"]:
            raise UsageError(f"{where}: fields must be a non-empty list of field specs")
        fields = [tables.field_from_spec(f, where) for f in d["fields"]]
        add_near_miss(ctx, d["id"], d["prompt"], d["answer"], fields, d["library"])


def _llava_task(ctx: GenContext) -> None:
    image, patch = 336, 14
    grid = image // patch
    add_near_miss(
        ctx, "nm-llava-visual-tokens",
        "With LLaVA-1.5 (CLIP ViT-L/14 at 336 pixels), how many visual tokens does one image add to the language "
        "model's input?",
        f"{grid ** 2}: the {image}x{image} image is cut into {patch}x{patch}-pixel patches, a {grid}x{grid} grid, and "
        "every patch becomes one token after the projector (no merging).",
        [int_field("visual_tokens", grid ** 2, r"(?:visual|image) tokens?", says="visual tokens per image")],
        "LLaVA")


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
    """Add the near-miss tasks to ``ctx``: the table's, then those whose numbers are computed here."""
    add_table(ctx, "general")
    _llava_task(ctx)
    _tokens_per_step_task(ctx)
    _deepspeed_task(ctx)


__all__ = ["NOT_TRIGGERED", "add_near_miss", "add_table", "build"]

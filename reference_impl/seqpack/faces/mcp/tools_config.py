"""Light MCP tools: alignment, config validation, the rule registry, model-family support and image tokens.

Each tool parses its arguments into the verb's options and returns the verb's result
(:mod:`seqpack.verbs`). Nothing here imports numpy, torch or pyarrow.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from seqpack.core.choices import (
    BRIDGE_VERSIONS,
    DEFAULT_BRIDGE_VERSION,
    EXAMPLES,
    MROPE_MODELS,
    PACKING_PATHS,
    RULE_FAMILIES,
    SEVERITIES,
    TEXT_AFTER_VISION,
    VISION_PRESETS,
    literal,
)
from seqpack.config.validate import ValidationReport
from seqpack.core.limits import (
    DEFAULT_RULES_RETURNED,
    MAX_CONFIG_CHARS,
    MAX_OVERRIDE_CHARS,
    MAX_OVERRIDES,
    MAX_PARALLEL_SIZE,
    MAX_PATH_CHARS,
    MAX_QUERY_CHARS,
    MAX_RULES_RETURNED,
    MAX_VIDEO_FRAMES,
)
from seqpack.faces.mcp.registry import roots_of, tool
from seqpack.core.reports import ImageTokens, MRopeLayout
from seqpack.verbs.alignment import AlignmentReport, AlignOptions, align
from seqpack.verbs.rules import RuleQuery, RulesOptions, query_rules
from seqpack.verbs.support import ModelSupportOptions, ModelSupportReport, model_support
from seqpack.verbs.validation import ValidateOptions, validate
from seqpack.verbs.vision import ImageTokensOptions, MRopeOptions, image_tokens, mrope_positions

__all__ = ["check_model_support", "count_image_tokens", "derive_alignment", "explain_rule", "list_rules",
           "mrope_position_ids", "validate_config"]

ParallelSize = Annotated[int, Field(ge=1, le=MAX_PARALLEL_SIZE)]
FamilyName = literal(RULE_FAMILIES)
Severity = literal(SEVERITIES)
PathName = literal(PACKING_PATHS)
ExampleName = literal(EXAMPLES)
BridgeVersion = literal(BRIDGE_VERSIONS)
Override = Annotated[str, Field(min_length=3, max_length=MAX_OVERRIDE_CHARS, pattern=r"^[A-Za-z_][\w.]*=")]


@tool(title="Derive pad_seq_to_mult for TP/CP/SP")
def derive_alignment(
    tp: Annotated[ParallelSize, Field(description="tensor-parallel size")] = 1,
    cp: Annotated[ParallelSize, Field(description="context-parallel size")] = 1,
    sp: Annotated[bool, Field(description="sequence parallelism on")] = False,
    eval_cp: Annotated[ParallelSize | None, Field(description="a different CP size used for evaluation")] = None,
    token_slots: Annotated[int | None, Field(ge=1, description="also list pack length / global batch size pairs "
                                             "with this many token slots per step")] = None,
    pack_lengths: Annotated[list[Annotated[int, Field(ge=1)]] | None,
                            Field(max_length=16, description="candidate pack lengths (default 2048, 4096, 8192)")]
    = None,
    dp: Annotated[int | None, Field(ge=1, description="data-parallel size for the candidate check")] = None,
) -> AlignmentReport:
    """Per-sequence alignment multiple (pad_seq_to_mult) every packed sequence must have.

    pad_seq_to_mult = lcm(2*CP when CP>1, CP*TP when SP and TP>1) over the training and the
    evaluation CP size; the explanation shows each factor. Example: TP4/CP2/SP gives 8. With
    token_slots, pack_lengths or dp, candidates lists equal-token-slot pack length / global batch
    size pairs and whether DP allows them (else it is null).
    """
    return align(AlignOptions(tp=tp, cp=cp, sp=sp, eval_cp=eval_cp, token_slots=token_slots,
                              pack_lengths=None if pack_lengths is None else tuple(pack_lengths), dp=dp))


@tool(title="Validate a training config against the packing rules")
def validate_config(
    ctx: Context,
    config_text: Annotated[
        str | None, Field(description="the config as YAML or JSON text", max_length=MAX_CONFIG_CHARS)
    ] = None,
    path: Annotated[str | None, Field(description="a YAML/JSON config file inside an allowed root",
                                      max_length=MAX_PATH_CHARS)] = None,
    example: Annotated[ExampleName | None, Field(description="a bundled example config by name")] = None,
    overrides: Annotated[
        list[Override],
        Field(description="dotted overrides applied on top, e.g. 'dataset.enable_in_batch_packing=true'",
              max_length=MAX_OVERRIDES),
    ] = [],  # noqa: B006 - the SDK copies validated arguments per call
    bridge_version: Annotated[
        BridgeVersion,
        Field(description=f"the Megatron-Bridge the config is for: {DEFAULT_BRIDGE_VERSION} (the release the "
                          "upstream lane checks) or main (Bridge main, read but not checkable in the lane)"),
    ] = DEFAULT_BRIDGE_VERSION,
) -> ValidationReport:
    """Check a Megatron-Bridge-style training config against every packing rule.

    Give one of config_text, path or example (or none: the defaults), plus optional overrides.
    bridge_version selects the rules for that Megatron-Bridge: under the release, GPT-SFT in-batch,
    Energon native and global-batch packing are errors (no release has them).
    Returns ok, the violations and warnings (rule id, message naming the fields and values,
    fix), the resolved values (data-parallel size, pad_seq_to_mult, token slots per step) and
    the config that was checked. A config that breaks rules is a normal result (ok=false);
    a config that cannot be read (bad YAML, unknown key) is a tool error naming the line.
    """
    resolved = roots_of(ctx).resolve(path, field="path", kind="file") if path is not None else None
    return validate(ValidateOptions(path=resolved, config_text=config_text, example=example,
                                    overrides=tuple(overrides), bridge_version=bridge_version))


@tool(title="Explain a packing rule")
def explain_rule(
    query: Annotated[str, Field(description="a rule id (e.g. PACK-OFFLINE-MBS1) or keywords (e.g. 'cuda graph')",
                                min_length=1, max_length=MAX_QUERY_CHARS)],
    limit: Annotated[int, Field(ge=1, le=MAX_RULES_RETURNED, description="most rules returned for a keyword query")]
    = DEFAULT_RULES_RETURNED,
) -> RuleQuery:
    """Explain one rule by id, or the rules whose id, title, fields or fix mention all the keywords.

    Each rule comes with its severity, provenance and source, the fix, and an example config
    (dotted overrides) that breaks it plus the overrides that fix it.
    """
    return query_rules(RulesOptions(query=query, limit=limit))


@tool(title="List the packing rules")
def list_rules(
    family: Annotated[FamilyName | None, Field(description="only this rule family")] = None,
    severity: Annotated[Severity | None, Field(description="only this severity")] = None,
) -> RuleQuery:
    """Every rule of the registry (or one family / severity): id, severity, family, provenance, title.

    Use explain_rule for the fix and an example of a rule.
    """
    return query_rules(RulesOptions(family=family, severity=severity, detail="summary"))


@tool(title="Check a model family's packing support")
def check_model_support(
    family: Annotated[str, Field(description="model family id or alias, e.g. qwen3_next, llama3, gemma3_vl",
                                 min_length=1, max_length=MAX_QUERY_CHARS)],
    path: Annotated[PathName | None, Field(description="one packing path; every path when omitted")] = None,
) -> ModelSupportReport:
    """Recorded support of a model family for each packing path, from Megatron-Bridge recipes.

    Status: supported, opt_out (a recipe turns the path off), caveat (allowed with a known
    limitation) or unknown (no record: verify with a smoke test before a long run); evidence
    names the recipe or file the record comes from.
    """
    return model_support(ModelSupportOptions(family=family, path=path))


@tool(title="Count the tokens of an image or video in a Qwen-VL sample")
def count_image_tokens(
    height: Annotated[int, Field(ge=1, description="image height in pixels")],
    width: Annotated[int, Field(ge=1, description="image width in pixels")],
    frames: Annotated[int, Field(ge=1, le=MAX_VIDEO_FRAMES, description="frames of a video (1: an image)")] = 1,
    vision: Annotated[literal(VISION_PRESETS),  # type: ignore[valid-type]
                      Field(description="vision preset (qwen2_vl, qwen2_5_vl: patch 14, merge 2)")] = "qwen2_vl",
) -> ImageTokens:
    """How an image (or frames of one size) becomes patches and language-model tokens, as the Qwen2-VL
    processor does: resized size, (t, h, w) grid, patch rows and tokens (t*h*w / merge**2; +2 for the
    vision start and end tokens in a sample). Packed VLM samples align these tokens with the text."""
    return image_tokens(ImageTokensOptions(height=height, width=width, frames=frames, vision=vision))


@tool(title="Multimodal RoPE position ids of a Qwen-VL layout")
def mrope_position_ids(
    layout: Annotated[str, Field(description="sequences separated by |, each a comma-separated list of text:N, "
                                 "image:1xHxW, video:TxHxW[@seconds], e.g. 'text:3,image:1x4x6,text:2|text:5'",
                                 min_length=1, max_length=MAX_CONFIG_CHARS)],
    merge_size: Annotated[int, Field(ge=1, le=64, description="spatial merge size")] = 2,
    model: Annotated[literal(MROPE_MODELS),  # type: ignore[valid-type]
                     Field(description="qwen2_vl (temporal interval 1) or qwen2_5_vl")] = "qwen2_vl",
    tokens_per_second: Annotated[float, Field(gt=0, le=1000, description="qwen2_5_vl's tokens_per_second")] = 2.0,
    text_after_vision: Annotated[literal(TEXT_AFTER_VISION),  # type: ignore[valid-type]
                                 Field(description="max (Qwen code, transformers < 5.3) or spatial (>= 5.3)")]
    = "max",
    pad_seq_to_mult: Annotated[int, Field(ge=1, le=65536, description="alignment of each packed sequence")] = 1,
) -> MRopeLayout:
    """(temporal, height, width) position ids of text, images and videos as Qwen2-VL/Qwen2.5-VL's get_rope_index
    computes them; several sequences are packed into one THD row and each restarts at (0, 0, 0). Every image
    and video is wrapped in vision start/end tokens. Blocks give each item's offsets and first/last ids."""
    return mrope_positions(MRopeOptions(layout=layout, merge_size=merge_size, model=model,
                                        tokens_per_second=tokens_per_second, text_after_vision=text_after_vision,
                                        pad_seq_to_mult=pad_seq_to_mult))

"""``model_support``: a model family's recorded support for each packing path (Megatron-Bridge recipes)."""

from __future__ import annotations

from dataclasses import dataclass

from seqpack.config.model_support import ModelSupport, check_model_support
from seqpack.core.choices import PACKING_PATHS
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_QUERY_CHARS
from seqpack.core.results import Result
from seqpack.core.textfmt import text_table
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options

__all__ = ["MODEL_SUPPORT", "ModelSupportOptions", "ModelSupportReport", "model_support", "render_model_support"]


@verb_options
class ModelSupportOptions:
    """A model family id or alias (``qwen3_next``, ``Llama-3`` ...) and optionally one packing path."""

    family: str = option(help="model family id or alias, e.g. qwen3_next, llama3, gemma3_vl", positional=True,
                         min_length=1, max_length=MAX_QUERY_CHARS)
    path: str | None = option(None, help="one packing path (default: every path)", choices=PACKING_PATHS,
                              label="packing path", metavar="PATH")


@dataclass(frozen=True)
class ModelSupportReport(Result):
    """Support per packing path (status: supported, opt_out, caveat or unknown) with the evidence."""

    query: str
    known_family: bool
    results: list[ModelSupport]


def model_support(options: ModelSupportOptions) -> ModelSupportReport:
    """Look the family up (:func:`seqpack.config.model_support.check_model_support`)."""
    check_options(options)
    family = options.family
    if not family.strip():
        raise UsageError(f"family must be a model family name of 1 to {MAX_QUERY_CHARS} characters", field="family")
    results = check_model_support(family, options.path)
    return ModelSupportReport(query=family, known_family=results[0].known_family, results=results)


def render_model_support(report: ModelSupportReport, options: ModelSupportOptions) -> str:
    """The CLI's text: the support table."""
    known = "known family" if report.known_family else "no record for this family (verify with `seqpack smoke`)"
    return "\n".join([f"{report.query}: {known}",
                      text_table(["path", "status", "note", "evidence"],
                                 [[r.path, r.status, r.note, r.evidence or "-"] for r in report.results])])


MODEL_SUPPORT = Verb(
    name="model_support", options=ModelSupportOptions, function=model_support, render=render_model_support,
    help="recorded packing support of a model family (from Megatron-Bridge recipes) per packing path",
    tools=(Tool(
        "check_model_support", title="Check a model family's packing support",
        description="""Recorded support of a model family for each packing path, from Megatron-Bridge recipes.

Status: supported, opt_out (a recipe turns the path off), caveat (allowed with a known
limitation) or unknown (no record: verify with a smoke test before a long run); evidence
names the recipe or file the record comes from.""",
    ),),
)

"""``model_support``: a model family's recorded support for each packing path (Megatron-Bridge recipes)."""

from __future__ import annotations

from dataclasses import dataclass

from seqpack.core.choices import PACKING_PATHS
from seqpack.config.model_support import ModelSupport, check_model_support
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_QUERY_CHARS
from seqpack.core.results import Result
from seqpack.verbs.common import check_choice

__all__ = ["ModelSupportOptions", "ModelSupportReport", "model_support"]


@dataclass(frozen=True, kw_only=True)
class ModelSupportOptions:
    """A model family id or alias (``qwen3_next``, ``Llama-3`` ...) and optionally one packing path."""

    family: str
    path: str | None = None


@dataclass(frozen=True)
class ModelSupportReport(Result):
    """Support per packing path (status: supported, opt_out, caveat or unknown) with the evidence."""

    query: str
    known_family: bool
    results: list[ModelSupport]


def model_support(options: ModelSupportOptions) -> ModelSupportReport:
    """Look the family up (:func:`seqpack.config.model_support.check_model_support`)."""
    family = options.family
    if not isinstance(family, str) or not family.strip() or len(family) > MAX_QUERY_CHARS:
        raise UsageError(f"family must be a model family name of 1 to {MAX_QUERY_CHARS} characters", field="family")
    check_choice("packing path", options.path, PACKING_PATHS, allow_none=True)
    results = check_model_support(family, options.path)
    return ModelSupportReport(query=family, known_family=results[0].known_family, results=results)

"""The verbs: one library function per verb, each taking a typed options dataclass.

A verb resolves topology, alignment and limits itself and returns a result dataclass
(:class:`~seqpack.core.results.Result`); the CLI subcommand and the MCP tool of the verb only
parse their input into the options and print or return the result. ``tests/test_parity.py`` runs
every verb through the three faces on the same inputs.

==========================  ==============================  ===================  =====================
verb                        options                         CLI                  MCP tool(s)
==========================  ==============================  ===================  =====================
``align``                   :class:`AlignOptions`           ``align``            derive_alignment
``validate``                :class:`ValidateOptions`        ``validate``         validate_config
``query_rules``             :class:`RulesOptions`           ``rules``            explain_rule, list_rules
``plan``                    :class:`PlanOptions`            ``plan``             plan_pack_length
``simulate_packing``        :class:`SimulateOptions`        ``simulate``         simulate_packing
``pack``                    :class:`PackOptions`            ``pack``             pack_dataset
``inspect_packs``           :class:`InspectOptions`         ``inspect``          inspect_packed_dataset
``batches``                 :class:`BatchesOptions`         ``batches``          inspect_batches
``energon_prepare``         :class:`EnergonPrepareOptions`  ``energon-prepare``  prepare_energon_dataset
``smoke``                   :class:`SmokeOptions`           ``smoke``            run_packing_smoke_test
``model_support``           :class:`ModelSupportOptions`    ``model-support``    check_model_support
``image_tokens``            :class:`ImageTokensOptions`     ``image-tokens``     count_image_tokens
``mrope_positions``         :class:`MRopeOptions`           ``mrope``            mrope_position_ids
==========================  ==============================  ===================  =====================

Importing this package is cheap: each name is loaded from its module on first use. The modules
are named for what they hold (``verbs.planning`` holds ``plan``), never like the verb, so a
module never shadows its function.
"""

from __future__ import annotations

from seqpack.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "TopologyOptions": "common", "AlignedOptions": "common",
    "AlignOptions": "alignment", "AlignmentReport": "alignment", "align": "alignment",
    "ValidateOptions": "validation", "validate": "validation",
    "RulesOptions": "rules", "RuleQuery": "rules", "query_rules": "rules",
    "PlanOptions": "planning", "plan": "planning",
    "SimulateOptions": "simulation", "PackingSimulation": "simulation", "SimulatedBin": "simulation",
    "simulate_packing": "simulation",
    "PackOptions": "packing", "pack": "packing",
    "InspectOptions": "inspection", "inspect_packs": "inspection",
    "BatchesOptions": "batch_views", "batches": "batch_views",
    "EnergonPrepareOptions": "energon", "energon_prepare": "energon",
    "SmokeOptions": "smoke_test", "smoke": "smoke_test",
    "ModelSupportOptions": "support", "ModelSupportReport": "support", "model_support": "support",
    "ImageTokensOptions": "vision", "image_tokens": "vision", "MRopeOptions": "vision",
    "mrope_positions": "vision",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

"""The MCP output schemas (TypedDicts) name exactly the keys the library results' to_dict() produce.

The schemas are published to clients; this keeps them from drifting away from the results they describe.
"""

from typing import get_type_hints

import pytest

from reference_impl.mcp_support import outputs


def _keys(typed_dict) -> set[str]:
    return set(get_type_hints(typed_dict))


def _results():
    from reference_impl.alignment import derive_alignment
    from reference_impl.config import validate_config
    from reference_impl.config.model_support import check_model_support
    from reference_impl.planning import plan_pack_length
    from reference_impl.smoke import Check

    report = validate_config(None, [("train.micro_batch_size", 2), ("dataset.enable_offline_packing", True),
                                    ("dataset.offline_packing_specs.packed_sequence_size", 2048)])
    plan = plan_pack_length([5, 3, 3, 2, 7], candidates=(8, 16), token_slots=32).to_dict()
    yield outputs.AlignmentOut, derive_alignment(2, 2, True).to_dict()
    yield outputs.ValidationOut, report.to_dict()
    yield outputs.FindingOut, report.violations[0].to_dict()
    yield outputs.PlanOut, plan
    yield outputs.PlanRowOut, plan["rows"][0]
    yield outputs.SupportOut, check_model_support("qwen3_next", "offline")[0].to_dict()
    yield outputs.SmokeCheckOut, Check("x", True, 1, 0, "m").to_dict()
    from reference_impl.inspect import InspectReport
    from reference_impl.smoke import SmokeReport

    yield outputs.SmokeOut, SmokeReport("offline", True, [], {}, {}, {}).to_dict()
    yield outputs.InspectOut, InspectReport("p", [], True, [], 0, {}, {}).to_dict()


@pytest.mark.parametrize("schema, result", list(_results()), ids=lambda v: getattr(v, "__name__", ""))
def test_schema_keys_match_the_result(schema, result):
    assert _keys(schema) == set(result), (sorted(_keys(schema) ^ set(result)))

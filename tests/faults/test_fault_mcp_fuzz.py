"""No argument an MCP client sends reaches an unexpected exception: every tool fuzzed with hypothesis.

Arguments are drawn per tool from its published input schema (property names) with hostile JSON
values: numbers at and beyond the bounds, booleans, nulls, strings that are paths to hostile files
(inside the allowed root) or escapes, lists and objects. Every call must end as a normal result or
as a tool error whose text is one line with its reason, never ``internal error`` or a traceback.
``run_packing_smoke_test`` is left out (seconds per call; its arguments are fuzzed through the
CLI's ``smoke``).
"""

from __future__ import annotations

import json

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from seqpack.faces.mcp.server import build_server

pytestmark = pytest.mark.slow

SKIP = {"run_packing_smoke_test"}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcpfuzz")
    (root / "good.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n"
                                             for i in range(24)))
    (root / "bad.jsonl").write_text('{"prompt": "\\ud800", "completion": 1}\n[2]\n')
    (root / "bomb.yaml").write_text("a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n"
                                    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c]\n"
                                    "e: [*d,*d,*d,*d,*d,*d,*d,*d]\n")
    (root / "noise.idx.parquet").write_bytes(bytes(range(256)))
    (root / "tokenizer.json").write_text("{}")
    return root


@pytest.fixture(scope="module")
def schemas(root):
    async def list_tools():
        async with Client(build_server([root])) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    return anyio.run(list_tools)


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from([0, -1, 1, 2, 8, 256, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e308, -0.0, 0.5]),
    st.sampled_from(["", "good.jsonl", "bad.jsonl", "bomb.yaml", "noise.idx.parquet", "tokenizer.json", ".",
                     "..", "../../etc/passwd", "/", "out", "a=b", "model.seq_length=", "PACK-OFFLINE-MBS1", "llama3",
                     "offline", "lognormal", "right", "auto", "chat", "\udcff", "x" * 300]),
    st.text(max_size=8),
)
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=4),
                    st.dictionaries(st.sampled_from(["512", "1", "0", "-3", "x", "99999999999999999999999"]),
                                    _SCALARS, max_size=3))


_PATHS = ["good.jsonl", "bad.jsonl", "bomb.yaml", "noise.idx.parquet", "tokenizer.json", "out", ".", "../x"]


def _plausible(prop: dict) -> st.SearchStrategy:
    """A value the schema accepts (mostly), so the fuzz gets past validation into the verbs."""
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    if "anyOf" in prop:
        return st.one_of([_plausible(p) for p in prop["anyOf"]])
    kind = prop.get("type")
    if kind == "integer":
        low = prop.get("minimum", 0)
        return st.integers(low, max(low, min(prop.get("maximum", 4096), 4096)))
    if kind == "number":
        return st.floats(0.01, 5.0)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return st.sampled_from(_PATHS + ["model.context_parallel_size=2", "llama3", "PACK-OFFLINE-MBS1"])
    if kind == "array":
        return st.lists(_plausible(prop.get("items", {"type": "integer"})), min_size=1, max_size=3)
    if kind == "object":
        return st.dictionaries(st.sampled_from(["128", "512", "4096"]), st.integers(0, 50), min_size=1, max_size=3)
    return st.none()


def _value(prop: dict) -> st.SearchStrategy:
    return st.integers(0, 11).flatmap(lambda k: _VALUES if k == 0 else _plausible(prop))


@pytest.mark.parametrize("tool", ["derive_alignment", "validate_config", "explain_rule", "list_rules",
                                  "check_model_support", "plan_pack_length", "simulate_packing", "pack_dataset",
                                  "inspect_packed_dataset", "inspect_in_batch", "inspect_global_batch",
                                  "prepare_energon_dataset", "server_info"])
def test_no_argument_reaches_an_unexpected_exception(tool, root, schemas):
    props = schemas[tool].get("properties", {})
    required = schemas[tool].get("required", [])
    server = build_server([root])  # one server per tool (building one costs more than a call); a session per example

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(args=st.fixed_dictionaries({k: _value(props[k]) for k in required},
                                      optional={k: _value(p) for k, p in props.items() if k not in required}))
    def fuzz(args: dict) -> None:
        async def call():
            async with Client(server) as client:
                return await client.call_tool(tool, args)

        result = anyio.run(call)
        text = result.content[0].text if result.content else ""
        assert "internal error" not in text and "Traceback" not in text, (args, text)
        if result.is_error:
            assert text.startswith(f"Error executing tool {tool}: ") and len(text) > len(f"Error executing tool {tool}: ")

    fuzz()

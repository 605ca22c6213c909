"""A verb is declared once: every declared option reaches the CLI and the MCP schema, with its limits.

The CLI subcommands and the MCP tools are generated from the verbs' declarations
(``seqpack.verbs.declare``); these tests read the generated argparse actions and the published input
schemas back and compare them with the field metadata, check the one value check at the verb
boundary, the deprecated spellings of renamed options, strict MCP arguments, and that a new verb is a
declaration plus one registry entry (with negative controls: a dropped flag, a dropped schema property
and a changed limit are all noticed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from seqpack import verbs
from seqpack.core.errors import UsageError
from seqpack.faces.cli import build_parser, main
from seqpack.faces.mcp.server import build_server
from seqpack.verbs.declare import OptionField, Tool, Verb, check_options, fields_of, option, verb_options

#: Fields no face offers, on purpose (a mapping or a callable only a Python caller can pass, or a value MCP
#: derives from the tool's time limit). A new field must reach a face or be added here.
LIBRARY_ONLY = {
    ("validate", "config"), ("smoke", "config"), ("smoke", "model"), ("smoke", "progress"),
    ("smoke", "cp_max_batches"), ("smoke", "cp_timeout"),
}


@pytest.fixture(scope="module")
def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return dict(action.choices)


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    async def listed() -> dict[str, dict[str, Any]]:
        async with Client(build_server([Path.cwd()], skill_dir=None)) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    return anyio.run(listed)


def _value_schema(prop: dict[str, Any]) -> dict[str, Any]:
    """The schema of a property's value (the non-null branch of an optional one)."""
    if "anyOf" in prop:
        return next(s for s in prop["anyOf"] if s.get("type") != "null")
    return prop


def _cli_gaps(f: OptionField, sub: argparse.ArgumentParser) -> list[str]:
    actions = [a for a in sub._actions if a.dest == f.name]  # noqa: SLF001
    if not f.opt.cli:
        return [f"--{f.name} is offered although declared cli=False"] if actions else []
    if len(actions) != 1:
        return [f"{f.name}: no CLI argument"]
    action, gaps = actions[0], []
    if f.opt.positional:
        if action.option_strings:
            gaps.append(f"{f.name}: declared positional, is a flag")
    elif action.option_strings[:1] != [f.cli_flag] or action.option_strings[1:] != list(f.cli_aliases):
        gaps.append(f"{f.name}: flags {action.option_strings}, declared {[f.cli_flag, *f.cli_aliases]}")
    choices = f.opt.cli_choices if f.opt.cli_choices is not None else f.opt.choices if f.opt.check_choices else None
    if (tuple(action.choices) if action.choices is not None else None) != (
            tuple(choices) if choices is not None else None):
        gaps.append(f"{f.name}: CLI choices {action.choices} differ from the declared ones")
    if f.required and not f.opt.positional and not action.required and f.opt.exclusive is None:
        gaps.append(f"{f.name}: required, the CLI does not require it")
    return gaps


def _limit_gaps(f: OptionField, prop: dict[str, Any], tool: Tool) -> list[str]:
    opt, value, gaps = f.opt, _value_schema(prop), []
    if opt.choices is not None and tuple(value.get("enum", ())) != tuple(opt.choices):
        gaps.append(f"{tool.name}.{f.mcp_name}: enum {value.get('enum')} differs from {tuple(opt.choices)}")
    wanted = {}
    if f.kind in ("int", "float") and opt.choices is None:
        wanted = {("exclusiveMinimum" if opt.exclusive_minimum else "minimum"): opt.minimum,
                  ("exclusiveMaximum" if opt.exclusive_maximum else "maximum"): opt.maximum}
    elif f.kind in ("int_list", "str_list", "mapping"):
        wanted = {"minItems" if f.kind != "mapping" else "minProperties": opt.min_items,
                  "maxItems" if f.kind != "mapping" else "maxProperties": opt.max_items}
        if f.kind == "int_list":
            item = value.get("items", {})
            for key, want in (("minimum", opt.item_minimum), ("maximum", opt.item_maximum)):
                if want is not None and item.get(key) != want:
                    gaps.append(f"{tool.name}.{f.mcp_name}: items {key} {item.get(key)}, declared {want}")
    elif f.kind == "str" and opt.choices is None and opt.path is None:
        wanted = {"maxLength": opt.max_length}
    for key, want in wanted.items():
        if want is not None and value.get(key) != want:
            gaps.append(f"{tool.name}.{f.mcp_name}: {key} {value.get(key)}, declared {want}")
    return gaps


def _mcp_gaps(f: OptionField, verb: Verb, schemas: dict[str, dict[str, Any]]) -> list[str]:
    gaps = []
    offered = [t for t in verb.tools if f.mcp_name in schemas[t.name]["properties"]]
    if not f.opt.mcp:
        return [f"{t.name} offers {f.mcp_name} although declared mcp=False" for t in offered]
    for tool in verb.tools:
        takes = f.name in tool.field_names(verb.options)
        if takes != (tool in offered):
            gaps.append(f"{tool.name}: {f.mcp_name} {'missing from' if takes else 'in'} the schema")
        if takes and tool in offered:
            prop = schemas[tool.name]["properties"][f.mcp_name]
            if f.opt.help not in prop.get("description", ""):
                gaps.append(f"{tool.name}.{f.mcp_name}: description is not the declared help")
            gaps += _limit_gaps(f, prop, tool)
    if not offered and not any(f.name in t.fixed or f.name in t.exclude for t in verb.tools):
        gaps.append(f"{verb.name}.{f.name}: no MCP tool takes it and none says why (fixed or excluded)")
    return gaps


def face_gaps(verb: Verb, sub: argparse.ArgumentParser, schemas: dict[str, dict[str, Any]]) -> list[str]:
    """Where the generated CLI or MCP schema does not say what ``verb``'s declaration says."""
    gaps = []
    for f in fields_of(verb.options):
        if not f.opt.cli and not f.opt.mcp and (verb.name, f.name) not in LIBRARY_ONLY:
            gaps.append(f"{verb.name}.{f.name} reaches no face and is not listed as library-only")
        gaps += _cli_gaps(f, sub) + _mcp_gaps(f, verb, schemas)
    for tool in verb.tools:
        if schemas[tool.name].get("additionalProperties") is not False:
            gaps.append(f"{tool.name}: its schema admits unknown arguments")
    return gaps


def test_every_option_reaches_both_faces_with_its_limits(subparsers, schemas):
    found = {name: face_gaps(verb, subparsers[name], schemas) for name, verb in verbs.commands().items()}
    assert found == {name: [] for name in verbs.VERB_SPECS}
    assert {t for v in verbs.VERBS for t in (x.name for x in v.tools)} == set(schemas) - {"server_info"}


def test_a_missing_flag_property_or_limit_is_noticed(subparsers, schemas):
    """Negative controls: the same check on a parser without one flag and on schemas with a property dropped and
    a limit changed."""
    plan = next(v for v in verbs.VERBS if v.name == "plan")
    sub = argparse.ArgumentParser()
    for action in subparsers["plan"]._actions:  # noqa: SLF001 - a copy without --token-slots
        if action.dest not in ("help", "token_slots"):
            sub._add_action(action)  # noqa: SLF001
    assert "token_slots: no CLI argument" in face_gaps(plan, sub, schemas)

    broken = json.loads(json.dumps(schemas))
    del broken["plan_pack_length"]["properties"]["max_len"]
    broken["plan_pack_length"]["properties"]["dp"]["maximum"] = 7
    gaps = face_gaps(plan, subparsers["plan"], broken)
    assert "plan_pack_length: max_len missing from the schema" in gaps
    assert any(g.startswith("plan_pack_length.dp: maximum 7") for g in gaps)


def test_the_boundary_check_refuses_what_the_schema_publishes():
    """The library refuses a value just past a declared limit with the message the CLI and MCP give."""
    from seqpack.core import limits

    cases = [
        (verbs.PlanOptions(lengths=[5], dp=limits.MAX_DATA_PARALLEL_SIZE + 1), "dp=", "dp"),
        (verbs.AlignOptions(tp=limits.MAX_PARALLEL_SIZE + 1), "tp=", "tp"),
        (verbs.SimulateOptions(lengths=[1], pack_size=2, max_bins=-1), "max_bins must be an integer >= 0", "max_bins"),
        (verbs.RulesOptions(family="nope"), "unknown rule family 'nope'", "family"),
        (verbs.MRopeOptions(layout="text:1", tokens_per_second=float("inf")), "finite number above 0",
         "tokens_per_second"),
        (verbs.EnergonPrepareOptions(input="a.jsonl", out="o", val_fraction=1.0), "val_fraction must be below 1",
         "val_fraction"),
        (verbs.PlanOptions(candidates=tuple(range(1, 18))), "the limit is 16", "candidates"),
        (verbs.ValidateOptions(overrides=("a=1",) * (limits.MAX_OVERRIDES + 1)), "the limit is", "overrides"),
        (verbs.PackOptions(input="a.jsonl", out="", pack_size=8), "out must be a file path", "out"),
    ]
    for options, needle, field in cases:
        with pytest.raises(UsageError, match=needle) as caught:
            check_options(options)
        assert caught.value.field == field
    check_options(verbs.PlanOptions(lengths=[5]))  # a valid value passes


def test_renamed_options_are_accepted_for_one_release(capsys, tmp_path):
    with pytest.warns(DeprecationWarning, match=r"capacity=\.\.\.\) is deprecated; use pack_size="):
        options = verbs.SimulateOptions(lengths=[5, 3], capacity=8)
    assert options.pack_size == 8
    with pytest.raises(UsageError, match="give pack_size or its old name capacity"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        verbs.SimulateOptions(lengths=[5, 3], capacity=8, pack_size=8)

    assert main(["simulate", "--lengths", "5,3", "--capacity", "8", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["stats"]["pack_size"] == 8
    assert out.err.strip() == ("seqpack simulate: warning: --capacity is deprecated; use --pack-size (the old "
                               "spelling goes in the next release)")
    assert main(["align", "--pack-lengths", "4096", "--json"]) == 0
    out = capsys.readouterr()
    assert [c["pack_size"] for c in json.loads(out.out)["candidates"]] == [4096] and "--pack-sizes" in out.err

    async def call() -> Any:
        async with Client(build_server([tmp_path], skill_dir=None)) as client:
            return await client.call_tool("simulate_packing", {"lengths": [5, 3], "capacity": 8})

    result = anyio.run(call)
    assert not result.is_error and result.structured_content["stats"]["pack_size"] == 8
    assert result.content[-1].text.startswith("warning: the argument 'capacity' is deprecated; use 'pack_size'")
    # the old result keys stay beside the new ones for the same release
    assert result.structured_content["stats"]["capacity"] == 8


def test_an_unknown_mcp_argument_names_the_closest_one(tmp_path):
    async def call(args: dict[str, Any]) -> Any:
        async with Client(build_server([tmp_path], skill_dir=None)) as client:
            return await client.call_tool("plan_pack_length", args)

    result = anyio.run(call, {"lengths": [5, 3], "token_slot": 64})
    assert result.is_error and "unknown argument 'token_slot'; did you mean 'token_slots'?" in result.content[0].text
    assert not anyio.run(call, {"lengths": [5, 3], "token_slots": 64}).is_error


# ------------------------------------------------------------------------------------------------
# A new verb: one declaration, one registry entry
# ------------------------------------------------------------------------------------------------


@verb_options
class _EchoOptions:
    """A toy verb's options."""

    text: str = option(help="what to echo", positional=True, max_length=20)
    times: int = option(1, help="how often", minimum=1, maximum=3)


@dataclasses.dataclass(frozen=True)
class _Echo:
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text}


def _echo(options: _EchoOptions) -> _Echo:
    check_options(options)
    return _Echo(" ".join([options.text] * options.times))


_ECHO = Verb(name="echo", options=_EchoOptions, function=_echo, help="echo a text",
             render=lambda r, o: r.text, tools=(Tool("echo_text", title="Echo", description="Echo a text."),))


def test_a_registered_verb_gets_a_subcommand_and_a_tool(monkeypatch, capsys):
    from mcp.server.mcpserver.tools.base import Tool as SdkTool

    from seqpack.faces.mcp.generate import tool_function

    command = verbs.command
    monkeypatch.setitem(verbs.VERB_SPECS, "echo", "unused:_ECHO")  # one registry line (its module is this one)
    monkeypatch.setattr(verbs, "command", lambda name: _ECHO if name == "echo" else command(name))
    assert main(["echo", "hi", "--times", "2"]) == 0 and capsys.readouterr().out == "hi hi\n"
    assert main(["echo", "hi", "--times", "4"]) == 2
    assert "times=4 is over the limit of 3" in capsys.readouterr().err
    schema = SdkTool.from_function(tool_function(_ECHO, _ECHO.tools[0]), name="echo_text").parameters
    assert schema["properties"]["times"]["maximum"] == 3 and schema["required"] == ["text"]
    assert schema["properties"]["text"]["maxLength"] == 20


def test_a_verb_command_loads_its_own_verb_only():
    """``seqpack align`` builds and imports the align verb alone; the full parser (``--help``) loads every verb."""
    import subprocess
    import sys

    code = ("import sys; from seqpack.faces.cli import main; main({argv}); "
            "print(sorted(m for m in ('seqpack.verbs.alignment', 'seqpack.verbs.planning', 'seqpack.verbs.smoke_test') "
            "if m in sys.modules))")

    def loaded(argv: list[str]) -> str:
        proc = subprocess.run([sys.executable, "-c", code.format(argv=argv)], capture_output=True, text=True)
        return proc.stdout.strip().splitlines()[-1]

    assert loaded(["align", "--cp", "2"]) == "['seqpack.verbs.alignment']"
    assert loaded(["plan", "--lengths", "5,3", "--candidates", "8", "--token-slots", "16"]) == \
        "['seqpack.verbs.planning']"
    # negative control: a command line that does not start with a verb's name builds the full parser
    assert loaded(["demo-data"]) == "['seqpack.verbs.alignment', 'seqpack.verbs.planning', 'seqpack.verbs.smoke_test']"

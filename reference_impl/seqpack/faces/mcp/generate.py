"""The verbs' MCP tools, generated from their declarations (:data:`seqpack.verbs.VERB_SPECS`).

For every :class:`~seqpack.verbs.declare.Tool` of a verb this module builds a function whose
signature the SDK reads: one keyword argument per options field the tool takes (named as declared,
:attr:`~seqpack.verbs.declare.OptionField.mcp_name`), typed from the field's metadata so the input
schema carries the enum of its choices, its ``minimum``/``maximum``, ``minItems``/``maxItems``,
string lengths and its description; ``time_limit_s`` for a job; and the verb's result dataclass as
the return annotation (the output schema). Calling it confines every path argument to the server's
roots by its declared kind (:meth:`seqpack.faces.mcp.roots.AllowedRoots.confine`), builds the
options (with the tool's fixed values), and runs the verb, as a job
(:func:`seqpack.faces.mcp.jobs.run_job`: progress, time limit, cancellation) when declared. The verb
checks the values itself (:func:`seqpack.verbs.declare.check_options`).

Importing this module registers the tools (:func:`seqpack.faces.mcp.registry.register`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from seqpack.core.choices import literal
from seqpack.core.limits import MAX_PATH_CHARS
from seqpack.faces.mcp.hints import READ_ONLY, WRITES
from seqpack.faces.mcp.jobs import JobControl, run_job
from seqpack.faces.mcp.registry import register, roots_of
from seqpack.verbs import verbs
from seqpack.verbs.declare import OptionField, Tool, Verb, fields_of

__all__ = ["TIME_LIMIT_HELP", "register_verb_tools", "tool_fields", "tool_function"]

TIME_LIMIT_HELP = "stop the work after this many seconds (it also stops when the request is cancelled)"


def _bounds(low: float | None, high: float | None, *, exclusive_low: bool = False,
            exclusive_high: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if low is not None:
        out["gt" if exclusive_low else "ge"] = low
    if high is not None:
        out["lt" if exclusive_high else "le"] = high
    return out


def _value_type(f: OptionField) -> Any:
    """The pydantic type of one field's value (without None)."""
    opt = f.opt
    if opt.choices is not None:
        return literal(opt.choices)
    if f.kind == "int":
        return Annotated[int, Field(**_bounds(opt.minimum, opt.maximum))]
    if f.kind == "float":
        return Annotated[float, Field(**_bounds(opt.minimum, opt.maximum, exclusive_low=opt.exclusive_minimum,
                                                exclusive_high=opt.exclusive_maximum))]
    if f.kind == "bool":
        return bool
    if f.kind == "str":
        if opt.path is not None:
            return Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS)]
        return Annotated[str, Field(min_length=opt.min_length, max_length=opt.max_length)]
    if f.kind == "int_list":
        item = Annotated[int, Field(**_bounds(opt.item_minimum, opt.item_maximum))]
        return Annotated[list[item], Field(min_length=opt.min_items,  # type: ignore[valid-type]
                                           max_length=opt.max_items)]
    if f.kind == "str_list":
        item = Annotated[str, Field(min_length=opt.min_length, max_length=opt.max_length, pattern=opt.pattern)]
        return Annotated[list[item], Field(min_length=opt.min_items,  # type: ignore[valid-type]
                                           max_length=opt.max_items)]
    if f.kind == "mapping":
        key = Annotated[int, Field(**_bounds(opt.key_minimum, opt.key_maximum))]
        value = Annotated[int, Field(**_bounds(opt.item_minimum, opt.item_maximum))]
        return Annotated[dict[key, value], Field(max_length=opt.max_items)]  # type: ignore[valid-type]
    raise TypeError(f"option {f.name} ({f.kind}) cannot be an MCP argument; declare it mcp=False")


def tool_fields(verb: Verb, tool: Tool) -> list[OptionField]:
    """The options fields ``tool`` takes, in declaration order."""
    names = set(tool.field_names(verb.options))
    return [f for f in fields_of(verb.options) if f.name in names]


def _parameter(f: OptionField, tool: Tool) -> inspect.Parameter:
    description = f.opt.help + (" (inside an allowed root)" if f.opt.path is not None else "")
    value = _value_type(f)
    default = tool.defaults.get(f.name, f.default)
    required = f.name in tool.required or default is dataclasses.MISSING or f.opt.required
    if f.optional and not required and default is None:  # null where null is the default (explain_rule: limit 10)
        value = value | None
    annotation = Annotated[value, Field(description=description)]
    if required:
        return inspect.Parameter(f.mcp_name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
    if isinstance(default, tuple):
        default = list(default)
    return inspect.Parameter(f.mcp_name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _options(ctx: Context, verb: Verb, tool: Tool, fields: list[OptionField], kwargs: dict[str, Any]) -> Any:
    """The verb's options from the tool's arguments: paths confined to the roots, the tool's fixed values set."""
    values: dict[str, Any] = {}
    for f in fields:
        value = kwargs.get(f.mcp_name)
        if value is not None and f.opt.path is not None:
            value = str(roots_of(ctx).confine(f.opt.path, value, field=f.mcp_name))
        values[f.name] = value
    values.update(tool.fixed)
    options = verb.options(**values)
    if tool.adjust is not None:
        options = tool.adjust(options, kwargs.get("time_limit_s"))
    return options


def tool_function(verb: Verb, tool: Tool) -> Callable[..., Any]:
    """The function the SDK registers for ``tool`` (see the module docstring)."""
    fields = tool_fields(verb, tool)
    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    params += [_parameter(f, tool) for f in fields]
    if tool.job:
        default, maximum = tool.time_limit
        limit = Annotated[float, Field(gt=0, le=maximum, description=TIME_LIMIT_HELP)]
        params.append(inspect.Parameter("time_limit_s", inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=limit))
    result = tool.result or typing.get_type_hints(verb.function)["return"]
    if isinstance(result, str):  # "module:Class", imported lazily by the verb's module
        module, _, name = result.partition(":")
        result = getattr(importlib.import_module(module), name)

    if tool.job:

        async def run(ctx: Context, **kwargs: Any) -> Any:
            options = _options(ctx, verb, tool, fields, kwargs)
            function = verb.resolved()

            def work(job: JobControl) -> Any:
                job.check()
                if tool.progress:  # the verb reports (stage, fraction); the client gets a progress note
                    return function(dataclasses.replace(
                        options, progress=lambda stage, fraction: job.progress(fraction, 1.0, stage)))
                return function(options)

            return await run_job(ctx, work, time_limit_s=kwargs["time_limit_s"])

        fn: Callable[..., Any] = run
    else:

        def call(ctx: Context, **kwargs: Any) -> Any:
            return verb.resolved()(_options(ctx, verb, tool, fields, kwargs))

        fn = call
    fn.__name__ = fn.__qualname__ = tool.name
    fn.__doc__ = tool.description
    fn.__signature__ = inspect.Signature(params, return_annotation=result)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": result}
    return fn


def register_verb_tools() -> None:
    """Register the tools of every verb (once per process)."""
    for verb in verbs():
        for tool in verb.tools:
            aliases = {old: f.mcp_name for f in tool_fields(verb, tool) for old in f.opt.renamed_from}
            register(tool.name, tool_function(verb, tool), title=tool.title, description=tool.description,
                     annotations=WRITES if tool.writes else READ_ONLY, extra=verb.extra, links=tool.links,
                     aliases=aliases or None)


register_verb_tools()

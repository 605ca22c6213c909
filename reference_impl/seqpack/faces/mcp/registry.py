"""The MCP tool registry: every tool the server offers, as a function the SDK reads.

The verbs' tools are generated from their declarations (:mod:`seqpack.faces.mcp.generate`, which
registers them with :func:`register`); a hand-written tool (``server_info``) is a module-level
function registered with the :func:`tool` decorator. A tool parses its arguments into the verb's
options, calls the verb and returns the verb's result dataclass; the SDK derives the output schema
from that return annotation. A tool that touches files takes ``ctx: Context`` and confines every
path with :func:`roots_of`. An argument the schema does not name is refused with the closest valid
one (the published schema says ``additionalProperties: false``); a renamed argument's old name is
accepted for one release (:attr:`ToolSpec.aliases`, the server adds a warning to the result). Errors:
a :class:`~seqpack.core.errors.SeqpackError`, an ``OSError`` or a ``ToolError`` becomes a tool
error result (:func:`seqpack.faces.mcp.errors.error_result`); any other exception too,
as "internal error: <type>: <message>" (its traceback goes to the server log), so a client always
gets the reason. A JSON boolean or a string is refused where a tool wants a number (pydantic would
read it as 1 or 0, or parse the string). A tool that needs an optional extra (``@tool(extra="train")``) says so in its description
and, when the extra is missing, answers with the one-line install hint of
:mod:`seqpack.core.extras` before doing anything; a failed import of another extra's module says
the same, never an ImportError.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, create_model, model_validator

from seqpack.io import confine
from seqpack.core.errors import SeqpackError, is_foreign_panic
from seqpack.core.extras import install_hint, missing_extra_error, require_extra
from seqpack.faces.mcp.errors import error_result, log
from seqpack.faces.mcp.hints import READ_ONLY
from seqpack.faces.mcp.links import LinkSpec
from seqpack.faces.mcp.roots import AllowedRoots

__all__ = ["TOOLS", "ToolSpec", "register", "register_tools", "roots_of", "tool"]


@dataclass(frozen=True)
class ToolSpec:
    """One registered tool: the wrapped function, its title, its annotations and the extra it needs."""

    name: str
    fn: Callable[..., Any]
    title: str
    annotations: ToolAnnotations
    extra: str | None = None
    links: LinkSpec | None = None
    description_text: str | None = None
    aliases: dict[str, str] | None = None

    @property
    def description(self) -> str | None:
        """The description (declared, else the function's docstring) plus the extra it needs; None (the
        docstring as is) when there is nothing to add."""
        if self.extra is None:
            return self.description_text
        text = (self.description_text or self.fn.__doc__ or "").rstrip()
        return f"{text}\n\nNeeds the optional '{self.extra}' extra ({install_hint(self.extra)})."


#: Every tool, in registration order (importing a tools module registers its tools).
TOOLS: dict[str, ToolSpec] = {}


def _error_or_raise(name: str, exc: BaseException) -> Any:
    if isinstance(exc, Exception):
        exc = missing_extra_error(exc) or exc  # a module of a missing extra: the install hint, not an ImportError
    result = error_result(name, exc)
    if result is None:
        # unexpected (a bug): the traceback goes to the server log, the client still gets the reason
        log.exception("tool %s failed unexpectedly", name)
        result = error_result(name, InternalToolError(exc))
    return result


class InternalToolError(SeqpackError):
    """An exception no check anticipated, reported with its type and message instead of a bare failure."""

    def __init__(self, exc: BaseException) -> None:
        text = " ".join(str(exc).split())[:500]
        super().__init__(f"internal error: {type(exc).__name__}: {text} (a bug in seqpack; the server log has the "
                         "traceback)")


def _not_a_number(tp: Any, value: Any) -> str | None:
    """Why ``value`` is refused where ``tp`` wants an int or float, else None.

    pydantic's lax mode would read a JSON boolean as 1 or 0 and a numeric string ("8") as the
    number; the input schema says integer or number, so both are refused (also inside lists and
    dict values; dict keys are strings in JSON and stay as pydantic reads them).
    """
    origin = get_origin(tp)
    if origin is Annotated:
        return _not_a_number(get_args(tp)[0], value)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if bool in args or str in args:
            return None
        return next((why for a in args if a is not type(None) if (why := _not_a_number(a, value))), None)
    if tp in (int, float):
        if isinstance(value, bool):
            return f"expected a number, got a boolean ({value!r})"
        if isinstance(value, str):
            return f"expected {'an integer' if tp is int else 'a number'}, got a string ({value[:40]!r})"
        return None
    if origin is list and isinstance(value, list) and get_args(tp):
        return next((why for v in value if (why := _not_a_number(get_args(tp)[0], v))), None)
    if origin is dict and isinstance(value, dict) and len(get_args(tp)) == 2:
        return next((why for v in value.values() if (why := _not_a_number(get_args(tp)[1], v))), None)
    return None


def _strict_arguments(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` refusing an argument it does not name (with the closest valid one) and a JSON boolean or
    string for an integer or number argument (:func:`_not_a_number`)."""
    import difflib

    slots = {(f.alias or name): f.annotation for name, f in model.model_fields.items()}

    def no_bools(cls: Any, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in slots:
                    close = difflib.get_close_matches(str(key), list(slots), n=1, cutoff=0.5)
                    hint = f"; did you mean {close[0]!r}?" if close else f"; the arguments are {', '.join(slots)}"
                    raise ValueError(f"unknown argument {str(key)[:80]!r}{hint}")
            for key, annotation in slots.items():
                if key in data and (why := _not_a_number(annotation, data[key])):
                    raise ValueError(f"{key}: {why}")
        return data

    return create_model(model.__name__, __base__=model,
                        __validators__={"no_bools": model_validator(mode="before")(classmethod(no_bools))})


def _confinement(args: tuple[Any, ...], kwargs: dict[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """The server's allowed roots as the file-access policy for one call (every path the call's work opens,
    in any thread or forked worker, is confined); no policy for a call without a server context."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Context):
            roots = getattr(getattr(value, "mcp_server", None), "seqpack_roots", None)
            if isinstance(roots, AllowedRoots):
                return confine.confined_to(roots.roots)
    return contextlib.nullcontext()


def _guarded(fn: Callable[..., Any], extra: str | None = None) -> Callable[..., Any]:
    """``fn`` with library errors turned into tool error results and every file access confined to the
    allowed roots (same signature, sync or async); with ``extra``, a missing extra is that error before
    ``fn`` runs."""
    name = fn.__name__
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                if extra is not None:
                    require_extra(extra)
                with _confinement(args, kwargs):
                    return await fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - sorted by _error_or_raise
                return _error_or_raise(name, exc)
            except BaseException as exc:  # a Rust panic must not take the server down
                if not is_foreign_panic(exc):
                    raise
                return _error_or_raise(name, exc)

        return guarded_async

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            if extra is not None:
                require_extra(extra)
            with _confinement(args, kwargs):
                return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - sorted by _error_or_raise
            return _error_or_raise(name, exc)
        except BaseException as exc:  # a Rust panic must not take the server down
            if not is_foreign_panic(exc):
                raise
            return _error_or_raise(name, exc)

    return guarded


def tool(
    *, title: str, annotations: ToolAnnotations = READ_ONLY, extra: str | None = None, links: LinkSpec | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a module-level function as an MCP tool (its name is the function's name).

    ``extra``: the optional extra (:data:`seqpack.core.extras.EXTRAS`) the tool needs; ``links``:
    what the tool wrote, as ``resource_link`` items (:mod:`seqpack.faces.mcp.links`).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        register(fn.__name__, fn, title=title, annotations=annotations, extra=extra, links=links)
        return fn

    return decorate


def register(name: str, fn: Callable[..., Any], *, title: str, annotations: ToolAnnotations = READ_ONLY,
             extra: str | None = None, links: LinkSpec | None = None, description: str | None = None,
             aliases: dict[str, str] | None = None) -> ToolSpec:
    """Register ``fn`` as the MCP tool ``name`` (``description``: instead of its docstring; ``aliases``: old
    argument names, accepted with a warning, to the current ones)."""
    if name in TOOLS:
        raise ValueError(f"an MCP tool named {name!r} is already registered")
    spec = ToolSpec(name, _guarded(fn, extra), title, annotations, extra, links, description, aliases)
    TOOLS[name] = spec
    return spec


def roots_of(ctx: Context) -> AllowedRoots:
    """The allowed roots of the server handling this request."""
    return ctx.mcp_server.seqpack_roots  # type: ignore[attr-defined]


#: The SDK's tool objects, built once per process: deriving a tool's argument and output models costs about
#: 8 ms (pydantic), 0.13 s for a server, and a process that builds many servers (the tests) pays it once.
#: A tool object holds only its function and schemas; the server and the request reach it through the context.
_SDK_TOOLS: dict[str, Any] = {}


def register_tools(server: MCPServer) -> None:
    """Add every registered tool to ``server``."""
    from seqpack.faces.mcp import generate  # noqa: F401 - registers the verbs' tools

    manager = server._tool_manager  # noqa: SLF001 - the SDK offers no public hook
    with warnings.catch_warnings():
        # a result field called ``schema`` shadows a deprecated BaseModel method in the SDK's output model
        warnings.filterwarnings("ignore", message='Field name "schema" in .* shadows an attribute',
                                category=UserWarning)
        for spec in TOOLS.values():
            built = _SDK_TOOLS.get(spec.name)
            if built is not None and built.fn is spec.fn and spec.name not in manager._tools:  # noqa: SLF001
                manager._tools[spec.name] = built  # noqa: SLF001 - what add_tool stores, without rebuilding it
                continue
            server.add_tool(spec.fn, name=spec.name, title=spec.title, description=spec.description,
                            annotations=spec.annotations)
            registered = manager.get_tool(spec.name)
            if registered is not None:  # read live by the SDK: unknown arguments and booleans for numbers refused
                registered.fn_metadata.arg_model = _strict_arguments(registered.fn_metadata.arg_model)
                registered.parameters["additionalProperties"] = False
                _SDK_TOOLS[spec.name] = registered

"""A verb declared once: its options' field metadata and its :class:`Verb` spec, which every face reads.

An options dataclass (decorated with :func:`verb_options`) declares each field with :func:`option`:
the help text, how the CLI spells it (``--field-name`` unless told, positional on request, old
spellings kept as deprecated aliases), its choices (a tuple or a lazy registry view of
:mod:`seqpack.core.choices`), its limits (from :mod:`seqpack.core.limits`), whether it is a path
and of which kind (:data:`PATH_KINDS`), and which faces see it. :func:`check_options` checks an
options object against that metadata; every verb runs it first, so the library, the CLI and MCP
refuse a bad value with the same message. The CLI (:mod:`seqpack.faces.cli.generate`) and the MCP
tools (:mod:`seqpack.faces.mcp.generate`) are generated from the same metadata and the
:class:`Verb` specs listed in :data:`seqpack.verbs.VERB_SPECS`.

Pure Python: nothing here imports numpy, torch, pyarrow or a face.

>>> from seqpack.core.limits import MAX_PARALLEL_SIZE
>>> @verb_options
... class Demo:
...     tp: int = option(1, help="tensor-parallel size", minimum=1, maximum=MAX_PARALLEL_SIZE)
>>> [(f.name, f.kind, f.cli_flag, f.mcp_name) for f in fields_of(Demo)]
[('tp', 'int', '--tp', 'tp')]
>>> check_options(Demo(tp=0))
Traceback (most recent call last):
...
seqpack.core.errors.UsageError: field 'tp': tp must be a positive integer, got 0
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from seqpack.core.arguments import is_int, positive_float, positive_int
from seqpack.core.errors import UsageError
from seqpack.core.limits import DEFAULT_TOOL_SECONDS, MAX_PATH_CHARS, MAX_TOOL_SECONDS

__all__ = [
    "PATH_KINDS",
    "OptionField",
    "Opt",
    "Tool",
    "Verb",
    "check_options",
    "fields_of",
    "option",
    "verb_options",
]

#: Key of a dataclass field's metadata that holds its :class:`Opt`.
METADATA_KEY = "seqpack"
#: Path kinds, and what the MCP face confines for each (:mod:`seqpack.faces.mcp.paths`).
PATH_KINDS: dict[str, str] = {
    "file": "an existing file",
    "inputs": "an existing JSONL or Parquet file, datasets folder or blend manifest (every source it names is confined "
              "too)",
    "rows": "an existing JSONL or Parquet file, or a datasets.save_to_disk folder",
    "artifact": "packed Parquet (a file or a directory) or a prepared Energon dataset directory",
    "rows_or_packs": "rows (as rows), or a folder of offline packs or the output root holding them (as artifact)",
    "out_dir": "an output directory (created when absent)",
    "out_file": "an output file (created when absent)",
    "tokenizer": "a tokenizer.json or the folder holding it",
}
#: Field kinds: how a face carries the value (from the annotation, see :func:`_kind`).
KINDS = ("int", "float", "bool", "str", "int_list", "str_list", "mapping", "object")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Opt:
    """The metadata of one options field (see the module docstring); :func:`option` builds it."""

    help: str
    cli_help: str | None = None
    flag: str | None = None
    positional: bool = False
    metavar: str | None = None
    renamed_from: tuple[str, ...] = ()
    choices: Any = None
    cli_choices: Any = None
    check_choices: bool = True
    label: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    min_items: int | None = None
    max_items: int | None = None
    item_minimum: float | None = None
    item_maximum: float | None = None
    check_items: bool = True
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    path: str | None = None
    mcp_name: str | None = None
    cli: bool = True
    mcp: bool = True
    cli_default: Any = UNSET
    required: bool = False
    exclusive: str | None = None
    section: str | None = None
    inverse: bool = False
    interactive: bool = False
    key_minimum: int | None = None
    key_maximum: int | None = None
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.path is not None and self.path not in PATH_KINDS:
            raise ValueError(f"unknown path kind {self.path!r}; choose one of {', '.join(PATH_KINDS)}")


def option(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, help: str,
           **meta: Any) -> Any:
    """A dataclass field carrying an :class:`Opt` (``help`` and the keywords of :class:`Opt`).

    ``cli_help``: the CLI's text where it differs (an inverse flag); ``flag``: the CLI spelling (default
    ``--field-name``); ``positional``: a CLI positional
    (``metavar`` names it); ``renamed_from``: old names, accepted with a deprecation warning for one
    release by the library (keyword), the CLI (``--old-name``) and MCP (argument); ``choices`` (and
    ``cli_choices`` where the CLI offers more, ``check_choices=False`` where the verb checks them
    itself, ``label`` naming them in the message); ``minimum``/``maximum`` (``exclusive_*``),
    ``min_items``/``max_items`` and ``item_minimum``/``item_maximum`` (``check_items=False`` where
    the verb checks the items in bulk), ``min_length``/``max_length``/``pattern`` (strings, or the
    items of a string list; a pattern is published in the MCP schema only); ``path`` (a
    :data:`PATH_KINDS` kind); ``mcp_name`` (default: see :attr:`OptionField.mcp_name`); ``cli`` /
    ``mcp`` (False: the face does not offer it); ``cli_default`` (the CLI's default where it differs);
    ``required`` (the faces require it although the dataclass has a default); ``exclusive`` (a CLI
    mutually exclusive group), ``section`` (a CLI argument group title), ``inverse`` (the CLI flag
    stores False, e.g. ``--no-cp``), ``interactive`` (the CLI sets it only on a terminal without
    ``--json``), ``key_minimum``/``key_maximum`` (the integer keys of a mapping; ``item_*`` bound
    its values), ``fix`` (advice when a count limit is hit).
    """
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={METADATA_KEY: Opt(help=help, **meta)})


# ------------------------------------------------------------------------------------------------
# Reading the declaration
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionField:
    """One declared field of an options class, as the faces see it."""

    name: str
    kind: str
    optional: bool
    default: Any
    opt: Opt
    accepts_objects: bool = False

    @property
    def required(self) -> bool:
        """Whether a face must be given a value (no dataclass default, or declared required)."""
        return self.default is dataclasses.MISSING or self.opt.required

    @property
    def cli_flag(self) -> str:
        """The CLI flag (``--field-name`` unless declared)."""
        return self.opt.flag or "--" + self.name.replace("_", "-")

    @property
    def cli_aliases(self) -> tuple[str, ...]:
        """Old CLI spellings, accepted with a warning."""
        return tuple("--" + old.replace("_", "-") for old in self.opt.renamed_from)

    @property
    def mcp_name(self) -> str:
        """The MCP argument: declared, else the field name for a non-path or a name ending in ``path``,
        ``output_dir`` for an output directory, ``<name>_path`` for any other path."""
        if self.opt.mcp_name:
            return self.opt.mcp_name
        if self.opt.path is None or self.name.endswith("path"):
            return self.name
        return "output_dir" if self.opt.path == "out_dir" else f"{self.name}_path"

    @property
    def label(self) -> str:
        """How a message names the value (``label``, else the field name)."""
        return self.opt.label or self.name


def _strip_optional(tp: Any) -> tuple[list[Any], bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = list(typing.get_args(tp))
        return [a for a in args if a is not type(None)], type(None) in args
    return [tp], tp is type(None)


def _kind(tp: Any) -> tuple[str, bool]:
    """``(kind, optional)`` of an annotation: ``int``, ``float``, ``bool``, ``str`` (a path or text,
    whatever else the union admits), ``int_list``/``str_list`` (any sequence), ``mapping``, or
    ``object`` (library only: a callable, a tokenizer object, ...)."""
    args, optional = _strip_optional(tp)
    for simple in (bool, int, float):
        if args == [simple]:
            return simple.__name__, optional
    if str in args:
        return "str", optional
    if len(args) == 1:
        origin = typing.get_origin(args[0])
        if origin is not None and isinstance(origin, type) and issubclass(origin, Iterable) \
                and not issubclass(origin, Mapping):
            item = typing.get_args(args[0])[:1]
            if item == (int,):
                return "int_list", optional
            if item == (str,):
                return "str_list", optional
        if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
            return "mapping", optional
    return "object", optional or Any in args


@functools.cache
def fields_of(cls: type) -> tuple[OptionField, ...]:
    """The declared fields of an options class, in declaration order (a field without :func:`option`
    metadata is an error: every field says which faces see it)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        opt = f.metadata.get(METADATA_KEY)
        if not isinstance(opt, Opt):
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with option(...)")
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        kind, optional = _kind(hints[f.name])
        objects = False
        if opt.path is not None:  # a path is text on every face; the library may take more (a tokenizer, a blend)
            args = _strip_optional(hints[f.name])[0]
            objects = not all(a is str or typing.get_origin(a) is os.PathLike or a is os.PathLike for a in args)
            kind = "str"
        out.append(OptionField(f.name, kind, optional or default is None, default, opt, objects))
    return tuple(out)


def verb_options(cls: type) -> type:
    """Make ``cls`` a frozen keyword-only dataclass whose every field is declared with :func:`option`;
    the old names of renamed fields (``renamed_from``) are accepted as keywords with a
    ``DeprecationWarning``."""
    cls = dataclass(frozen=True, kw_only=True)(cls)
    renames = {old: f.name for f in fields_of(cls) for old in f.opt.renamed_from}
    if renames:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            for old, new in renames.items():
                if old in kwargs:
                    warnings.warn(f"{cls.__name__}({old}=...) is deprecated; use {new}= (the old name goes in "
                                  "the next release)", DeprecationWarning, stacklevel=2)
                    if new in kwargs:
                        raise UsageError(f"give {new} or its old name {old}, not both", field=new)
                    kwargs[new] = kwargs.pop(old)
            init(self, *args, **kwargs)

        cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


# ------------------------------------------------------------------------------------------------
# The check at the verb boundary
# ------------------------------------------------------------------------------------------------


def check_options(options: Any) -> Any:
    """Check every declared field of ``options`` against its metadata (choices, limits, counts, lengths,
    paths); returns ``options``. Every verb calls it first, so each value is checked once, here, with
    the same message whichever face passed it."""
    for f in fields_of(type(options)):
        value = getattr(options, f.name)
        if value is None:
            if f.required and not f.optional:
                raise UsageError(f"{f.name} is required", field=f.name)
            continue
        _check_value(f, value)
    return options


def _check_value(f: OptionField, value: Any) -> None:
    opt = f.opt
    if opt.choices is not None and opt.check_choices:
        choices = tuple(opt.choices)
        if value not in choices:
            raise UsageError(f"unknown {f.label} {value!r}; choose one of {', '.join(choices)}", field=f.name)
        return
    if f.kind in ("int", "float"):
        _check_number(f.name, value, integer=f.kind == "int", lowest=opt.minimum, highest=opt.maximum,
                      above=opt.exclusive_minimum, below=opt.exclusive_maximum)
    elif f.kind == "bool" and not isinstance(value, bool):
        raise UsageError(f"{f.name} must be true or false, got {value!r}", field=f.name)
    elif f.kind == "str":
        _check_text(f, value)
    elif f.kind in ("int_list", "str_list", "mapping"):
        _check_items(f, value)


def _check_number(name: str, value: Any, *, integer: bool, lowest: float | None, highest: float | None,
                  above: bool = False, below: bool = False) -> None:
    """An integer (or a finite number) in ``[lowest, highest]`` (``above``/``below``: the bound excluded), with
    the messages of :func:`positive_int` and :func:`positive_float`."""
    if integer:
        if lowest is None and not is_int(value):
            raise UsageError(f"{name} must be an integer, got {value!r}", field=name)
        positive_int(name, value, minimum=int(value if lowest is None else lowest),
                     maximum=None if highest is None else int(highest))
        return
    if lowest == 0 and above and not below:
        positive_float(name, value, maximum=highest)
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {value!r}", field=name)
    if lowest is not None and (value <= lowest if above else value < lowest):
        raise UsageError(f"{name} must be {'above' if above else 'at least'} {lowest:g}, got {value!r}", field=name)
    if highest is not None and (value >= highest if below else value > highest):
        if below:
            raise UsageError(f"{name} must be below {highest:g}, got {value!r}", field=name)
        raise UsageError(f"{name}={value:g} is over the limit of {highest:g}", field=name,
                         fix=f"use at most {highest:g} (limits live in reference_impl/seqpack/core/limits.py)")


def _check_text(f: OptionField, value: Any) -> None:
    opt = f.opt
    if opt.path is not None:
        if not isinstance(value, (str, os.PathLike)):
            if f.accepts_objects:
                return  # a tokenizer object, a blend mapping: the verb reads it
            raise UsageError(f"{f.name} must be a file path, got {value!r}", field=f.name)
        text = os.fspath(value)
        if not text:
            raise UsageError(f"{f.name} must be a file path, got {value!r}", field=f.name)
        if len(text) > MAX_PATH_CHARS:
            raise UsageError(f"{f.name} is longer than {MAX_PATH_CHARS} characters", field=f.name)
        return
    if not isinstance(value, str):
        raise UsageError(f"{f.name} must be text, got {type(value).__name__}", field=f.name)
    low, high = opt.min_length or 0, opt.max_length
    if len(value) < low or (high is not None and len(value) > high):
        span = f"at most {high}" if not low else f"{low} to {high}" if high is not None else f"at least {low}"
        raise UsageError(f"{f.name} must be text of {span} characters", field=f.name)


def _check_items(f: OptionField, value: Any) -> None:
    opt = f.opt
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        what = "a mapping" if f.kind == "mapping" else "a list"
        raise UsageError(f"{f.name} must be {what}, got {value!r}", field=f.name)
    items = value if isinstance(value, Mapping) else list(value)
    if opt.max_items is not None and len(items) > opt.max_items:
        raise UsageError(f"{f.name} holds {len(items)} entries; the limit is {opt.max_items}", field=f.name,
                         fix=opt.fix or f"give at most {opt.max_items} (limits live in "
                         "reference_impl/seqpack/core/limits.py)")
    if opt.min_items and len(items) < opt.min_items:
        raise UsageError(f"{f.name} must hold at least {opt.min_items} value(s)", field=f.name)
    if not opt.check_items or f.kind == "mapping":
        return
    for item in items:
        if f.kind == "int_list":
            if not is_int(item):
                raise UsageError(f"{f.name} must be a list of integers, got {item!r}", field=f.name)
            _check_number(f.name, item, integer=True, lowest=opt.item_minimum, highest=opt.item_maximum)
        elif not isinstance(item, str) or (opt.max_length is not None and len(item) > opt.max_length):
            raise UsageError(f"each of {f.name} must be text of at most {opt.max_length} characters", field=f.name)


# ------------------------------------------------------------------------------------------------
# The verb spec
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """One MCP tool of a verb.

    ``fields``: the options fields it takes (None: every field MCP sees) less ``exclude``;
    ``fixed``: values it sets itself (``list_rules``: ``detail="summary"``); ``defaults`` and
    ``required``: where it differs from the options; ``result``: its result type when narrower
    than the verb's, or named ``"module:Class"`` where the verb's module imports it lazily; ``writes``: it writes files (not read-only); ``job``: it runs as a job
    (``time_limit_s`` with ``time_limit`` = (default, maximum), progress, cancellation);
    ``progress``: the job's progress reaches the options' ``progress`` callback; ``adjust``:
    ``(options, time_limit_s) -> options`` before the call; ``links``: what a writing tool wrote,
    as ``(path, name, description, MIME type)`` items of its structured result.
    """

    name: str
    title: str
    description: str
    fields: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    required: tuple[str, ...] = ()
    result: Any = None
    writes: bool = False
    job: bool = False
    time_limit: tuple[float, float] = (DEFAULT_TOOL_SECONDS, MAX_TOOL_SECONDS)
    progress: bool = False
    adjust: Callable[[Any, float | None], Any] | None = None
    links: Callable[[dict[str, Any]], Iterable[tuple[str, str, str, str]]] | None = None

    def field_names(self, options: type) -> list[str]:
        """The options fields this tool takes, in declaration order."""
        wanted = set(self.fields) if self.fields is not None else None
        return [f.name for f in fields_of(options)
                if f.opt.mcp and f.name not in self.exclude and f.name not in self.fixed
                and (wanted is None or f.name in wanted)]


@dataclass(frozen=True)
class Verb:
    """A verb: its options class and function, and what its faces need beyond the field metadata.

    Its CLI subcommand is its key in :data:`seqpack.verbs.VERB_SPECS`. ``render(result, options)``:
    the CLI's text (a ``str``; anything else is printed as JSON); ``to_json(result, options)``: what
    ``--json`` prints (default ``result.to_dict()``); ``exit_code(result, options)`` (default 0);
    ``cli_function``: what the CLI calls instead of ``function``; ``violations_exit``: the CLI's exit
    code for a ``ConfigViolationError`` (None: 2, like every error); ``extra``: the optional extra it
    needs; ``required_groups``: CLI mutually exclusive groups of which one flag must be given;
    ``tools``: its MCP tools.
    """

    name: str
    options: type
    function: Callable[[Any], Any]
    help: str
    render: Callable[[Any, Any], Any] | None = None
    to_json: Callable[[Any, Any], Any] | None = None
    exit_code: Callable[[Any, Any], int] | None = None
    cli_function: Callable[[Any], Any] | None = None
    violations_exit: int | None = None
    extra: str | None = None
    required_groups: tuple[str, ...] = ()
    tools: tuple[Tool, ...] = ()

    def resolved(self, fn: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
        """``fn`` (default: the verb's function) as its module holds it now (a test may replace it there)."""
        fn = fn or self.function
        module = sys.modules.get(fn.__module__)
        return getattr(module, fn.__name__, fn) if module is not None else fn

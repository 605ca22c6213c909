"""The verbs' subcommands, generated from their declarations (:data:`seqpack.verbs.VERB_SPECS`).

Each declared options field (:mod:`seqpack.verbs.declare`) becomes one argument: a positional or
``--field-name`` (or its declared flag; old spellings stay as deprecated aliases that print a
one-line warning), ``type`` from the annotation (integers, numbers, comma-separated integer lists,
repeatable text), ``choices`` from the declared registry view, ``store_true`` / ``store_false`` for
booleans, mutually exclusive groups and titled argument groups as declared. A flag the user does not
give is left out, so the options dataclass supplies its own default. Every subcommand takes
``--json``. Running one builds the options, calls the verb (or its ``cli_function``), prints
``render(result, options)`` or, with ``--json``, the result's JSON, and exits with ``exit_code``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from typing import Any

from seqpack.faces.cli._output import add_json_flag, int_list, print_json
from seqpack.verbs.declare import UNSET, OptionField, Verb, fields_of

__all__ = ["add_verb", "argument", "run_verb"]


def _deprecated(base: type[argparse.Action], aliases: tuple[str, ...]) -> type[argparse.Action]:
    """``base`` that prints a one-line warning when the user spelled the flag one of its old ways."""

    class Deprecated(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            if option_string in aliases:
                print(f"{parser.prog}: warning: {option_string} is deprecated; use {self.option_strings[0]} (the old "
                      "spelling goes in the next release)", file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    return Deprecated


_ACTIONS: dict[str, type[argparse.Action]] = {
    "store": argparse._StoreAction,  # noqa: SLF001 - argparse's own classes, to add the alias warning
    "store_true": argparse._StoreTrueAction,  # noqa: SLF001
    "store_false": argparse._StoreFalseAction,  # noqa: SLF001
    "append": argparse._AppendAction,  # noqa: SLF001
}


def argument(f: OptionField) -> tuple[list[str], dict[str, Any]]:
    """The ``add_argument`` names and keywords of one declared field."""
    opt = f.opt
    kwargs: dict[str, Any] = {"help": opt.cli_help or opt.help}
    choices = opt.cli_choices if opt.cli_choices is not None else opt.choices if opt.check_choices else None
    if choices is not None:
        kwargs["choices"] = choices
        if opt.metavar:  # the metavar hides the choices: list them in the help
            kwargs["help"] += ": %(choices)s"
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    shown = opt.cli_default if opt.cli_default is not UNSET else f.default
    if f.kind not in ("bool", "str_list") and shown not in (None, (), dataclasses.MISSING) \
            and "default" not in kwargs["help"]:
        kwargs["help"] += f" (default {','.join(map(str, shown)) if isinstance(shown, tuple) else shown})"
    kwargs["default"] = opt.cli_default if opt.cli_default is not UNSET else argparse.SUPPRESS
    action = "store"
    if f.kind == "bool":
        action = "store_false" if opt.inverse else "store_true"
    elif f.kind == "int":
        kwargs["type"] = int
    elif f.kind == "float":
        kwargs["type"] = float
    elif f.kind == "int_list":
        kwargs["type"] = int_list
    elif f.kind == "str_list":
        action = "append"
    elif f.kind != "str":
        raise TypeError(f"option {f.name} ({f.kind}) cannot be a CLI argument; declare it cli=False")
    if opt.positional:
        if not f.required:
            kwargs["nargs"] = "?"
        return [f.name], kwargs
    aliases = f.cli_aliases
    kwargs.update(dest=f.name, action=_deprecated(_ACTIONS[action], aliases) if aliases else action)
    if f.required:
        kwargs["required"] = True
    return [f.cli_flag, *aliases], kwargs


def _display(f: OptionField) -> str:
    """How a message names the argument: a positional by its name, a flag by its spelling."""
    if f.opt.positional:
        metavar = f.opt.metavar or ""
        return metavar if metavar.isidentifier() and metavar.islower() else f.name
    return f.cli_flag


def add_verb(sub: Any, name: str, verb: Verb) -> argparse.ArgumentParser:
    """Add ``verb``'s subcommand ``name`` to the subparsers ``sub``; returns its parser."""
    text = verb.help if verb.extra is None else f"{verb.help} (needs seqpack[{verb.extra}])"
    parser = sub.add_parser(name, help=text, description=text)
    fields = [f for f in fields_of(verb.options) if f.opt.cli]
    groups: dict[str, Any] = {}
    for f in fields:
        target: Any = parser
        if f.opt.exclusive is not None:
            if f.opt.exclusive not in groups:
                groups[f.opt.exclusive] = parser.add_mutually_exclusive_group(
                    required=f.opt.exclusive in verb.required_groups)
            target = groups[f.opt.exclusive]
        elif f.opt.section is not None:
            if f.opt.section not in groups:
                groups[f.opt.section] = parser.add_argument_group(f.opt.section)
            target = groups[f.opt.section]
        names, kwargs = argument(f)
        target.add_argument(*names, **kwargs)
    add_json_flag(parser)
    parser.set_defaults(_run=functools.partial(run_verb, verb, name), _extra=verb.extra,
                        _names={f.name: _display(f) for f in fields})
    return parser


def run_verb(verb: Verb, name: str, args: argparse.Namespace) -> int:
    """Build the options from ``args``, run the verb, print its text or JSON; the exit code."""
    from seqpack.core.errors import ConfigViolationError

    values = {}
    for f in fields_of(verb.options):
        if not f.opt.cli or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if f.opt.interactive:  # a progress bar: only on a terminal, never under --json
            value = bool(value) and not args.json and sys.stderr.isatty()
        values[f.name] = value
    options = verb.options(**values)
    try:
        result = verb.resolved(verb.cli_function)(options)
    except ConfigViolationError as exc:
        if verb.violations_exit is None:
            raise
        print(f"seqpack {name}: error: {exc.message}", file=sys.stderr)
        return verb.violations_exit
    if args.json:
        print_json(verb.to_json(result, options) if verb.to_json is not None else result.to_dict())
    else:
        out = verb.render(result, options) if verb.render is not None else result.to_dict()
        if isinstance(out, str):
            print(out)
        else:
            print_json(out)
    return verb.exit_code(result, options) if verb.exit_code is not None else 0

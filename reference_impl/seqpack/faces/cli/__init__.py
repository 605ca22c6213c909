"""The ``seqpack`` command line: a subcommand per verb, generated from the verbs' declarations, plus a few
hand-written commands.

The verbs' subcommands come from :data:`seqpack.verbs.VERB_SPECS` (:mod:`seqpack.faces.cli.generate`);
``mcp``, ``install-skill`` and ``demo-data`` are modules of this package (:data:`COMMANDS`), and other
installed distributions add theirs through the :data:`PLUGIN_GROUP` entry points.

Exit codes: 0 success (a config is valid), 1 rule violations (or a failed check), 2 usage or
input error. Errors are printed as one readable line on stderr, never as a traceback
(``SEQPACK_DEBUG=1`` shows it). A verb (its ``extra``) or a command module (``EXTRA``) may name the
optional extra it needs (:mod:`seqpack.core.extras`): without that extra the command prints which one
to install and exits 2 before doing anything; an import of another extra's module failing later says
the same.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from seqpack.core.errors import SeqpackError, UsageError, is_foreign_panic

#: The hand-written subcommand modules (not verbs of the library), listed after the verbs' subcommands.
#: Each defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``, and optionally ``EXTRA``.
COMMANDS: tuple[str, ...] = (
    "seqpack.faces.cli.mcp",
    "seqpack.faces.cli.install_skill",
    "seqpack.faces.cli.demo_data",
)

#: Entry-point group through which other distributions add subcommands (the dev-only ``seqpack-evals`` adds
#: ``eval``); each entry point names a module with the same four names as a built-in command module.
PLUGIN_GROUP = "seqpack.commands"

EXIT_OK, EXIT_VIOLATIONS, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser: every verb's generated subcommand, then the hand-written commands and the plugins
    (imports the verbs' declarations, no numpy, torch or pyarrow). ``only``: a verb's subcommand alone
    (what running it needs; ``main`` builds that when the command line starts with a verb's name)."""
    from seqpack import __version__
    from seqpack import verbs
    from seqpack.faces.cli.generate import add_verb

    parser = _Parser(prog="seqpack", description="Sequence packing for Megatron-style fine-tuning.")
    parser.add_argument("--version", action="version", version=f"seqpack {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in [only] if only is not None else list(verbs.VERB_SPECS):
        add_verb(sub, name, verbs.command(name))
    if only is not None:
        return parser
    for module in [*map(importlib.import_module, COMMANDS), *_plugins()]:
        extra = getattr(module, "EXTRA", None)
        text = module.HELP if extra is None else f"{module.HELP} (needs seqpack[{extra}])"
        p = sub.add_parser(module.NAME, help=text, description=text)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _extra=extra)
    return parser


def _plugins() -> list:
    """Command modules other installed distributions add (:data:`PLUGIN_GROUP`), by name; one that fails to
    import is left out, so a broken plugin never breaks the product's own commands."""
    from importlib.metadata import entry_points

    modules = []
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            modules.append(ep.load())
        except Exception:  # noqa: BLE001 - a plugin's own failure
            continue
    return modules


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``seqpack`` console script."""
    import warnings

    # Megatron-Core warns at import that TE/Apex are missing; on CPU that is expected noise.
    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")
    _tolerant_streams()
    from seqpack.verbs import VERB_SPECS

    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=words[0] if words and words[0] in VERB_SPECS else None)
    args = parser.parse_args(words)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return _run(args)
    finally:
        _print_nonce()


def _print_nonce() -> None:
    """Under the eval harness, end every run with the nonce line on stderr (:mod:`seqpack.core.nonce`)."""
    from seqpack.core.nonce import nonce_line

    line = nonce_line()
    if line is not None:
        print(line, file=sys.stderr, flush=True)


def _tolerant_streams() -> None:
    """Text that is not valid Unicode (a file name's undecodable bytes, read with ``surrogateescape``)
    is printed with backslash escapes instead of failing the command after its work is done."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change (detached, closed)
                pass


def _undecodable_argument(args: argparse.Namespace) -> None:
    """Refuse an argument holding bytes that are not UTF-8 (the shell passes them through ``surrogateescape``):
    seqpack writes paths into JSON manifests and prints them, so they must be text."""
    names = getattr(args, "_names", None) or {}
    for dest, value in vars(args).items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if not isinstance(item, str):
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                shown = item.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                name = names.get(dest) or (dest if dest in {"input", "layout", "path", "config", "file"}
                                           else "--" + dest.replace("_", "-"))
                raise UsageError(
                    f"{name} '{shown}' holds bytes that are not UTF-8 (character {exc.start}); seqpack records "
                    "paths in JSON manifests and prints them, so they must be valid UTF-8",
                    fix="rename the file or directory, or pass a path without such bytes",
                ) from None


def _run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand; errors become one line on stderr and an exit code."""
    from seqpack.core.extras import missing_extra_error, require_extra

    try:
        _undecodable_argument(args)
        if getattr(args, "_extra", None):
            require_extra(args._extra)
        return int(args._run(args))
    except ImportError as exc:  # a module of an optional extra is missing: name the extra, in one line
        hint = missing_extra_error(exc)
        if hint is None or os.environ.get("SEQPACK_DEBUG"):
            return _internal_error(args, exc)
        print(f"seqpack {args.command}: error: {hint}", file=sys.stderr)
        return EXIT_ERROR
    except SeqpackError as exc:
        if os.environ.get("SEQPACK_DEBUG"):
            raise
        print(f"seqpack {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"seqpack {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # the file system or the network said no: name what and where, in one line
        if os.environ.get("SEQPACK_DEBUG"):
            raise
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"seqpack {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    except BaseException as exc:  # noqa: BLE001 - the CLI promises one line, never a traceback
        if not (isinstance(exc, Exception) or is_foreign_panic(exc)):
            raise  # SystemExit and friends; a Rust panic (pyo3's PanicException) is a BaseException too
        return _internal_error(args, exc)


def _internal_error(args: argparse.Namespace, exc: BaseException) -> int:
    """An unexpected exception as one line (re-raised under ``SEQPACK_DEBUG``)."""
    if os.environ.get("SEQPACK_DEBUG"):
        raise exc
    print(
        f"seqpack {args.command}: internal error: {type(exc).__name__}: {exc} "
        "(run with SEQPACK_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return EXIT_ERROR

"""``smoke``: the packing smoke test of one registered path (packed == unpacked, no leakage, CP == CP1)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from seqpack.core.choices import PACKING_PATHS, SMOKE_SIZES, LazyChoices
from seqpack.core.errors import SeqpackError, UsageError
from seqpack.core.limits import MAX_SMOKE_SECONDS, SMOKE_ROWS
from seqpack.core.results import Result
from seqpack.core.textfmt import text_table
from seqpack.core.choices import BRIDGE_VERSIONS
from seqpack.core.versions import DEFAULT_BRIDGE_TARGET
from seqpack.verbs.common import TOKENIZER_HELP, seed_option, tokenizer_option
from seqpack.verbs.declare import Tool, Verb, check_options, option, verb_options
from seqpack.verbs.validation import config_source, config_text_option, overrides_option

if TYPE_CHECKING:  # the smoke test's modules load when it runs (the CLI's start stays light)
    from seqpack.smoke.report import SmokeReport

__all__ = ["SMOKE", "SmokeOptions", "SmokeRun", "render_smoke", "smoke", "smoke_cli", "smoke_paths"]

#: The name of the smoke test's working copy of the data rows (``smoke._subset`` writes it).
SMOKE_COPY_NAME = "smoke_input.jsonl"
#: How the smoke test rolls MTP inputs and targets of packed rows (``seqpack.smoke.run.MTP_ROLLS``).
MTP_ROLLS = ("megatron_core", "reference")
#: The CLI's ``--path`` values: every registered packing path, or ``all`` of them.
PATH_CHOICES = LazyChoices(lambda: ("all", *PACKING_PATHS))


@verb_options
class SmokeOptions:
    """The path, its config (``config_path``, ``config_text`` or a mapping ``config``; none: the path's
    default CP=2 config) with overrides, the data (default: the path's smoke data) and the run's size.

    ``cp_check=False`` skips the multi-process CP check (the report is then ``incomplete``).
    ``moe`` / ``mtp`` (or ``model``: options of the reference model, ``{"moe": True, "mtp": True}`` or
    their fields) each add their own check (:mod:`seqpack.smoke.options`).
    """

    path: str = option("offline", help="which packing path to build batches with (CLI: or all, the default)",
                       choices=PACKING_PATHS, label="packing path", cli_choices=PATH_CHOICES, cli_default="all",
                       metavar="PATH")
    config_path: str | os.PathLike[str] | None = option(
        None, help="training config (YAML/JSON); default: a small CP=2 config for the path", flag="--config",
        path="file")
    config_text: str | None = config_text_option("training config as YAML/JSON text (default: a small CP=2 "
                                                 "config for the path)")
    config: Mapping[str, Any] | Any = option(None, help="a mapping or TrainingConfig", cli=False, mcp=False)
    overrides: Sequence[str] = overrides_option("dotted override on the config, e.g. model.context_parallel_size=1 "
                                                "(repeatable)")
    data: str | os.PathLike[str] | None = option(None, help="JSONL rows to pack (default: the path's smoke data)",
                                                 path="file")
    size: str = option("small", help="rows used: " + ", ".join(f"{k} {v}" for k, v in SMOKE_ROWS.items()),
                       choices=SMOKE_SIZES)
    seed: int = seed_option(1234)
    cp_check: bool = option(True, help="run the real CP=2 check on gloo processes (slower; without it the result is "
                            "incomplete)", cli_help="skip the multi-process CP=2 check (the result is then "
                            "INCOMPLETE, not PASS)", flag="--no-cp", inverse=True)
    cp_max_batches: int = option(2, help="batches the CP check compares", minimum=1, maximum=16, cli=False,
                                 mcp=False)
    cp_timeout: float = option(120.0, help="seconds the CP ranks may take", minimum=0.0, exclusive_minimum=True,
                               maximum=MAX_SMOKE_SECONDS, cli=False, mcp=False)
    progress: Callable[[str, float], None] | None = option(None, help="called with (stage, fraction done)",
                                                           cli=False, mcp=False)
    moe: bool = option(False, help="reference model with a mixture-of-experts MLP: adds the moe_router_statistics "
                       "check (padding out of every routing statistic)")
    mtp: bool = option(False, help="reference model with a multi-token-prediction depth: adds the "
                       "mtp_equals_unpacked check (MTP targets rolled inside each sequence)")
    model: Mapping[str, Any] | None = option(None, help="options of the reference model", cli=False, mcp=False)
    tokenizer: Any = tokenizer_option(TOKENIZER_HELP + "; with data: pass it, so the smoke test checks the token "
                                      "stream that will train")
    bridge_version: str | None = option(
        None, choices=BRIDGE_VERSIONS, help="the Megatron-Bridge the config is checked for (default: with a config, "
        f"{DEFAULT_BRIDGE_TARGET}, what validate checks; the demo config of a path only Bridge main has: main)")
    mtp_roll: str = option("megatron_core", choices=MTP_ROLLS, help="with mtp: roll MTP inputs and targets of packed "
                           "rows with the installed Megatron-Core's own roll_tensor (megatron_core: what training "
                           "runs) or seqpack's roll inside each sequence (reference: what a fixed Megatron-Core does)")


def _request(options: SmokeOptions, path: str) -> tuple[Any, dict[str, Any]]:
    """The checked request for ``path`` and the run's shared keyword arguments."""
    from seqpack.smoke.options import model_options
    from seqpack.smoke.run import SmokeRequest

    if path not in PACKING_PATHS:
        raise UsageError(f"unknown packing path {path!r}; choose one of {', '.join(PACKING_PATHS)}", field="path")
    source = config_source(options.config_path, options.config_text, None, options.config,
                           offered=("config_text", "config_path"))
    model = {**model_options(options.moe, options.mtp), **dict(options.model or {})}
    request = SmokeRequest(path, source, options.data, list(options.overrides), model=model,
                           tokenizer=options.tokenizer, bridge_version=options.bridge_version,
                           mtp_roll=options.mtp_roll)
    shared = dict(
        size=options.size, seed=options.seed, cp_check=options.cp_check, cp_max_batches=options.cp_max_batches,
        cp_timeout=float(options.cp_timeout), progress=options.progress,
    )
    return request, shared


def _in_user_file(err: SeqpackError, data: Any) -> SeqpackError:
    """An error about the smoke test's working copy of the rows, made to name the user's file and line.

    The copy holds the first rows of ``data`` in order, one per line, so its row ``k`` is row ``k``
    of the user's file.
    """
    if data is None or err.file is None or os.path.basename(err.file) != SMOKE_COPY_NAME:
        return err
    from seqpack.data.jsonl import JsonlFile

    row = err.row if err.row is not None else (err.line - 1 if err.line is not None else None)
    err.file = os.fspath(data)
    if row is not None:
        with JsonlFile(data, use_cache=False) as jf:
            err.line = jf.line_number(row) if row < len(jf) else None
    return err


def smoke(options: SmokeOptions) -> SmokeReport:
    """Run :func:`seqpack.smoke.run.run_packing_smoke_test` for ``options``; an error about a data row
    names the row in ``options.data`` (never the test's temporary copy)."""
    return smoke_paths(options, [options.path])[0]


def smoke_paths(options: SmokeOptions, paths: Sequence[str]) -> list[SmokeReport]:
    """The smoke test of every path in ``paths`` with the rest of ``options`` (``options.path`` is not
    used): one report per path, the CP checks of all of them in one launch of CP ranks
    (:func:`seqpack.smoke.run.run_packing_smoke_tests`)."""
    from seqpack.smoke.run import run_packing_smoke_tests

    check_options(options)
    if not paths:
        raise UsageError("name at least one packing path", field="path")
    if len(paths) > 1 and (options.config_path is not None or options.config_text is not None
                           or options.config is not None):
        raise UsageError("a config describes one packing path; run the paths one at a time", field="config")
    checked = [_request(options, p) for p in paths]
    try:
        return run_packing_smoke_tests([request for request, _ in checked], **checked[0][1])
    except SeqpackError as err:
        raise _in_user_file(err, checked[0][0].data) from None


# ------------------------------------------------------------------------------------------------
# The CLI's view
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmokeRun(Result):
    """What ``seqpack smoke`` reports: every path's report, and the verdict over all of them."""

    ok: bool
    result: str
    reports: list[SmokeReport]
    notes: list[str] = field(default_factory=list)


def smoke_cli(options: SmokeOptions) -> SmokeRun:
    """What ``seqpack smoke`` runs: the path's smoke test, or every path's (``all``: for rows with images, every
    path that reads them) in one launch of CP ranks; on a terminal, progress lines go to stderr."""
    paths = list(PACKING_PATHS) if options.path == "all" else [options.path]
    notes = []
    if options.path == "all" and options.data is not None:
        from seqpack.core.packing_paths import visual_paths
        from seqpack.data.vlm.sample import file_has_visuals

        if file_has_visuals(options.data):
            skipped = [p for p in paths if p not in visual_paths()]
            paths = [p for p in paths if p in visual_paths()]
            notes.append(f"the data holds rows with images or videos: all = the paths that read them ({', '.join(paths)}); "
                         f"{', '.join(skipped)} take text rows only")
    if options.config_path is not None and len(paths) > 1:
        raise UsageError("--config describes one packing path; pass --path too")
    if options.progress is None and _terminal():
        options = replace(options, progress=_progress_lines())
    reports = smoke_paths(replace(options, path=paths[0]), paths)
    ok = all(r.ok for r in reports)
    result = "pass" if ok else ("fail" if any(r.result == "fail" for r in reports) else "incomplete")
    return SmokeRun(ok=ok, result=result, reports=reports, notes=notes)


def _terminal() -> bool:
    """Whether stderr is a terminal (progress lines go there; a pipe or a log gets only the result)."""
    import sys

    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def _progress_lines() -> Callable[[str, float], None]:
    """A progress callback that prints one line per stage on stderr, with the time since the start."""
    import sys
    import time

    started = time.perf_counter()

    def line(stage: str, fraction: float) -> None:
        print(f"[smoke {time.perf_counter() - started:6.1f} s] {stage} ({fraction:.0%})", file=sys.stderr, flush=True)

    return line


def render_smoke(run: SmokeRun, options: SmokeOptions) -> str:
    """The CLI's text: a table of checks per path, the fixes of failed checks, and the verdict."""
    out = [f"note: {n}" for n in run.notes]
    for r in run.reports:
        d = r.data
        out.append(f"{r.path}: {r.result.upper()}  ({d['samples']} samples from {d['rows']} rows, "
                   f"{d['batches']} batches, {r.timings['total_s']:.1f} s; seq_length {r.config.get('seq_length')}, "
                   f"tokenizer: {d.get('tokenizer')})")
        rows = [[c.name, {"passed": "pass", "failed": "FAIL", "skipped": "skip"}[c.status],
                 c.reason if c.status == "skipped" else c.message] for c in r.checks]
        out.append(text_table(["check", "result", "detail"], rows))
        out += [f"  fix ({c.name}{', ' + c.rule_id if c.rule_id else ''}): {c.fix}"
                for c in r.checks if c.status == "failed" and c.fix]
        out += [f"  note: {n}" for n in r.notes]
        out.append("")
    skipped = sum(len(r.skipped) for r in run.reports)
    incomplete = (f"INCOMPLETE: {skipped} check(s) skipped" if skipped else "INCOMPLETE: most rows were rejected") + \
        ", so this run proves less than a pass"
    out.append({"pass": "ALL PASS", "fail": "SOME CHECKS FAILED", "incomplete": incomplete}[run.result])
    return "\n".join(out)


def _cp_timeout(options: SmokeOptions, time_limit_s: float | None) -> SmokeOptions:
    """MCP: the CP ranks get the tool's time limit, within 10 to 120 seconds."""
    return replace(options, cp_timeout=max(10.0, min(120.0, time_limit_s or 120.0)))


SMOKE = Verb(
    name="smoke", options=SmokeOptions, function=smoke, cli_function=smoke_cli, render=render_smoke,
    exit_code=lambda run, options: 0 if run.ok else 1, extra="train",
    help="run the packing smoke test on the embedded demo data (or your config/data) and report each check",
    tools=(Tool(
        "run_packing_smoke_test", title="Run the packing smoke test (packed == unpacked, CP=2 == CP=1)", job=True,
        time_limit=(300.0, MAX_SMOKE_SECONDS), progress=True, adjust=_cp_timeout, result="seqpack.smoke.report:SmokeReport",
        description="""Build real batches through a packing path, read their boundaries as Megatron-Core PackedSeqParams
fields, run a tiny float64 GPT forward and backward, and report each check as passed, failed or
skipped (with the reason), with numbers: packed outputs, losses and gradients equal the unpacked
ones, no cross-sequence leakage, position ids restart, supervised tokens preserved, every sample
exactly once, CP=2 equals CP=1 (multi-process gloo, real PackedSeqParams), config valid. result is
pass only when every check ran and passed (incomplete when one was skipped or most rows were rejected).
Run it on the user's own rows (data_path) with the model's tokenizer folder (tokenizer_path) and the
user's config, so it checks the token stream and the setup that will train; without tokenizer_path the
rows are measured in bytes (the report's notes say so). With mtp, packed rows are rolled by the installed
Megatron-Core's own roll, so the check fails where that roll trains wrong targets. Sends progress
notifications; honours cancellation and time_limit_s. Takes seconds; the CP check adds a few more
(longer on a busy machine).""",
    ),),
)

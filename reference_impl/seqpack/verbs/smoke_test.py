"""``smoke``: the packing smoke test of one registered path (packed == unpacked, no leakage, CP == CP1)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.choices import PACKING_PATHS, SMOKE_SIZES
from seqpack.core.errors import SeqpackError, UsageError
from seqpack.core.limits import MAX_SMOKE_SECONDS
from seqpack.smoke.report import SmokeReport
from seqpack.verbs.common import check_choice, check_path, check_seed
from seqpack.verbs.validation import check_overrides, config_source

__all__ = ["SmokeOptions", "smoke", "smoke_paths"]

#: The name of the smoke test's working copy of the data rows (``smoke._subset`` writes it).
SMOKE_COPY_NAME = "smoke_input.jsonl"


@dataclass(frozen=True, kw_only=True)
class SmokeOptions:
    """The path, its config (``config_path``, ``config_text`` or a mapping ``config``; none: the path's
    default CP=2 config) with overrides, the data (default: the path's smoke data) and the run's size.

    ``cp_check=False`` skips the multi-process CP check (the report is then ``incomplete``).
    ``model``: options of the reference model (``{"moe": True, "mtp": True}`` or their fields); each adds
    its own check (:mod:`seqpack.smoke.options`).
    """

    path: str = "offline"
    config_path: str | os.PathLike[str] | None = None
    config_text: str | None = None
    config: Mapping[str, Any] | Any = None
    overrides: Sequence[str] = ()
    data: str | os.PathLike[str] | None = None
    size: str = "small"
    seed: int = 1234
    cp_check: bool = True
    cp_max_batches: int = 2
    cp_timeout: float = 120.0
    progress: Callable[[str, float], None] | None = None
    model: Mapping[str, Any] | None = None


def _request(options: SmokeOptions, path: str) -> tuple[Any, dict[str, Any]]:
    """The checked request for ``path`` and the run's shared keyword arguments."""
    from seqpack.smoke.run import SmokeRequest

    check_choice("packing path", path, PACKING_PATHS)
    check_choice("size", options.size, SMOKE_SIZES)
    if not 0 < float(options.cp_timeout) <= MAX_SMOKE_SECONDS:
        raise UsageError(f"cp_timeout must be in (0, {MAX_SMOKE_SECONDS:g}] seconds", field="cp_timeout")
    source = config_source(options.config_path, options.config_text, None, options.config,
                           offered=("config_text", "config_path"))
    request = SmokeRequest(path, source, check_path("data", options.data, allow_none=True),
                           check_overrides(options.overrides), model=dict(options.model or {}))
    shared = dict(
        size=options.size, seed=check_seed(options.seed), cp_check=options.cp_check,
        cp_max_batches=positive_int("cp_max_batches", options.cp_max_batches, maximum=16),
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

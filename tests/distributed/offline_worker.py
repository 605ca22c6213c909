"""Offline packing under torchrun, for tests/test_offline_distributed.py (gloo on CPU, one process per rank).

Run as ``python -m torch.distributed.run --nproc_per_node 2 tests/distributed/offline_worker.py
--cases CASES.json --out DIR`` from the repository root. ``CASES.json`` lists the cases in order;
each is ``{"name", "kind": "cli" | "library", "args" | "kwargs"}``. The first case runs
``seqpack pack`` in-process before any process group exists, so the command detects torchrun and
creates the gloo group itself; the library cases after it reuse that group. Every rank writes
``DIR/rank<R>.json``: per case the result (root, reused, files) or the error (class, message, file,
line), and the CLI's exit code and output.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seqpack.faces import cli  # noqa: E402
from seqpack.core.errors import SeqpackError  # noqa: E402
from seqpack.packing.offline.prepare import prepare_packed_dataset  # noqa: E402


def run_cli(args: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(args)
    return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def run_library(kwargs: dict) -> dict:
    try:
        res = prepare_packed_dataset(**kwargs)
    except SeqpackError as exc:
        return {"error": type(exc).__name__, "message": exc.message, "file": exc.file, "line": exc.line}
    # checked the moment the call returns: every rank must find the directory already renamed into place
    complete = all(Path(f).is_file() for f in (*res.files.values(), res.manifest_path, res.metadata_path))
    return {"root": str(res.root), "reused": res.reused, "files": {k: str(v) for k, v in res.files.items()},
            "complete_on_return": complete}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    opts = parser.parse_args()
    import os

    rank = int(os.environ["RANK"])
    report: dict = {"rank": rank, "world_size": int(os.environ["WORLD_SIZE"]), "cases": {}}
    try:
        for case in json.loads(Path(opts.cases).read_text()):
            if case["kind"] == "cli":
                report["cases"][case["name"]] = run_cli(case["args"])
                continue
            report["cases"][case["name"]] = run_library(case["kwargs"])
    except Exception:  # noqa: BLE001 - reported to the test
        report["crash"] = traceback.format_exc()
    Path(opts.out, f"rank{rank}.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

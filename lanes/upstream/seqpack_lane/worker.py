"""The upstream worker: a long-lived process in the lane's interpreter that answers requests.

Run as a script by the lane's Python 3.12 (``python worker.py OPS_DIR``), never imported by seqpack
and never importing it. Requests arrive one JSON object per line on stdin
(``{"id": 1, "op": "module.name", "args": {...}}``); answers leave one JSON object per line on the
process's original stdout (``{"id": 1, "ok": true, "result": ...}`` or ``"ok": false`` with the
error's type, message and traceback). Everything the upstream libraries print goes to stderr, so
it cannot corrupt the answers. Bulk data travels as files (JSONL, .npy, Parquet, YAML) whose paths
the arguments name.

An op is a function ``op_<name>`` in a module ``OPS_DIR/<module>.py``; its request name is
``<module>.<name>``. Each call sees the environment variables as they were at start: what an op
(or upstream code it runs, e.g. a recipe's ``runtime_config_update``) writes into ``os.environ`` is
undone afterwards.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path


def _load_ops(folder: Path) -> dict:
    ops = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"seqpack_lane_ops_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        for name in dir(module):
            if name.startswith("op_"):
                ops[f"{path.stem}.{name[3:]}"] = getattr(module, name)
    return ops


def main() -> int:
    """Serve requests until stdin closes."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # anything printed (Python or C) goes to stderr
    sys.stdout = sys.stderr
    folder = Path(sys.argv[1])
    sys.path.insert(0, str(folder))  # ops may share helpers in OPS_DIR/_*.py
    ops = _load_ops(folder)
    answers.write(json.dumps({"id": 0, "ok": True, "result": {"ops": sorted(ops), "pid": os.getpid()}}) + "\n")
    environ = dict(os.environ)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        start = time.perf_counter()
        try:
            fn = ops[request["op"]]
            answer = {"ok": True, "result": fn(**request.get("args", {}))}
        except BaseException as exc:  # an op's failure is an answer, never the end of the worker
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not request.get("catch_exit"):
                raise
            answer = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:4000],
                                             "traceback": traceback.format_exc()[-8000:]}}
        finally:
            os.environ.clear()
            os.environ.update(environ)
        answer.update(id=request.get("id"), seconds=round(time.perf_counter() - start, 4))
        answers.write(json.dumps(answer, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

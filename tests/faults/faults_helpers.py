"""Helpers of the fault-injection suite: check a refusal, and prove that nothing was lost.

Every test here injects one fault class (docs/reliability.md lists them) and asserts two things:
the outcome (a clean refusal: exit 2, one line naming file/line/field or path, or an MCP tool error
carrying the reason; or a correct result) and that nothing was lost: inputs byte-identical, no
seqpack temporary left behind, no half-written or broken artifact trusted, and for packs
``rows_in == packed + skipped``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Run:
    """One CLI run: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def refused(self, *needles: str) -> None:
        """Exit 2 with one error line (no traceback, no internal error) that contains every needle."""
        assert self.code == 2, (self.code, self.out, self.err)
        lines = [line for line in self.err.splitlines() if line.strip() and " WARNING " not in line]
        errors = [line for line in lines if ": error: " in line]
        assert len(errors) == 1, self.err
        assert "Traceback" not in self.err and "internal error" not in self.err, self.err
        for needle in needles:
            assert needle in errors[0], (needle, errors[0])

    def refused_with(self, line: str) -> None:
        """Exit 2 with exactly this one error line (and no traceback)."""
        self.refused()
        errors = [x for x in self.err.splitlines() if ": error: " in x and " WARNING " not in x]
        assert errors[0] == line, (errors[0], line)


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """SHA-256 of every file under ``paths`` (files or directories), by path."""
    out = {}
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def temporaries(root: Path) -> list[Path]:
    """seqpack temporaries (``.<name>.seqpack-tmp-...`` / ``seqpack-old``) anywhere under ``root``."""
    return [p for p in root.rglob(".*") if ".seqpack-tmp-" in p.name or ".seqpack-old-" in p.name]


def assert_accounted(manifest: dict[str, Any]) -> None:
    """Every split of a pack manifest: rows_in == packed + skipped."""
    for split, info in manifest["splits"].items():
        acc = info["accounting"]
        assert acc["rows_in"] == acc["packed"] + acc["skipped_total"], (split, acc)


ROWS = [{"prompt": f"question {i} " + "x" * (i % 17), "completion": f"answer {i} " + "y" * (i % 23)}
        for i in range(60)]


# ------------------------------------------------------------------------------------------------
# Runs that could hang or exhaust memory: a forked child with a deadline and an address-space cap
# ------------------------------------------------------------------------------------------------
def _vm_size() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def run_forked(fn: Any, *, timeout: float = 60.0, memory: int = 3 << 30, cwd: Path | None = None) -> Run:
    """``fn()`` (returning an exit code) in a forked child: a :class:`Run` of its exit code, stdout and
    stderr; code 124 when it ran past ``timeout`` s (it is killed), and allocations past ``memory``
    bytes beyond this process's size fail in the child (MemoryError) instead of exhausting the machine."""
    import io
    import os
    import resource
    import signal
    import sys
    import tempfile
    import time

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 70
            try:
                limit = _vm_size() + memory
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                if cwd is not None:
                    os.chdir(cwd)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", write_through=True)
                sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8",
                                              errors="backslashreplace", write_through=True)
                code = int(fn())
            except BaseException as exc:  # noqa: BLE001 - reported through the exit code and stderr
                try:
                    sys.stderr.write(f"child raised {type(exc).__name__}: {exc}\n")
                except BaseException:  # noqa: BLE001
                    pass
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
        code = 124 if status is None else (os.waitstatus_to_exitcode(status))
        out.seek(0)
        err.seek(0)
        return Run(code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))


_FRESH = """
import resource, sys
for name in sys.argv[3:]:
    __import__(name)
from seqpack.faces.cli import main
with open("/proc/self/status", encoding="ascii") as fh:
    size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
limit = size + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.exit(main(__import__("json").loads(sys.argv[2])))
"""


def cli_fresh(*args: Any, memory: int, preload: tuple[str, ...] = (), timeout: float = 120.0) -> Run:
    """``seqpack ARGS`` in a fresh interpreter whose address space may grow ``memory`` bytes past its size once
    ``seqpack.faces.cli`` and the ``preload`` modules are imported: unlike :func:`run_forked`, what a test
    worker loaded earlier (a library already mapped, an allocator's retained pages) cannot change the outcome."""
    import json
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-c", _FRESH, str(memory), json.dumps([str(a) for a in args]),
                               *preload], capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return Run(124, str(exc.stdout or ""), str(exc.stderr or ""))
    return Run(proc.returncode, proc.stdout, proc.stderr)


def cli_forked(*args: Any, timeout: float = 60.0, cwd: Path | None = None) -> Run:
    """``seqpack ARGS`` in a forked child (:func:`run_forked`)."""
    from seqpack.faces.cli import main

    return run_forked(lambda: main([str(a) for a in args]), timeout=timeout, cwd=cwd)


# ------------------------------------------------------------------------------------------------
# Tokenizer directories
# ------------------------------------------------------------------------------------------------
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|> {% endif %}")
SPECIALS = ["[UNK]", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CORPUS = ["hello world", "how are you", "fine thanks", "the answer is yes", "question answer", "be brief"]


def make_tokenizer(directory: Path, *, template: str | None = TEMPLATE, edit: Any = None) -> Path:
    """A tiny WordLevel ``tokenizer.json`` plus ``tokenizer_config.json`` (with ``template`` as its
    chat_template) in ``directory``; ``edit(dict)`` changes the tokenizer.json document first."""
    import json

    import tokenizers

    directory.mkdir(parents=True, exist_ok=True)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, tokenizers.trainers.WordLevelTrainer(special_tokens=SPECIALS))
    doc = json.loads(tok.to_str())
    if edit is not None:
        edit(doc)
    (directory / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    config: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    if template is not None:
        config["chat_template"] = template
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def chat_rows(n: int, *, special: dict[int, str] | None = None) -> str:
    """``n`` chat rows of known words (row ``i`` of ``special`` gets that user text instead)."""
    import json

    rows = []
    for i in range(n):
        user = (special or {}).get(i, "hello world how are you")
        rows.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": "fine thanks"}]})
    return "".join(json.dumps(r) + "\n" for r in rows)


def mounted_tmpfs(tmp_path: Path, name: str, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``64k``, ``256k``) mounted at ``tmp_path / name`` for a fixture to yield (root and
    mount permission needed; the test is skipped otherwise), unmounted afterwards."""
    import os
    import subprocess

    import pytest

    mnt = tmp_path / name
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)

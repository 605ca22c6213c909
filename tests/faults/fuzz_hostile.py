"""A fuzz pass over hostile chat templates, tokenizer files, VLM rows, eval run directories and JSON-RPC lines.

Each case runs in a forked child (:func:`faults_helpers.run_forked`: a deadline and a memory cap)
through the library function every command and MCP tool calls for it, and is classified:

* ``ok``: it worked, or it was refused with a :class:`~seqpack.core.errors.SeqpackError`;
* ``crash``: any other exception, a signal, or MemoryError under the cap;
* ``hang``: the deadline passed;
* ``data_loss``: an input file changed;
* ``silently_wrong``: a check of the result failed (a blend that does not draw what its weights say,
  a JSON-RPC request that got no answer or the wrong id, rows read from a file that changed under
  the reader, a row over the limit that was read, a decompression bomb that was decoded);
* ``escape``: a character that drives a terminal (ESC, CR, a C1 control, a bidirectional override)
  reached what a command printed.

``python tests/faults/fuzz_hostile.py [examples per family] [--only FAMILY,...]`` prints the counts by family and class;
``test_fault_hostile_fuzz.py`` runs a few examples of each family as a test.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faults_helpers import TEMPLATE, make_tokenizer, run_forked  # noqa: E402

OUTCOME = "FUZZ-OUTCOME "


def _classify(fn: Callable[[], str], timeout: float, memory: int = 3 << 30) -> str:
    """Run ``fn`` (returning a class name) in a forked child (``memory`` bytes of address space beyond this
    process's) and map how it ended to a class."""
    def child() -> int:
        from seqpack.core.errors import SeqpackError

        try:
            verdict = fn()
        except SeqpackError:
            verdict = "ok"
        except MemoryError:
            verdict = "crash"
        except Exception as exc:  # noqa: BLE001 - what the fuzz looks for
            verdict = "crash"
            print(f"CRASH {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        print(OUTCOME + verdict)
        return 0

    run = run_forked(child, timeout=timeout, memory=memory)
    verdict = "hang" if run.code == 124 else next(
        (line[len(OUTCOME):] for line in run.out.splitlines() if line.startswith(OUTCOME)), "crash")
    if verdict != "ok":
        DETAILS.append((verdict, run.err[-600:]))
    return verdict


#: ``(class, the end of the child's stderr)`` of every case that was not ``ok`` (for the report).
DETAILS: list[tuple[str, str]] = []


# ------------------------------------------------------------------------------------------------ templates
_INTS = ["0", "1", "-1", "2", "7", "1000", "10 ** 6", "10 ** 10", "10 ** 30", "2 ** 63", "99999999999"]
_STRS = ["''", "'x'", "'ab '", "'\\t'", "'\\n'", "'{:>9}'", "'%s'", "'%99999999999s'", "'{:>99999999999}'"]


def _expr(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(_INTS + _STRS + ["messages", "messages[0]['content']", "messages|length", "loop_var"])
    a, b = _expr(rng, depth - 1), _expr(rng, depth - 1)
    n = rng.choice(_INTS)
    return rng.choice([
        f"({a} * {b})", f"({a} ** {b})", f"({a} + {b})", f"({a} ~ {b})", f"({a} % {b})", f"({a} // {b})",
        f"({a}|center({n}))", f"({a}|indent({n}))", f"({a}|wordwrap({n}))", f"({a}|join)", f"({a}|list)",
        f"({a}|sort)", f"({a}|batch({n})|list)", f"({a}|tojson(indent={n}))", f"({a}|replace('x', {b}))",
        f"({a}|truncate({n}))", f"({a}|string)", f"({a}|sum)", f"({a}|unique|list)", f"({a}|format({b}))",
        f"(({a})|string).ljust({n})", f"(({a})|string).zfill({n})", f"(({a})|string).expandtabs({n})",
        f"(({a})|string).replace('x', ({b})|string)", f"(({a})|string).format({b})", f"range({n})",
        f"lipsum({n})", f"messages[{n}]", f"({a})[{n}]", f"({a})[{n}:]", f"{a}.__class__",
    ])


def _block(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.25:
        return "{{ " + _expr(rng, 2) + " }}"
    body = _block(rng, depth - 1)
    n = rng.choice(_INTS)
    return rng.choice([
        f"{{% for loop_var in range({n}) %}}{body}{{% endfor %}}",
        f"{{% for loop_var in {_expr(rng, 1)} %}}{body}{{% endfor %}}",
        f"{{% macro f(x) %}}{body}{{{{ f(x) }}}}{{% endmacro %}}{{{{ f(1) }}}}",
        f"{{% set ns = namespace(s='xy') %}}{{% for loop_var in range({n}) %}}{{% set ns.s = ns.s ~ ns.s %}}"
        f"{{% endfor %}}{body}",
        f"{{% if {_expr(rng, 1)} %}}{body}{{% else %}}{_block(rng, depth - 1)}{{% endif %}}",
        f"{{% for x in [1] recursive %}}{body}{{{{ loop([1]) }}}}{{% endfor %}}",
        f"{{% set t %}}{body}{body}{{% endset %}}{{{{ t ~ t }}}}",
        body + body,
    ])


def template_case(rng: random.Random, scratch: Path) -> str:
    """A random hostile template, rendered on a real conversation (what pack, plan and batches do per row)."""
    source = _block(rng, 3) + (TEMPLATE if rng.random() < 0.5 else "")
    tok_dir = make_tokenizer(scratch / "tok", template=source)

    def render() -> str:
        from seqpack.data.schemas import Message
        from seqpack.data.tokenizers import load_tokenizer

        load_tokenizer(tok_dir).apply_chat_template([Message("user", "hello world"), Message("assistant", "fine")])
        return "ok"

    verdict = _classify(render, timeout=30)
    if verdict != "ok":
        DETAILS.append((verdict, "template: " + source))
    return verdict


# ------------------------------------------------------------------------------------------------ tokenizer files
def _mutate_json(rng: random.Random, value: Any, depth: int = 0) -> Any:
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        return {**value, key: _mutate_json(rng, value[key], depth + 1)}
    if isinstance(value, list) and value and rng.random() < 0.5:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate_json(rng, value[i], depth + 1), *value[i + 1:]]
    return rng.choice([None, 0, -1, 1e308, "x", "", "[UNK]", [], {}, True, 2 ** 70, [[[]]], {"type": "nonsense"},
                       {"Fixed": 10 ** 11}, {"max_length": 1, "stride": 5, "strategy": "LongestFirst",
                                             "direction": "Right"}])


def tokenizer_case(rng: random.Random, scratch: Path) -> str:
    """A tiny tokenizer directory with one of its files mutated, loaded and used on chat and plain text."""
    tok_dir = make_tokenizer(scratch / "tok")
    name = rng.choice(["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])
    path = tok_dir / name
    if name == "chat_template.jinja":
        cfg = json.loads((tok_dir / "tokenizer_config.json").read_text())
        cfg.pop("chat_template")
        (tok_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
        path.write_bytes(rng.choice([TEMPLATE.encode(), b"\xff\xfe", bytes(range(256)), b"{% for %}"]))
    elif rng.random() < 0.2:
        path.write_bytes(rng.choice([b"", b"\xff", b"[" * 5000, b"{}", b"null", bytes(rng.randrange(256) for _ in range(64))]))
    else:
        doc = json.loads(path.read_text())
        for _ in range(rng.randint(1, 3)):
            doc = _mutate_json(rng, doc)
        path.write_text(json.dumps(doc))

    def use() -> str:
        from seqpack.data.schemas import Message
        from seqpack.data.tokenizers import load_tokenizer

        tok = load_tokenizer(tok_dir)
        tok.encode("hello zzz world")
        tok.decode([0, 1, 2])
        tok.apply_chat_template([Message("user", "hello qqq"), Message("assistant", "fine thanks")])
        return "ok"

    return _classify(use, timeout=30)


# ------------------------------------------------------------------------------------------------ VLM rows
def _media(scratch: Path) -> Path:
    import struct
    import zlib

    from PIL import Image

    d = scratch / "media"
    d.mkdir(exist_ok=True)
    Image.new("RGB", (32, 32)).save(d / "small.png")
    Image.new("RGB", (4000, 10)).save(d / "wide.png")
    Image.new("RGB", (64, 4096)).save(d / "tall.png")

    def header(w: int, h: int) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b""))

    (d / "bomb.png").write_bytes(header(100_000, 100_000))
    (d / "big.png").write_bytes(header(9000, 9000))
    (d / "zero.png").write_bytes(header(0, 10))
    (d / "noise.png").write_bytes(bytes(range(200)))
    return d


def _image_ref(rng: random.Random) -> Any:
    return rng.choice(["small.png", "wide.png", "tall.png", "bomb.png", "big.png", "zero.png", "noise.png",
                       "missing.png", ".", "", 5, None, {"path": "small.png"}, {"pixels": [[[1, 2, 3]]]},
                       {"pixels": [[[300, 0, 0]]]}, {"pixels": [[[0.5, float("nan"), 0]]]}, {"pixels": "x"},
                       {"pixels": [[[1]]]}, {"pixels": []}, {"path": 7}])


def vlm_case(rng: random.Random, scratch: Path) -> str:
    """A random VLM row through the header check (plan), the full encode (batches) and energon-prepare's media step."""
    media = _media(scratch)
    images = [_image_ref(rng) for _ in range(rng.randint(0, 3))]
    videos = [rng.choice([
        {"frames": [_image_ref(rng) for _ in range(rng.choice([0, 1, 2, 3, 257]))],
         "fps": rng.choice([2, 0.5, 0, -1, "fast", float("nan"), float("inf"), True, None, 1e308])},
        "small.png", {"frames": "x"}, {}, None]) for _ in range(rng.randint(0, 2))]
    markers = "<image> " * rng.choice([len(images), max(0, len(images) - 1), len(images) + 1])
    markers += "<video> " * rng.choice([len(videos), len(videos) + 1])
    row: dict[str, Any] = {"messages": [{"role": "user", "content": markers + "what is it"},
                                        {"role": "assistant", "content": "an answer"}]}
    if images or rng.random() < 0.3:
        row["images"] = images
    if videos:
        row["videos"] = videos
    path = media / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")

    def check() -> str:
        from seqpack.data.schemas import ChatSchema
        from seqpack.data.tokenizers import ByteTokenizer
        from seqpack.data.vlm.vision import vision_spec
        from seqpack.data.vlm.sample import tokenize_vlm_row, vlm_sample_length
        from seqpack.core.errors import SeqpackError
        from seqpack.packing.energon.prepare import _media_members

        schema, tok, spec = ChatSchema(), ByteTokenizer(), vision_spec(rng.choice(["qwen2_vl", "tiny"]))
        for step in (lambda: vlm_sample_length(row, schema, tok, vision=spec, base_dir=media, max_length=1 << 20),
                     lambda: tokenize_vlm_row(row, schema, tok, vision=spec, base_dir=media, max_length=1 << 20),
                     lambda: _media_members(row, 0, media, None, schema)):
            try:
                step()
            except SeqpackError:
                pass
        return "ok"

    return _classify(check, timeout=60)


# ------------------------------------------------------------------------------------------------ arguments
def argument_case(rng: random.Random, scratch: Path) -> str:
    """Random numbers into the finite-number, length and blend checks; a blend must draw what its weights say."""
    odd = rng.choice(["0", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "1e400", "2", "0.5", "1e5", "True", "x"])
    which = rng.choice(["mrope", "lifetime", "simulate", "image-tokens", "blend", "judge"])

    def check() -> str:
        from seqpack.faces.cli import main

        if which == "blend":
            weights = [rng.choice([1e308, 1e300, 5e-324, 1.0, 3.0, 1e-300]) for _ in range(3)]
            rows = "".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(40))
            for k in range(3):
                (scratch / f"s{k}.jsonl").write_text(rows)
            spec = [x for k, w in enumerate(weights) for x in (w, str(scratch / f"s{k}.jsonl"))]
            (scratch / "blend.json").write_text(json.dumps(spec))
            from seqpack.packing.offline.sources import read_blend_manifest, resolve_stream

            stream = resolve_stream(read_blend_manifest(scratch / "blend.json")["training"], seed=1, num_samples=120)
            drawn = [int(s["drawn"]) for s in stream.describe()]
            scaled = [w / max(weights) for w in weights]  # the expectation must not overflow either
            want = [120 * w / sum(scaled) for w in scaled]
            if sum(drawn) != 120 or any(abs(d - x) > 1 for d, x in zip(drawn, want)):
                return "silently_wrong"
            return "ok"
        args = {
            "mrope": ["mrope", "text:3,video:2x4x4@" + odd + ",text:2", "--model", "qwen2_5_vl",
                      "--tokens-per-second", odd],
            "lifetime": ["mcp", "--transport", "http", "--port", "18998", "--lifetime", odd],
            "simulate": ["simulate", "--lengths", f"{odd},3", "--pack-size", "8"],
            "image-tokens": ["image-tokens", "--height", odd, "--width", "4000", "--frames", odd],
            "judge": ["eval", "score", str(scratch / "nowhere"), "--judge-timeout", odd],
        }[which]
        if which == "lifetime" and odd in ("2", "0.5", "1e5", "1e-320"):
            return "ok"  # a valid lifetime serves (the MCP tests cover that)
        try:
            code = main(args)
        except SystemExit as exc:  # argparse refusing a value: exit 2 with its one line
            code = exc.code if isinstance(exc.code, int) else 2
        return "ok" if code in (0, 1, 2) else "crash"

    return _classify(check, timeout=30)


# ------------------------------------------------------------------------------------------------ eval run dirs
def eval_case(rng: random.Random, scratch: Path, base: Path) -> str:
    """A run directory with run.json or the transcript mutated, scored."""
    import shutil

    d = scratch / "run"
    shutil.copytree(base, d, ignore=shutil.ignore_patterns("work", "scores.json"))
    target = rng.choice([d / "run.json", *sorted((d / "transcripts").glob("*.json"))])
    if rng.random() < 0.2:
        target.write_bytes(rng.choice([b"", b"\xff", b"[" * 5000, b"null", b"{", bytes(range(256))]))
    else:
        doc = json.loads(target.read_text())
        for _ in range(rng.randint(1, 3)):
            doc = _mutate_json(rng, doc)
        target.write_text(json.dumps(doc))
    tasks_before = hashlib.sha256((d / "tasks.json").read_bytes()).hexdigest()

    def score() -> str:
        from seqpack_evals.scoring import score_run

        score_run(d)
        return "ok" if hashlib.sha256((d / "tasks.json").read_bytes()).hexdigest() == tasks_before else "data_loss"

    return _classify(score, timeout=60)


# ------------------------------------------------------------------------------------------------ JSON-RPC lines
def wire_case(rng: random.Random, scratch: Path) -> str:
    """A random malformed or odd JSON-RPC line: the stand-in must be valid, keep a usable id, and good lines pass."""
    ident = rng.choice([1, "a", None, 2 ** 70, {"x": 1}, [1], True, 1.5])
    params = rng.choice([{"name": "derive_alignment", "arguments": {"cp": 2}}, [1], "x", None, 5,
                         {"name": "x\ud800"}, {"arguments": {"s": "\udc00"}}, {"a": [[[[[]]]]]}])
    msg = {"jsonrpc": rng.choice(["2.0", "1.0", None]), "id": ident, "method": rng.choice(["tools/call", None, 5]),
           "params": params}
    for key in [k for k in msg if rng.random() < 0.2]:
        msg.pop(key)
    line = json.dumps(msg)
    if rng.random() < 0.2:
        line = line[: rng.randrange(len(line))]

    def check() -> str:
        from seqpack.faces.mcp.wire import MALFORMED, checked_line

        out = checked_line(line)
        if out == line and not line.strip():
            return "ok"  # a blank line is no message and wants no answer
        if out == line:
            from mcp_types import jsonrpc_message_adapter

            jsonrpc_message_adapter.validate_json(line, by_name=False)  # a line passed through must be readable
            return "ok"
        stand_in = json.loads(out)
        if stand_in.get("method") != MALFORMED:
            return "silently_wrong"
        got = stand_in["params"]["id"]
        if got is not None and not (isinstance(got, (str, int)) and not isinstance(got, bool)):
            return "silently_wrong"
        return "ok"

    return _classify(check, timeout=10)


# ------------------------------------------------------------------------------------------------ hostile agents
_AGENT_PARTS = {
    "fork_hold": "pid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(300)\n    os._exit(0)\n",
    "fork_plain": "pid = os.fork()\nif pid == 0:\n    time.sleep(300)\n    os._exit(0)\n",
    "double_fork": ("pid = os.fork()\nif pid == 0:\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(300)\n"
                    "    os._exit(0)\n"),
    "flood_out": "chunk = b'y' * (1 << 20)\nfor _ in range({mb}):\n    sys.stdout.buffer.write(chunk)\nsys.stdout.flush()\n",
    "flood_err": "chunk = b'e' * (1 << 20)\nfor _ in range({mb}):\n    sys.stderr.buffer.write(chunk)\n",
    "bad_bytes": "sys.stdout.buffer.write(bytes(range(256)) * 100)\nsys.stdout.flush()\n",
    "deep": "d = os.open('.', os.O_RDONLY)\nfor _ in range({depth}):\n    os.mkdir('q', dir_fd=d)\n"
            "    d = os.open('q', os.O_RDONLY, dir_fd=d)\n",
    "links": ("os.symlink('/', 'root')\nos.symlink('/proc', 'proc')\nos.symlink('loop', 'loop')\n"
              "os.symlink({outside!r}, 'outside')\nos.symlink('nowhere', 'dangling')\n"),
    "fifo": "os.mkfifo('pipe')\n",
    "mode000": "open('locked', 'w').write('x')\nos.chmod('locked', 0)\nos.mkdir('shut')\nos.chmod('shut', 0)\n",
    "odd_names": "open(b'\\xff\\xfe-name'.decode('utf-8', 'surrogateescape'), 'w').write('x')\nopen('n' * 250, 'w').write('x')\n",
    "replace_cwd": "import shutil\nhere = os.getcwd()\nos.chdir('..')\nshutil.rmtree(here)\nos.symlink({target!r}, here)\n",
    "close_out": "os.close(1)\n",
    "sleep": "time.sleep(300)\n",
    "exit": "os._exit({code})\n",
}


def agent_case(rng: random.Random, scratch: Path, env: Path) -> str:
    """A random agent made of hostile behaviours (children that leave the group and hold the pipes, floods, deep
    trees, links out of the working directory, FIFOs, unreadable files, a working directory swapped for a link),
    run by ``eval run`` with or without the sandbox; it must finish in bounded time, leave nothing outside its
    working directory changed, and bring nothing from outside into the run directory."""
    outside = scratch / "outside.txt"
    outside.write_text("SECRET-OUTSIDE")
    parts = rng.sample(sorted(_AGENT_PARTS), rng.randint(1, 4))
    body = "import os, sys, time\n" + "".join(_AGENT_PARTS[k].format(
        mb=rng.choice([1, 8, 64]), depth=rng.choice([10, 70, 1300]), outside=str(outside),
        target=rng.choice(["/proc", "/", str(scratch)]), code=rng.choice([0, 1, 137, 255])) for k in parts)
    script = scratch / "agent.py"
    script.write_text(body)
    sandbox = rng.random() < 0.5

    def run() -> str:
        from seqpack_evals.runner import RunOptions, run_eval
        from seqpack_evals.tasks import load_tasks
        from seqpack_evals.transcript import read_transcript

        ds = load_tasks()
        task = ds.select([rng.choice(["nm-struct-pack", "ctx-log-pack-malformed-json"])])
        out = scratch / "run"
        run_eval(ds, task, f"python {script}", out, mode="baseline", timeout=4,
                 options=RunOptions(sandbox=sandbox, read_only=[str(script)], product_env=env))
        tr = read_transcript(out / "transcripts" / f"{task[0].id}.json")
        if outside.read_text() != "SECRET-OUTSIDE":
            return "data_loss"
        kept = [p for p in (out / "tasks").rglob("*") if p.is_file() or p.is_symlink()]
        if any(p.is_symlink() or b"SECRET-OUTSIDE" in p.read_bytes() for p in kept) or len(tr.stdout) > 6_000_000:
            return "escape"
        return "ok"

    verdict = _classify(run, timeout=120)
    if verdict != "ok":
        DETAILS.append((verdict, f"agent ({'sandbox' if sandbox else 'no sandbox'}): {parts}"))
    return verdict


def tree_case(rng: random.Random, scratch: Path) -> str:
    """A random hostile working-directory tree, snapshotted, kept and removed by the harness's walker."""
    root = scratch / "w"
    root.mkdir()
    outside = scratch / "outside.txt"
    outside.write_text("SECRET-OUTSIDE")
    fd = os.open(root, os.O_RDONLY)
    for _ in range(rng.choice([0, 5, 65, 1500])):
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    for k in range(rng.randint(1, 6)):
        kind = rng.choice(["file", "link_out", "link_loop", "link_proc", "fifo", "mode000", "dir000", "odd", "sock"])
        path = root / f"x{k}"
        if kind == "file":
            path.write_bytes(os.urandom(rng.choice([0, 10, 70_000])))
        elif kind == "link_out":
            path.symlink_to(rng.choice([outside, scratch, Path("/")]))
        elif kind == "link_loop":
            path.symlink_to(path.name)
        elif kind == "link_proc":
            path.symlink_to("/proc/self")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "mode000":
            path.write_text("x")
            path.chmod(0)
        elif kind == "dir000":
            path.mkdir()
            (path / "in").write_text("x")
            path.chmod(0)
        elif kind == "odd":
            (root / os.fsdecode(b"\xff\xfe" + str(k).encode())).write_text("x")
        else:
            import socket

            s = socket.socket(socket.AF_UNIX)
            try:
                s.bind(str(path))
            except OSError:
                pass
            s.close()

    return _classify(lambda: check_tree(root, scratch, outside), timeout=60)


def check_tree(root: Path, scratch: Path, outside: Path) -> str:
    """Snapshot, keep and remove ``root`` as the harness does; ``escape`` when the kept copy holds a link or the
    content of ``outside``, ``data_loss`` when ``outside`` or ``/proc`` suffered."""
    import json as _json

    from seqpack_evals import workdirs

    files, notes = workdirs.snapshot(root)
    _json.dumps({"files": files, "notes": notes})  # what the transcript must be able to hold
    workdirs.keep(root, scratch / "kept")
    kept = [p for p in _files(scratch / "kept")]
    escaped = any(p.is_symlink() or (p.is_file() and b"SECRET-OUTSIDE" in p.read_bytes()) for p in kept)
    workdirs.remove_tree(scratch / "kept")
    workdirs.remove_tree(root)
    if escaped:
        return "escape"
    if outside.read_text() != "SECRET-OUTSIDE" or not Path("/proc/self").exists():
        return "data_loss"
    return "ok"


# ------------------------------------------------------------------------------------------------ files that change
def _jsonl_rows(rng: random.Random, n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"prompt": f"q{i}{tag} " + "x" * rng.randrange(0, 3000), "completion": f"a{i}{tag}"} for i in range(n)]


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _change_file(rng: random.Random, path: Path, how: str) -> None:
    import os

    size = path.stat().st_size
    if how == "shrink":
        os.truncate(path, rng.randrange(0, size))
    elif how == "empty":
        os.truncate(path, 0)
    elif how == "rewrite":  # other rows, the same size
        text = "".join(json.dumps(r) + "\n" for r in _jsonl_rows(rng, 400, "z")).encode()[:size]
        with open(path, "r+b") as fh:
            fh.write(text.ljust(size, b" "))
    elif how == "grow":
        with open(path, "ab") as fh:
            fh.write(b'{"prompt": "late", "completion": "row"}\n')
    elif how == "regrow":  # log rotation by truncation, then new lines
        os.truncate(path, 0)
        _write_rows(path, _jsonl_rows(rng, 500, "new"))
    elif how == "rename":
        fresh = path.with_name("fresh.jsonl")
        _write_rows(fresh, _jsonl_rows(rng, 3, "renamed"))
        os.replace(fresh, path)
    elif how == "touch":
        os.utime(path)


def changing_case(rng: random.Random, scratch: Path) -> str:
    """A JSONL file changed in place (or replaced) at a random read while rows are read, packed, or packed by two
    workers: every row returned must be the file's own, and a pack that succeeds must equal a clean one."""
    rows = _jsonl_rows(rng, rng.randint(5, 400))
    path = scratch / "d.jsonl"
    _write_rows(path, rows)
    how = rng.choice(["shrink", "empty", "rewrite", "grow", "regrow", "rename", "touch", "none"])
    at = rng.randrange(1, len(rows) + 2)
    reader = rng.choice(["rows", "pack", "pack2"])

    def check() -> str:
        from seqpack.data.jsonl import JsonlFile
        from seqpack.verbs.packing import PackOptions, pack

        clean = None
        if reader != "rows":
            clean = pack(PackOptions(input=str(path), out=str(scratch / "clean"), pack_size=4096))
        from seqpack.data import jsontext
        jsontext._FAST = False  # rows read one by one (row()), so the hook below sees each read
        real, state = JsonlFile.row, {"n": 0}

        def row(self: Any, i: int) -> Any:
            state["n"] += 1
            if state["n"] == at and how != "none":
                _change_file(rng, path, how)
            return real(self, i)

        JsonlFile.row = row  # type: ignore[method-assign]
        if reader == "rows":
            jf = JsonlFile(path, use_cache=rng.random() < 0.5)
            return "ok" if [jf.row(i) for i in range(len(jf))] == rows else "silently_wrong"
        got = pack(PackOptions(input=str(path), out=str(scratch / "again"), pack_size=4096,
                               workers=2 if reader == "pack2" else 1))
        same = all(got.files[k].read_bytes() == clean.files[k].read_bytes() for k in clean.files)  # type: ignore[union-attr]
        return "ok" if same else "silently_wrong"

    return _classify(check, timeout=120)


# ------------------------------------------------------------------------------------------------ exhaustion
def exhaustion_case(rng: random.Random, scratch: Path) -> str:
    """Rows around a random row-size limit, read and tokenized under a random address-space cap: a row over the
    limit is refused unread, one under it is read whole, and running out of memory is a seqpack error."""
    limit = rng.choice([64, 1000, 4096, 65536, 1 << 20])
    sizes = [max(30, limit + rng.randint(-40, 40)) if rng.random() < 0.6 else rng.randint(30, 2 * limit + 60)
             for _ in range(rng.randint(1, 12))]
    if rng.random() < 0.3:
        sizes.append(rng.choice([8 << 20, 24 << 20]))  # rows that take memory to tokenize
    rows = []
    for size in sizes:
        pad = max(0, size - len(json.dumps({"prompt": "", "completion": "a"})))
        rows.append({"prompt": "y" * pad, "completion": "a"})
    path = scratch / "rows.jsonl"
    _write_rows(path, rows)
    memory = rng.choice([3 << 30, 400 << 20, 200 << 20])

    def check() -> str:
        import seqpack.data.jsonl as jsonl
        from seqpack.core.errors import InputError
        from seqpack.data.schemas import default_schema
        from seqpack.data.tokenize import tokenize_batch
        from seqpack.data.tokenizers import ByteTokenizer

        jsonl.MAX_ROW_BYTES = max(limit, 64)
        jf = jsonl.JsonlFile(path)
        kept = []
        for i in range(len(jf)):
            over = int(jf.index.ends[i] - jf.index.starts[i]) > jsonl.MAX_ROW_BYTES
            try:
                value = jf.row(i)
            except InputError as err:
                if over and "over the limit" in err.message:
                    continue
                if "ran out of memory" in err.message:
                    continue
                return "silently_wrong" if over or "over the limit" in err.message else "ok"
            if over or value != rows[i]:
                return "silently_wrong"
            kept.append(value)
        if kept:
            tokenize_batch(kept, default_schema("prompt_completion"), ByteTokenizer(), max_length=1 << 22)
        return "ok"

    return _classify(check, timeout=120, memory=memory)


# ------------------------------------------------------------------------------------------------ terminal bytes
_DRIVING = ["\x1b[2J", "\x1b]0;title\x07", "\r", "\x08", "\x07", "\x7f", "\x9b31m", "\x85", "\u202e", "\u2066",
            "\u200b", "\u2028", "\u2029", "\ufeff", "\x00"]


def _hostile_text(rng: random.Random) -> str:
    parts = [rng.choice(["a", "é", "中", "x y", "-", ".", "data"]) for _ in range(rng.randint(1, 4))]
    for _ in range(rng.randint(1, 3)):
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(_DRIVING))
    return "".join(parts).replace("\x00", "0") if rng.random() < 0.5 else "".join(parts).replace("\x00", "")


def terminal_case(rng: random.Random, scratch: Path) -> str:
    """A string that could drive a terminal, in a file name, a column, an image path in a row, a blend source,
    an output path or an unknown flag: nothing a command prints may carry it raw."""
    bad = _hostile_text(rng)
    data = scratch / "d.jsonl"
    _write_rows(data, [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(6)])
    where = rng.choice(["file", "column", "image", "blend", "out", "flag", "inspect", "log"])

    def check() -> str:
        import contextlib
        import io
        import logging

        from seqpack.faces.cli import main

        if where == "log":
            from seqpack.faces.mcp.server import TerminalSafeFormatter

            record = logging.LogRecord("seqpack.mcp", logging.INFO, __file__, 1, "%s", (bad,), None)
            text = TerminalSafeFormatter("%(message)s").format(record)
        else:
            args = {
                "file": ["pack", str(scratch / f"{bad}.jsonl"), "--out", str(scratch / "o"), "--pack-size", "256"],
                "column": ["pack", str(data), "--prompt-column", bad, "--out", str(scratch / "o"), "--pack-size", "256"],
                "out": ["pack", str(data), "--out", str(scratch / f"o{bad}"), "--pack-size", "256", "--no-progress"],
                "flag": ["plan", "--jsonl", str(data), f"--{bad}"],
                "inspect": ["inspect", str(scratch / f"p{bad}")],
            }.get(where)
            if where == "image":
                (scratch / "v.jsonl").write_text(json.dumps({"prompt": "<image> q", "completion": "a",
                                                             "images": [f"{bad}.png"]}) + "\n")
                args = ["plan", "--jsonl", str(scratch / "v.jsonl"), "--vision", "qwen2_vl"]
            if where == "blend":
                (scratch / "b.json").write_text(json.dumps([1.0, f"{bad}.jsonl"]))
                args = ["pack", str(scratch / "b.json"), "--out", str(scratch / "o"), "--pack-size", "256"]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main(args)
                except SystemExit:
                    pass
            text = out.getvalue() + err.getvalue()
        raw = [ch for ch in text if not ch.isprintable() and ch not in "\n\t"]
        return "escape" if raw else "ok"

    return _classify(check, timeout=60)


# ------------------------------------------------------------------------------------------------ HTTP guard
def http_case(rng: random.Random, scratch: Path) -> str:
    """The HTTP transport's guards: concurrent requests with reused ids (every one answered once, a duplicate in
    flight refused), random Host and Origin headers (accepted only for this port), random query strings (no
    value reaches the log)."""
    which = rng.choice(["ids", "host", "redact"])

    def check() -> str:
        import anyio

        from seqpack.faces.mcp import http_guard

        if which == "redact":  # a value, named or bare, never survives (names are kept)
            secrets = ["".join(rng.choice("abcXYZ019-_.~%") for _ in range(rng.randint(8, 30)))
                       for _ in range(rng.randint(1, 4))]
            query = "&".join(rng.choice([f"token={v}", f"k{i}={v}", v, f"x={v}&", f"=={v}", f"a={v}=b"])
                             for i, v in enumerate(secrets))
            line = http_guard.redact_query(f"/mcp?{query}")
            return "silently_wrong" if any(v in line for v in secrets) else "ok"
        if which == "host":
            from starlette.requests import Request

            from mcp.server.transport_security import TransportSecurityMiddleware

            port = rng.randint(1024, 65000)
            host = rng.choice(["127.0.0.1", "localhost", "[::1]", "evil.example", "127.0.0.1.nip.io", "LOCALHOST",
                               "127.0.0.2"]) + rng.choice(["", f":{port}", f":{port + 1}", f":{port - 1}", ":80", ":*"])
            origin = rng.choice([None, f"http://{host}", f"http://127.0.0.1:{port}", f"http://localhost:{port + 1}",
                                 "null", "http://evil.example"])
            headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
            request = Request({"type": "http", "method": "GET", "path": "/mcp", "headers": headers})
            refused = anyio.run(TransportSecurityMiddleware(http_guard.transport_security(port)).validate_request,
                                request)
            ok_hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
            want = host in ok_hosts and (origin is None or origin in {f"http://{h}" for h in ok_hosts})
            return "ok" if (refused is None) == want else "silently_wrong"
        return anyio.run(_ids_check, rng)

    return _classify(check, timeout=60)


async def _ids_check(rng: random.Random) -> str:
    """Requests arriving together: per (session, id) exactly one reaches the app; the rest get -32600 at once."""
    import anyio

    from seqpack.faces.mcp.http_guard import DistinctRequestIds

    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen.append(json.loads(message["body"]).get("id"))
        await anyio.sleep(0.2)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = DistinctRequestIds(app)
    requests = []
    for _ in range(rng.randint(1, 8)):
        session = rng.choice([None, "s1", "s2"])
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": rng.choice(["tools/call", "ping"])}
        if rng.random() < 0.85:
            body["id"] = rng.choice([1, 2, "a", 1.5, True, None])
        requests.append((session, body))
    answers: list[list[int]] = [[] for _ in requests]

    async def one(k: int) -> None:
        session, body = requests[k]
        headers = [(b"mcp-session-id", session.encode())] if session else []
        sent = False

        async def receive() -> Any:
            nonlocal sent
            if sent:
                await anyio.sleep(10)
            sent = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                answers[k].append(message["status"])

        await guard({"type": "http", "method": "POST", "headers": headers}, receive, send)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for k in range(len(requests)):
                tg.start_soon(one, k)
    if any(len(a) != 1 for a in answers):
        return "silently_wrong"  # unanswered, or answered twice
    groups: dict[Any, list[int]] = {}
    for k, (session, body) in enumerate(requests):
        ident = body.get("id")
        if session and isinstance(ident, (str, int)) and not isinstance(ident, bool):
            groups.setdefault((session, json.dumps(ident)), []).append(answers[k][0])
        elif answers[k][0] != 200:
            return "silently_wrong"  # nothing to compare with: must pass
    return "ok" if all(sorted(g) == [200] + [400] * (len(g) - 1) for g in groups.values()) else "silently_wrong"


# ------------------------------------------------------------------------------------------------ Parquet files
def parquet_case(rng: random.Random, scratch: Path) -> str:
    """A packed-looking Parquet file with duplicated, missing or mistyped columns, bombs of zeros under a random
    bound, and odd row groups: read as inspect reads it; a bomb the footer reveals must be refused unread."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = rng.randint(1, 6)
    width = rng.choice([3, 50, 5000, 200_000])
    zeros = rng.random() < 0.4
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width)
    ids = np.zeros(rows * width, np.int64) if zeros else np.asarray([rng.randrange(1000) for _ in range(rows * width)]
                                                                     if width < 5000 else
                                                                     np.random.default_rng(rng.randrange(99)).integers(
                                                                         0, 1000, rows * width), np.int64)
    mask = np.zeros(rows * width, np.int8)
    columns = {"input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids)),
               "loss_mask": pa.ListArray.from_arrays(offsets, pa.array(mask)),
               "seq_start_id": pa.array([[0]] * rows)}
    names = list(columns)
    if rng.random() < 0.3:
        names.append(rng.choice(names))  # a duplicated column name
    if rng.random() < 0.15:
        names.remove(rng.choice(list(columns)))
    if rng.random() < 0.15:
        columns["loss_mask"] = pa.array([[str(x) for x in range(3)]] * rows)
    path = scratch / "p.parquet"
    pq.write_table(pa.Table.from_arrays([columns[n] for n in names], names=names), path,
                   row_group_size=rng.choice([1, rows]), compression=rng.choice(["zstd", "snappy", "none"]))
    bound = rng.choice([1 << 10, 1 << 16, 1 << 20, 1 << 28])

    def check() -> str:
        import seqpack.core.limits as limits
        from seqpack.core.errors import ArtifactError
        from seqpack.packing.parquet import PackedParquetReader, _group_bytes

        limits.MAX_INFLATED_ROW_GROUP_BYTES = bound
        meta = pq.ParquetFile(path).metadata
        bombs = [g for g in range(meta.num_row_groups)
                 if (lambda d: d[1] > bound and d[1] >= limits.PARQUET_BOMB_RATIO * max(d[0], 1))(_group_bytes(meta, g))]
        try:
            reader = PackedParquetReader(path)
            for _ in reader.iter_rows():
                pass
        except ArtifactError as err:
            if "damaged" in err.message and ("out of memory" in err.message.lower() or bombs):
                return "silently_wrong"  # a bomb (or memory) called damaged
            return "ok"
        return "silently_wrong" if bombs else "ok"

    return _classify(check, timeout=60, memory=rng.choice([3 << 30, 300 << 20]))


# ------------------------------------------------------------------------------------------------ prompt arguments
def prompt_case(rng: random.Random, scratch: Path) -> str:
    """Random prompt arguments: a valid set renders, anything else is -32602 naming the problem (no other error)."""
    name = rng.choice(["configure_packing", "diagnose_packing_error", "no_such_prompt"])
    keys = rng.sample(["job", "config_text", "error_log", "errorlog", "Job", "config", "", "x" * 300], rng.randint(0, 3))
    arguments = {k: rng.choice(["text", "", 5, None, ["x"], {"a": 1}, True, "\x1b[2J"]) for k in keys}

    def check() -> str:
        import anyio
        from mcp.shared.exceptions import MCPError

        from seqpack.faces.mcp.server import build_server

        server = build_server([scratch], skill_dir=None)
        declared = {"configure_packing": {"job": False, "config_text": False},
                    "diagnose_packing_error": {"error_log": True, "config_text": False}}.get(name)
        valid = declared is not None and all(k in declared and isinstance(v, str) for k, v in arguments.items()) \
            and all(k in arguments for k, required in declared.items() if required)
        try:
            anyio.run(server.get_prompt, name, arguments)
        except MCPError as err:
            return "ok" if not valid and err.error.code == -32602 else "silently_wrong"
        return "ok" if valid else "silently_wrong"

    return _classify(check, timeout=60)


FAMILIES = ("templates", "tokenizer_files", "vlm_rows", "arguments", "eval_runs", "json_rpc", "hostile_agents",
            "workdir_trees", "changing_files", "exhaustion", "terminal", "http_guard", "parquet_files",
            "prompt_arguments")


def fuzz_pass(examples: int, scratch_root: Path, *, seed: int = 0, eval_base: Path | None = None,
              eval_env: Path | None = None, families: tuple[str, ...] = FAMILIES) -> dict[str, Counter]:
    """``examples`` cases of every family (of ``families``); the counts of each outcome class by family
    (``eval_env``: the product environment the hostile agents run with; without it their family is left out)."""
    rng = random.Random(seed)
    counts: dict[str, Counter] = {f: Counter() for f in families}
    for family in families:
        if (family == "eval_runs" and eval_base is None) or (family == "hostile_agents" and eval_env is None):
            continue
        for i in range(examples):
            scratch = scratch_root / f"{family}-{i}"
            scratch.mkdir(parents=True)
            case = {"templates": template_case, "tokenizer_files": tokenizer_case, "vlm_rows": vlm_case,
                    "arguments": argument_case, "json_rpc": wire_case, "workdir_trees": tree_case,
                    "changing_files": changing_case, "exhaustion": exhaustion_case, "terminal": terminal_case,
                    "http_guard": http_case, "parquet_files": parquet_case, "prompt_arguments": prompt_case}.get(family)
            if family == "eval_runs":
                verdict = eval_case(rng, scratch, eval_base)  # type: ignore[arg-type]
            elif family == "hostile_agents":
                verdict = agent_case(rng, scratch, eval_env)  # type: ignore[arg-type]
            else:
                verdict = case(rng, scratch)  # type: ignore[misc]
            counts[family][verdict] += 1
            _remove(scratch)
    return counts


def _files(root: Path) -> list[Path]:
    """Every entry under ``root``, iteratively (a tree may be deeper than Python's recursion limit)."""
    out, stack = [], [root]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            out.append(Path(e.path))
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
    return out


def _remove(path: Path) -> None:
    """Remove a case's scratch folder, whatever the case left (mode-000 folders, deep trees, links)."""
    from seqpack_evals.workdirs import remove_tree

    for p in [path, *_files(path)] if path.exists() else []:
        try:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o700)
        except OSError:
            pass
    remove_tree(path)


if __name__ == "__main__":  # the report's pass: python tests/faults/fuzz_hostile.py 200 [--only FAMILY,...]
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 50
    only = tuple(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv[:-1] else FAMILIES
    if set(only) - set(FAMILIES):
        sys.exit(f"unknown families {sorted(set(only) - set(FAMILIES))}; choose from {', '.join(FAMILIES)}")
    with tempfile.TemporaryDirectory() as tmp:
        from seqpack.faces.cli import main
        from seqpack_evals.sandbox import build_product_env
        from seqpack_evals.tasks import load_tasks

        env = Path(tmp) / "env"
        build_product_env(env)
        base = Path(tmp) / "run0"
        main(["eval", "run", "--agent-cmd", "echo answer", "--baseline", "--out", str(base),
              "--tasks", load_tasks().tasks[0].id, "--product-env", str(env)])
        result = fuzz_pass(n, Path(tmp) / "cases", eval_base=base, eval_env=env, families=only)
    for family, c in result.items():
        print(f"{family:16s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    for verdict, err in DETAILS:
        print(f"NOT OK ({verdict}): {err[-300:]}")

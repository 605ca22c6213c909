"""A fuzz pass over hostile chat templates, tokenizer files, VLM rows, eval run directories and JSON-RPC lines.

Each case runs in a forked child (:func:`faults_helpers.run_forked`: a deadline and a memory cap)
through the library function every command and MCP tool calls for it, and is classified:

* ``ok``: it worked, or it was refused with a :class:`~seqpack.core.errors.SeqpackError`;
* ``crash``: any other exception, a signal, or MemoryError under the cap;
* ``hang``: the deadline passed;
* ``data_loss``: an input file changed;
* ``silently_wrong``: a check of the result failed (a blend that does not draw what its weights say,
  a JSON-RPC request that got no answer or the wrong id).

``python tests/faults/fuzz_hostile.py [examples per family]`` prints the counts by family and class;
``test_fault_hostile_fuzz.py`` runs a few examples of each family as a test.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faults_helpers import TEMPLATE, make_tokenizer, run_forked  # noqa: E402

OUTCOME = "FUZZ-OUTCOME "


def _classify(fn: Callable[[], str], timeout: float) -> str:
    """Run ``fn`` (returning a class name) in a forked child and map how it ended to a class."""
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

    run = run_forked(child, timeout=timeout)
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


FAMILIES = ("templates", "tokenizer_files", "vlm_rows", "arguments", "eval_runs", "json_rpc")


def fuzz_pass(examples: int, scratch_root: Path, *, seed: int = 0, eval_base: Path | None = None) -> dict[str, Counter]:
    """``examples`` cases of every family; the counts of each outcome class by family."""
    import shutil

    rng = random.Random(seed)
    counts: dict[str, Counter] = {f: Counter() for f in FAMILIES}
    for family in FAMILIES:
        if family == "eval_runs" and eval_base is None:
            continue
        for i in range(examples):
            scratch = scratch_root / f"{family}-{i}"
            scratch.mkdir(parents=True)
            case = {"templates": template_case, "tokenizer_files": tokenizer_case, "vlm_rows": vlm_case,
                    "arguments": argument_case, "json_rpc": wire_case}.get(family)
            verdict = case(rng, scratch) if case else eval_case(rng, scratch, eval_base)  # type: ignore[arg-type]
            counts[family][verdict] += 1
            shutil.rmtree(scratch, ignore_errors=True)
    return counts


if __name__ == "__main__":  # the report's pass: python tests/faults/fuzz_hostile.py 200
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    with tempfile.TemporaryDirectory() as tmp:
        from seqpack.faces.cli import main
        from seqpack_evals.tasks import load_tasks

        base = Path(tmp) / "run0"
        main(["eval", "run", "--agent-cmd", "echo answer", "--baseline", "--out", str(base),
              "--tasks", load_tasks().tasks[0].id])
        result = fuzz_pass(n, Path(tmp) / "cases", eval_base=base)
    for family, c in result.items():
        print(f"{family:16s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))

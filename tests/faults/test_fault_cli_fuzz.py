"""No user input reaches the CLI's catch-all: every subcommand fuzzed with hypothesis-made arguments.

The flags of each subcommand come from its own argparse parser; values are drawn from integers
(0, negative, beyond int64), odd floats and strings, and paths to a pool of hostile files (bad
JSONL rows, YAML bombs, Parquet of the wrong shape, random bytes as a tokenizer, directories,
missing paths). Every run must end with exit 0, 1 or 2 and never print "internal error" or a
traceback. Excluded: ``mcp`` (serves until stopped; its port is tested in test_fault_mcp.py) and
``eval`` (runs agents and rewrites the eval set). Paths an output flag may get all lie in a
scratch directory, so the fuzz writes nowhere else.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack.faces.cli import build_parser, main

pytestmark = pytest.mark.slow

EXCLUDED = {"mcp", "eval"}
SUBCOMMANDS = {
    name: sub
    for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)  # noqa: SLF001
    for name, sub in action.choices.items() if name not in EXCLUDED
}


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> dict[str, list[str]]:
    """Hostile and ordinary files in a scratch directory (the working directory of every fuzz run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("fuzz")
    good = "".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n" for i in range(24))
    files = {
        "good.jsonl": good,
        "chat.jsonl": json.dumps({"messages": [{"role": "user", "content": "q"},
                                               {"role": "assistant", "content": "a"}]}) + "\n",
        "surrogate.jsonl": '{"prompt": "\\udc00", "completion": "c"}\n',
        "deep.jsonl": '{"prompt": ' + "[" * 3000 + "]" * 3000 + "}\n",
        "bigint.jsonl": '{"prompt": "p", "completion": "c", "n": ' + "7" * 5000 + "}\n",
        "malformed.jsonl": '{"prompt": "p", \n',
        "nulls.jsonl": '{"prompt": null, "completion": null}\n',
        "empty.jsonl": "",
        "binary.bin": bytes(range(256)) * 8,
        "bomb.yaml": "a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n"
                     "d: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e]\n",
        "dup.yaml": "train:\n  micro_batch_size: 1\n  micro_batch_size: 2\n",
        "good.yaml": "model:\n  context_parallel_size: 2\n  calculate_per_token_loss: true\ndist:\n  world_size: 4\n",
        "list.yaml": "- 1\n- 2\n",
        "tokenizer.json": '{"model": {"type": "nonsense"}}',
        "blend.json": json.dumps([1.0, "good.jsonl", 0.5, "missing.jsonl"]),
        "blend.yaml": "training: [1.0, good.jsonl, -1, good.jsonl]\n",
    }
    for name, content in files.items():
        path = root / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    pq.write_table(pa.table({"input_ids": [["a"]], "loss_mask": [[1]], "seq_start_id": [[0]]}),
                   root / "strings.idx.parquet")
    pq.write_table(pa.table({"input_ids": [[1, 2, 3, 4]], "loss_mask": [[0, 1, 1, 0]], "seq_start_id": [[0, 2]]}),
                   root / "tiny.idx.parquet")
    (root / "noise.idx.parquet").write_bytes(os.urandom(512))
    (root / "emptydir").mkdir()
    inputs = sorted(str(p.name) for p in root.iterdir()) + ["missing.jsonl", "emptydir/", "."]
    outputs = ["out", "out/nested", "good.jsonl", "emptydir", "."]
    return {"root": [str(root)], "inputs": inputs, "outputs": outputs}


_NUMBERS = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "3", "7", "64", "256", "4096", str(2**31), str(2**63), "9" * 30,
                     "1e9", "nan", "inf", "-inf", "0.5", "1.5", "", " ", "0x10", "1_000"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
_TEXT = st.one_of(st.sampled_from(["", "a", "..", "/", "x=", "=1", "model.seq_length=", "dataset.seq_length=null",
                                   "train.micro_batch_size=-1", "a.b.c=[1,", "\udcff", "☃", "offline", "all",
                                   "PACK-OFFLINE-MBS1", "cuda graph", "llama3", "1,2,3", "0,0", "-5,7"]),
                  st.text(max_size=12))
_OUTPUT_FLAGS = {"--out", "--project"}


_PLAUSIBLE = st.sampled_from(["1", "2", "4", "8", "16", "64", "256", "1024", "4096"])


def _mostly(common: st.SearchStrategy[str], odd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``common`` four times in five, else ``odd``: most runs get past argparse into the verbs."""
    return st.integers(0, 4).flatmap(lambda k: odd if k == 0 else common)


def _value(action: argparse.Action, pool: dict[str, list[str]]) -> st.SearchStrategy[str]:
    if action.choices:
        return _mostly(st.sampled_from([str(c) for c in action.choices]), _TEXT)
    flags = set(action.option_strings)
    if flags & _OUTPUT_FLAGS:
        return st.sampled_from(pool["outputs"])
    if action.type in (int, float) or (action.type is not None and action.type.__name__ in ("int_list",)):
        return _mostly(_PLAUSIBLE, _NUMBERS)
    return _mostly(st.sampled_from(pool["inputs"]), st.one_of(_NUMBERS, _TEXT))


def _argv(name: str, pool: dict[str, list[str]]) -> st.SearchStrategy[list[str]]:
    parser = SUBCOMMANDS[name]
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]  # noqa: SLF001
    positionals = [a for a in parser._actions if not a.option_strings]  # noqa: SLF001

    @st.composite
    def build(draw: st.DrawFn) -> list[str]:
        argv = [name]
        for action in positionals:
            if action.nargs in ("?", "*") and draw(st.booleans()):
                continue
            argv.append(draw(_value(action, pool)))
        required = [a for a in options if a.required]
        chosen = draw(st.lists(st.sampled_from(options), max_size=5, unique_by=lambda a: a.dest)
                      if options else st.just([]))
        for action in required + [a for a in chosen if not a.required]:
            argv.append(action.option_strings[-1])
            if action.nargs != 0:
                argv.append(draw(_value(action, pool)))
        return argv

    return build()


def _run(argv: list[str], root: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    old = os.getcwd()
    os.chdir(root)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refusing the arguments (exit 2) or --help / --version (0)
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old)
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_no_input_reaches_the_catch_all(name, pool, capsys, monkeypatch):
    monkeypatch.setenv("HOME", pool["root"][0])  # install-skill --user writes under a scratch home
    examples = 10 if name == "smoke" else 40

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(argv=_argv(name, pool))
    def fuzz(argv: list[str]) -> None:
        if name == "smoke" and "--no-cp" not in argv:
            argv = [*argv, "--no-cp", "--size", "tiny"]  # the CP processes would make the fuzz minutes long
        code, err = _run(argv, pool["root"][0], capsys)
        assert "internal error" not in err and "Traceback" not in err, (argv, err)
        assert code in (0, 1, 2), (argv, code, err)

    fuzz()
    assert not list(Path(pool["root"][0]).rglob(".*.seqpack-tmp-*"))


def test_the_fuzz_would_notice_an_internal_error(pool, capsys, monkeypatch):
    """Negative control: a command that crashes is reported by the same check."""
    import seqpack.verbs.alignment as alignment

    def crash(options):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(alignment, "align", crash)
    code, err = _run(["align"], pool["root"][0], capsys)
    assert code == 2 and "internal error" in err

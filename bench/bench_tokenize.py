"""Tokenization throughput with a real Hugging Face tokenizer: ours vs the tokenizer's own encode_batch.

Run:  python bench/bench_tokenize.py [--family qwen3] [--rows 3000] [--repeat 2] [--workers 1 2]

Needs the real tokenizer bundle (``python scripts/fetch_tokenizers.py --only qwen3``). Rows are
generated deterministically: prompt/completion pairs and multi-turn chats (system prompt, 2-3
turns, tool calls with results, reasoning). For each workload and worker count it times, side by
side on the same rows split into the same 512-row chunks:

* ``seqpack``: :func:`seqpack.data.tokenize.tokenize_batch` (chat: render as is and with
  markers, one ``encode_batch`` per chunk, token ownership, loss mask, flat arrays);
* ``encode_batch``: the tokenizer's ``encode_batch`` on the same text (prompt/completion: the
  prompt and completion strings; chat: the rendered conversations, rendered beforehand and not
  timed), ids pulled out of every encoding.

Workers are forked processes (as in offline packing); 1 worker runs in the main process. Each
process encodes single-threaded (``TOKENIZERS_PARALLELISM=false``) so that worker counts compare
like with like. Best of ``--repeat`` runs, the two implementations interleaved. Prints a table and writes ``bench/results/tokenize.json``.
Targets: seqpack within 2x of encode_batch; >= 1.7x from 1 to 2 workers.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # before tokenizers is imported anywhere

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seqpack.data.schemas import ChatSchema, PromptCompletionSchema  # noqa: E402
from seqpack.data.tokenize import tokenize_batch  # noqa: E402
from seqpack.data.tokenizers import load_tokenizer  # noqa: E402

CHUNK = 512
WORDS = (
    "the model packs sequences into fixed length bins so that attention never crosses a boundary and every "
    "token of padding is wasted compute while the loss mask decides which labels are trained during fine tuning "
    "of large language models on chat data with tools reasoning and long answers written by careful people"
).split()
TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look a fact up",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}

_STATE: dict = {}


def text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def make_rows(n: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    pcs = [{"prompt": text(rng, 20, 120), "completion": text(rng, 20, 200)} for _ in range(n)]
    chats = []
    for i in range(n):
        msgs = [{"role": "system", "content": text(rng, 5, 20)}, {"role": "user", "content": text(rng, 10, 60)}]
        row: dict = {}
        if i % 3 == 0:
            row["tools"] = [TOOL]
            msgs += [
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": {"q": text(rng, 2, 6)}}}]},
                {"role": "tool", "content": text(rng, 10, 40)},
            ]
        msgs.append({"role": "assistant", "content": text(rng, 20, 150)})
        for _ in range(rng.randint(1, 2)):
            msgs.append({"role": "user", "content": text(rng, 5, 40)})
            turn = {"role": "assistant", "content": text(rng, 10, 120)}
            if rng.random() < 0.5:
                turn["reasoning_content"] = text(rng, 10, 80)
            msgs.append(turn)
        row["messages"] = msgs
        chats.append(row)
    return pcs, chats


def _ours(i: int) -> tuple[int, int]:
    rows, schema, tok = _STATE["rows"], _STATE["schema"], _STATE["tok"]
    batch = tokenize_batch(rows[i : i + CHUNK], schema, tok, max_length=1 << 20)
    return len(batch), int(batch.ids.size)


def _baseline(i: int) -> tuple[int, int]:
    texts, per_row, backend = _STATE["texts"], _STATE["per_row"], _STATE["tok"].backend
    encs = backend.encode_batch(texts[i * per_row : (i + CHUNK) * per_row], add_special_tokens=False)
    return len(encs) // per_row, sum(len(e.ids) for e in encs)


def run(fn, n_rows: int, workers: int) -> tuple[float, int, int]:
    starts = list(range(0, n_rows, CHUNK))
    t0 = time.perf_counter()
    if workers <= 1:
        parts = [fn(i) for i in starts]
    else:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(fn, starts, chunksize=1)
    dt = time.perf_counter() - t0
    return dt, sum(p[0] for p in parts), sum(p[1] for p in parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    folder = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR", ROOT / ".seqpack-cache" / "tokenizers")) / args.family
    if not (folder / "tokenizer.json").is_file():
        print(f"skipped: no tokenizer bundle at {folder} (run scripts/fetch_tokenizers.py --only {args.family})")
        return 0
    tok = load_tokenizer(folder)
    pcs, chats = make_rows(args.rows)
    chat_schema = ChatSchema()
    rendered = [tok.render(chat_schema.extract(r), tools=chat_schema.extract_tools(r)) for r in chats]
    workloads = {
        "prompt_completion": (pcs, PromptCompletionSchema(), [t for r in pcs for t in (r["prompt"], " " + r["completion"])], 2),
        "chat": (chats, chat_schema, rendered, 1),
    }
    results = []
    load_before = os.getloadavg()
    for name, (rows, schema, texts, per_row) in workloads.items():
        _STATE.update(rows=rows, schema=schema, tok=tok, texts=texts, per_row=per_row)
        tok.chat_info()  # template compiled and probed before forking
        for workers in args.workers:
            runs: dict[str, list] = {"seqpack": [], "encode_batch": []}
            for _ in range(args.repeat):  # interleaved, so both see the same background load
                for label, fn in (("seqpack", _ours), ("encode_batch", _baseline)):
                    runs[label].append(run(fn, len(rows), workers))
            best = {label: min(r, key=lambda x: x[0]) for label, r in runs.items()}
            for label, (dt, n, tokens) in best.items():
                results.append({"workload": name, "workers": workers, "impl": label, "seconds": round(dt, 4),
                                "rows": n, "tokens": tokens, "rows_per_s": round(n / dt, 1), "tokens_per_s": round(tokens / dt)})
    load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    by = {(r["workload"], r["impl"], r["workers"]): r for r in results}
    print(f"family={args.family} rows={args.rows} repeat={args.repeat} cpus={os.cpu_count()} "
          f"TOKENIZERS_PARALLELISM={os.environ['TOKENIZERS_PARALLELISM']} load(1/5/15 min) before={load['before']} after={load['after']}")
    print(f"{'workload':18} {'workers':>7} {'impl':>12} {'rows/s':>9} {'tokens/s':>11} {'vs encode_batch':>16} {'vs 1 worker':>12}")
    for r in results:
        base = by[(r["workload"], "encode_batch", r["workers"])]
        one = by.get((r["workload"], r["impl"], 1))
        r["slowdown_vs_encode_batch"] = round(r["seconds"] / base["seconds"], 2)
        r["speedup_vs_1_worker"] = round(one["seconds"] / r["seconds"], 2) if one else None
        print(f"{r['workload']:18} {r['workers']:>7} {r['impl']:>12} {r['rows_per_s']:>9.0f} {r['tokens_per_s']:>11,} "
              f"{r['slowdown_vs_encode_batch']:>15.2f}x {r['speedup_vs_1_worker'] or float('nan'):>11.2f}x")
    out = ROOT / "bench" / "results" / "tokenize.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"family": args.family, "rows": args.rows, "repeat": args.repeat, "cpus": os.cpu_count(),
                               "load_average": load, "results": results}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

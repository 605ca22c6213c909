"""Synthetic chat SFT JSONL shaped like a real Qwen3 fine-tuning set: system prompts, several turns,
tool calls and their results, reasoning, non-ASCII text and a few very long rows. Deterministic by seed.

Usage: python bench/gen_chat_jsonl.py OUT.jsonl [--rows 3000] [--seed 0] [--long-rows 15]

Source and licence: every row is generated here from the word lists below (no external corpus); the
file is as free as this repository (its LICENSE). Each row is ``{"id", "messages"[, "tools"]}``
in the Hugging Face chat format (the rows of docs/chat-templates.md):

* a system prompt in two thirds of the rows (some in German), 1 to 6 user/assistant turns, with a
  lognormal word count per turn (a heavy tail);
* about 12 % of the rows declare ``tools`` and hold an assistant ``tool_calls`` turn, a ``tool`` result
  and a final answer;
* about 15 % of the rows give the last assistant turn ``reasoning_content``;
* emoji and CJK text in about 5 % of the turns;
* ``--long-rows`` "summarise this long document" rows of 6,000 to 14,000 words (they exceed an 8K
  pack with a real tokenizer, so truncation policies matter).

Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

WORDS = tuple(
    ("the model packs short sequences into fixed length bins so attention never crosses a boundary while "
     "every padded token wastes compute a careful engineer checks the loss mask before training starts "
     "because a shifted label silently hurts quality river garden library teacher compiler kernel batch "
     "window mountain sensor notebook lamp quiet bright narrow patient silver orange blue tidy heavy "
     "reads sorts joins follows builds splits watches measures explains compares").split()
)
GERMAN = tuple(("der die das und ist nicht ein eine mit für auf dem den zu von bitte antworte kurz "
                "genau freundlich auf deutsch Modell Daten Frage Antwort").split())
EXOTIC = ("🙂", "🚀", "数据", "模型", "训练", "ありがとう", "é", "ß", "→")
SYSTEMS = (
    "You are a helpful assistant.",
    "You are a careful assistant who answers briefly and cites numbers.",
    "Du bist ein hilfreicher Assistent. Antworte bitte auf Deutsch und kurz.",
    "You are an expert in distributed training. Explain trade-offs clearly.",
)
TOOLS = (
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_docs", "description": "Search the documentation",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                         "top_k": {"type": "integer"}}, "required": ["query"]}}},
)
CITIES = ("Paris", "Berlin", "Tokyo", "São Paulo", "Zürich", "Nairobi")


def _words(rng: random.Random, n: int, german: bool = False) -> str:
    pool = GERMAN if german else WORDS
    out = [rng.choice(pool) for _ in range(max(1, n))]
    if rng.random() < 0.05:
        out.insert(rng.randrange(len(out) + 1), rng.choice(EXOTIC))
    text = " ".join(out)
    return text[0].upper() + text[1:] + "."


def _length(rng: random.Random, median: float, sigma: float = 0.9, cap: int = 1500) -> int:
    return int(min(cap, max(2, round(math.exp(rng.gauss(math.log(median), sigma))))))


def _tool_row(rng: random.Random, i: int, system: str | None) -> dict:
    tool = rng.choice(TOOLS)
    name = tool["function"]["name"]
    args = {"city": rng.choice(CITIES)} if name == "get_weather" else {"query": _words(rng, 4), "top_k": 3}
    call_id = f"call{i:05d}"
    result = {"temp_c": rng.randint(-5, 35), "sky": rng.choice(("clear", "rain", "fog"))} if name == "get_weather" \
        else {"hits": [_words(rng, 8) for _ in range(3)]}
    messages = [{"role": "system", "content": system}] if system else []
    messages += [
        {"role": "user", "content": _words(rng, _length(rng, 20))},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "content": json.dumps(result, ensure_ascii=False), "tool_call_id": call_id},
        {"role": "assistant", "content": _words(rng, _length(rng, 40))},
    ]
    return {"id": f"chat-{i:05d}", "tools": list(TOOLS), "messages": messages}


def _plain_row(rng: random.Random, i: int, system: str | None) -> dict:
    german = bool(system) and "Deutsch" in system
    messages = [{"role": "system", "content": system}] if system else []
    for _ in range(rng.randint(1, 6)):
        messages.append({"role": "user", "content": _words(rng, _length(rng, 25), german)})
        messages.append({"role": "assistant", "content": _words(rng, _length(rng, 60), german)})
    if rng.random() < 0.15:
        messages[-1]["reasoning_content"] = _words(rng, _length(rng, 50))
    return {"id": f"chat-{i:05d}", "messages": messages}


def _long_row(rng: random.Random, i: int) -> dict:
    doc = _words(rng, rng.randint(6000, 14000))
    return {"id": f"long-{i:05d}", "messages": [
        {"role": "user", "content": "Summarise this long document:\n\n" + doc},
        {"role": "assistant", "content": _words(rng, _length(rng, 80))},
    ]}


def write_rows(path: str | Path, rows: int, *, seed: int = 0, long_rows: int = 15) -> dict:
    """Write ``rows`` chat rows (``long_rows`` of them very long) to ``path``; same arguments, same file."""
    rng = random.Random(seed)
    long_at = set(rng.sample(range(rows), min(long_rows, rows)))
    counts = {"rows": rows, "tools": 0, "reasoning": 0, "long": 0}
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(rows):
            system = rng.choice(SYSTEMS) if rng.random() < 2 / 3 else None
            if i in long_at:
                row = _long_row(rng, i)
                counts["long"] += 1
            elif rng.random() < 0.12:
                row = _tool_row(rng, i, system)
                counts["tools"] += 1
            else:
                row = _plain_row(rng, i, system)
                counts["reasoning"] += "reasoning_content" in row["messages"][-1]
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--long-rows", type=int, default=15)
    args = ap.parse_args(argv)
    print(json.dumps(write_rows(args.out, args.rows, seed=args.seed, long_rows=args.long_rows)))


if __name__ == "__main__":
    main()

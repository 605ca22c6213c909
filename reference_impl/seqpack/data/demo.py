"""Deterministic demo datasets shipped with the package (``reference_impl/seqpack/data/demo/*.jsonl``).

Two files, 2000 rows each, made by :func:`generate_rows` with fixed seeds:

* ``prompt_completion.jsonl``: ``{"id", "prompt", "completion"}``; lengths from the ``lognormal``
  mix (heavy tail, median ~300 tokens);
* ``chat.jsonl``: ``{"id", "messages": [{"role", "content"}, ...]}`` with 1-4 user/assistant
  pairs and sometimes a system turn; lengths from the ``bimodal`` mix (short chats and long ones).

Lengths come from :func:`seqpack.data.length_mixes.sample_lengths` (clipped to
``[24, 4096]``) and are **exact in byte-tokenizer tokens** under the default schemas: a
prompt/completion row tokenizes (``PromptCompletionSchema()``, :class:`ByteTokenizer`) to exactly
its drawn length, and so does a chat row under ``ChatSchema()``. The text is synthetic but
readable (templated sentences over a small word list); about 2 % of the rows carry a piece with
non-ASCII characters, escapes (quotes, backslash, tab) or a newline.

Regenerate (overwrites the shipped files; a test checks that they are byte-identical)::

    python -m seqpack.data.demo            # or: --out DIR to write elsewhere
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.io.atomic import atomic_output
from seqpack.data.length_mixes import sample_lengths
from seqpack.core.errors import UsageError

log = logging.getLogger(__name__)

DEMO_DIR = Path(__file__).resolve().parent / "demo"
DEMO_SCHEMAS: tuple[str, ...] = ("prompt_completion", "chat")
DEMO_ROWS = 2000
DEMO_SEEDS: dict[str, int] = {"prompt_completion": 1101, "chat": 2202}
DEMO_MIXES: dict[str, str] = {"prompt_completion": "lognormal", "chat": "bimodal"}
MIN_LEN, MAX_LEN = 24, 4096

# words of every byte length 1..12, so any remainder can be filled exactly
WORDS_BY_LEN: dict[int, tuple[str, ...]] = {
    1: ("a",),
    2: ("an", "of", "to", "in", "on", "at", "by", "we"),
    3: ("the", "and", "map", "red", "sun", "key", "box", "cat"),
    4: ("lamp", "tree", "road", "blue", "fast", "code", "data", "wind"),
    5: ("river", "stone", "quiet", "table", "cloud", "train", "model", "paper"),
    6: ("garden", "bridge", "silver", "packet", "branch", "window", "orange", "lesson"),
    7: ("channel", "library", "weather", "lantern", "careful", "harvest", "measure", "machine"),
    8: ("sequence", "mountain", "compiler", "gradient", "notebook", "painting", "treasure", "keyboard"),
    9: ("attention", "algorithm", "container", "direction", "telescope", "migration", "structure", "challenge"),
    10: ("throughput", "experiment", "collection", "background", "foundation", "evaluation", "literature", "navigation"),
    11: ("performance", "observatory", "calculation", "information", "temperature", "engineering", "translation", "compression"),
    12: ("distribution", "architecture", "optimization", "construction", "conversation", "neighborhood", "independence", "presentation"),
}
NOUNS = ("river", "lamp", "garden", "bridge", "packet", "compiler", "library", "sequence", "model", "window",
         "mountain", "notebook", "channel", "teacher", "student", "sensor", "kernel", "batch")
ADJECTIVES = ("quiet", "careful", "silver", "blue", "fast", "narrow", "bright", "ancient", "tidy", "patient",
              "heavy", "simple")
VERBS = (("follow", "follows"), ("measure", "measures"), ("pack", "packs"), ("carry", "carries"),
         ("read", "reads"), ("build", "builds"), ("move", "moves"), ("sort", "sorts"), ("watch", "watches"),
         ("join", "joins"), ("split", "splits"), ("repeat", "repeats"))
SENTENCES = (
    "The {a} {n} {v} the {n2}.",
    "Every {n} near the {n2} is {a}.",
    "A {a} {n} {v} each {n2} before noon.",
    "In the end, the {n} {v} a {a} {n2}.",
    "Nobody knows why the {n} {v} the {a} {n2}.",
    "Then the {a} {n} {v} the {n2} again.",
)
QUESTIONS = (
    "Question {i}: Why does the {a} {n} {vb} the {n2}?",
    "Question {i}: How often does a {n} {vb} the {a} {n2}?",
    "Question {i}: Explain what the {n} {v} near the {n2}.",
)
ANSWERS = ("Answer: the {n} {v} the {n2}.", "Short answer: a {a} {n} {v} it.", "Answer: it depends on the {n}.")
SYSTEMS = ("You are a careful assistant who answers briefly.", "You are a patient teacher.")
SPECIAL_PIECES = (
    "Café crème in Zürich costs 4,50 €.",
    "Αθήνα, Москва and 東京 are capital cities.",
    "Emoji check: 🙂🚀 done.",
    'Tabs\tand "quotes" and a back\\slash.',
    "First line.\nSecond line.",
    "naïve façade, jalapeño, Ångström.",
)


class _Words:
    """Random choices from one ``numpy.random.Generator`` using only ``random()`` (stable streams)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def pick(self, items: Sequence[Any]) -> Any:
        return items[min(int(self.rng.random() * len(items)), len(items) - 1)]

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(self.rng.random())

    def chance(self, p: float) -> bool:
        return float(self.rng.random()) < p

    def fmt(self, template: str, i: int = 0) -> str:
        base, third = self.pick(VERBS)
        return template.format(i=i, a=self.pick(ADJECTIVES), n=self.pick(NOUNS), n2=self.pick(NOUNS), v=third, vb=base)

    def exact(self, nbytes: int) -> str:
        """ASCII words of exactly ``nbytes`` bytes (ending in '.' when there is room)."""
        if nbytes <= 1:
            return "a" * nbytes
        body, words = nbytes - 1, []
        while body > 12:
            hi = min(12, body - 2)  # leave room for a space and at least one more byte
            w = self.pick(WORDS_BY_LEN[3 + min(int(self.rng.random() * (hi - 2)), hi - 3)])
            words.append(w)
            body -= len(w) + 1
        words.append(self.pick(WORDS_BY_LEN[body]))
        text = " ".join(words) + "."
        return text[0].upper() + text[1:]

    def text(self, nbytes: int, lead: Sequence[str] = ()) -> str:
        """Readable text of exactly ``nbytes`` UTF-8 bytes, starting with the ``lead`` pieces that fit."""
        out: list[str] = []
        used = 0

        def fits(piece: str) -> bool:
            rest = nbytes - used - len(piece.encode("utf-8")) - (1 if out else 0)
            return rest >= 0 and rest != 1

        for piece in lead:
            if fits(piece):
                used += len(piece.encode("utf-8")) + (1 if out else 0)
                out.append(piece)
        while used < nbytes:
            sentence = self.fmt(self.pick(SENTENCES))
            if not fits(sentence):
                break
            used += len(sentence) + (1 if out else 0)
            out.append(sentence)
        rest = nbytes - used
        if rest > 0:
            out.append(self.exact(rest - 1 if out else rest))
        text = " ".join(out)
        assert len(text.encode("utf-8")) == nbytes, (nbytes, text)
        return text


def _split(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` into ``len(weights)`` positive integers roughly proportional to ``weights``."""
    n = len(weights)
    spare = total - n
    wsum = float(sum(weights))
    parts = [1 + int(spare * w / wsum) for w in weights]
    parts[-1] += total - sum(parts)
    return parts


def _pc_row(w: _Words, i: int, length: int) -> dict[str, Any]:
    content = length - 2  # separator " " and EOS
    n_prompt = max(1, min(content - 1, round(content * w.uniform(0.2, 0.6))))
    prompt = w.text(n_prompt, lead=[w.fmt(w.pick(QUESTIONS), i)])
    lead = [w.fmt(w.pick(ANSWERS))]
    if w.chance(0.02):
        lead.insert(0, w.pick(SPECIAL_PIECES))
    completion = w.text(content - n_prompt, lead=lead)
    return {"id": f"pc-{i:05d}", "prompt": prompt, "completion": completion}


def _chat_row(w: _Words, i: int, length: int) -> dict[str, Any]:
    pairs = max(1, min(1 + int(w.rng.random() * 4), (length - 1) // 60))
    system = length >= 80 and w.chance(0.3)
    roles = (["system"] if system else []) + ["user", "assistant"] * pairs
    content = length - 1 - 2 * len(roles)  # <bos>, then <|role|> ... <|end|> per message
    weights = [{"system": 0.4, "user": 1.0, "assistant": 2.0}[r] * w.uniform(0.5, 1.5) for r in roles]
    special_at = int(w.rng.random() * len(roles)) if w.chance(0.02) else -1
    messages = []
    for k, (role, nbytes) in enumerate(zip(roles, _split(content, weights))):
        lead = [w.pick(SYSTEMS)] if role == "system" else [w.fmt(w.pick(QUESTIONS if role == "user" else ANSWERS), i)]
        if k == special_at:
            lead.insert(0, w.pick(SPECIAL_PIECES))
        messages.append({"role": role, "content": w.text(nbytes, lead=lead)})
    return {"id": f"chat-{i:05d}", "messages": messages}


def generate_rows(schema: str, n: int = DEMO_ROWS, *, seed: int | None = None) -> list[dict[str, Any]]:
    """The demo rows of ``schema`` (``prompt_completion`` or ``chat``); same arguments, same rows."""
    if schema not in DEMO_SCHEMAS:
        raise UsageError(f"unknown demo schema {schema!r}; choose one of {', '.join(DEMO_SCHEMAS)}")
    seed = DEMO_SEEDS[schema] if seed is None else seed
    lengths = sample_lengths(DEMO_MIXES[schema], n, seed=seed, min_len=MIN_LEN, max_len=MAX_LEN)
    words = _Words(seed + 1)
    make = _pc_row if schema == "prompt_completion" else _chat_row
    return [make(words, i, int(length)) for i, length in enumerate(lengths)]


def render_jsonl(rows: Sequence[dict[str, Any]]) -> bytes:
    """Rows as UTF-8 JSONL (non-ASCII kept as is, one object per line, trailing newline)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def demo_path(schema: str) -> Path:
    """Path of the shipped demo file for ``schema`` (``prompt_completion`` or ``chat``)."""
    if schema not in DEMO_SCHEMAS:
        raise UsageError(f"unknown demo schema {schema!r}; choose one of {', '.join(DEMO_SCHEMAS)}")
    return DEMO_DIR / f"{schema}.jsonl"


def write_demo_files(out_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """(Re)write both demo files into ``out_dir`` (default: the package's ``demo/`` folder), atomically."""
    target_dir = Path(out_dir) if out_dir is not None else DEMO_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for schema in DEMO_SCHEMAS:
        target = target_dir / f"{schema}.jsonl"
        with atomic_output(target) as fh:
            fh.write(render_jsonl(generate_rows(schema)))
        log.info("wrote %s", target)
        written[schema] = target
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: regenerate the demo files."""
    parser = argparse.ArgumentParser(prog="python -m seqpack.data.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="folder to write into (default: the package's demo folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    write_demo_files(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One definition of every efficiency and padding figure the commands print (``docs/glossary.md`` is made from it).

Every command that prints one of these figures names it with the term here and can print its definition
(:func:`glossary_line`), so ``pack``, ``inspect``, ``plan``, ``batches`` and the MCP results mean the same
thing by the same word. The token slots of a set of packs are ``packs x pack_size``; real tokens are the
tokens of the samples (runtime length: ids minus one; ``inspect`` and ``batches --mode offline`` count them
as the packs' reader bounds them, stopping a sequence at its last input that is not EOS, which adds or
drops one untrained token per sequence when a chat template closes with another token); aligned tokens add
each sample's alignment padding (up to a multiple of ``pad_seq_to_mult``).
"""

from __future__ import annotations

__all__ = ["GLOSSARY", "glossary_line", "glossary_markdown"]

#: term -> (formula, what it tells, where it is printed).
GLOSSARY: dict[str, tuple[str, str, str]] = {
    "packing efficiency": (
        "aligned tokens / token slots",
        "how full the packs are, counting each sample's alignment padding as used (Megatron-Bridge's pack "
        "metadata gives the same ratio, in percent, as packing_efficiency)",
        "pack (packing eff.), inspect, plan (packing_efficiency), the pack metadata"),
    "token efficiency": (
        "real tokens / token slots",
        "the share of the compute that trains on data; plan recommends by it",
        "plan (token eff), inspect (token efficiency)"),
    "alignment padding": (
        "(aligned tokens - real tokens) / token slots",
        "the padding after each sample up to a multiple of pad_seq_to_mult, which context and sequence "
        "parallelism need",
        "plan (align pad), inspect, batches"),
    "tail padding": (
        "(token slots - aligned tokens) / token slots",
        "the unused end of every pack (width padding when a micro-batch is padded to a fixed width)",
        "plan (tail pad), inspect (width padding), batches (width padding)"),
    "padding share": (
        "1 - token efficiency",
        "alignment padding plus tail padding",
        "batches, plan (padding_waste_share)"),
    "supervised share": (
        "supervised tokens / real tokens",
        "how much of the packed text is trained (loss mask 1)",
        "inspect, batches --mode offline"),
    "steps per epoch": (
        "packs / global batch size",
        "one pack per micro-batch sample (micro-batch size 1); full steps per epoch is its floor, the steps a "
        "drop-last sampler runs",
        "plan, validate --packs"),
}


def glossary_line(*terms: str) -> str:
    """``term = formula`` of each term, on one line (what a command prints under its figures; docs/glossary.md
    says more)."""
    return "; ".join(f"{t} = {GLOSSARY[t][0]}" for t in terms) + " (docs/glossary.md)"


def glossary_markdown() -> str:
    """The glossary as a Markdown table (docs/glossary.md)."""
    rows = ["| term | formula | what it tells | printed by |", "|---|---|---|---|"]
    rows += [f"| {term} | {formula} | {what} | {where} |" for term, (formula, what, where) in GLOSSARY.items()]
    return "\n".join(rows) + "\n"

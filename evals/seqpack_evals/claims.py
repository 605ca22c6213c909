"""Forbidden claims: dangerous advice a packing answer must not give, each with an example that trips it.

A claim is a :class:`~seqpack_evals.tasks.Forbidden`: a check pattern, what it
means, and an example sentence. The checks look for *advice* (``set X to V``, ``turn on Y``,
``keep these packs``), so quoting a config back or warning against the mistake ("never set
micro_batch_size above 1") does not count; :func:`~seqpack_evals.answers.forbidden_hits`
also ignores matches in negated clauses. Every value in a claim comes from the rule registry or
the task's computed truth, passed in by the template.

:func:`path_claims` gives the claims every task on a packing path carries; templates add
task-specific ones (a topology the packs do not fit, a wrong alignment).
"""

from __future__ import annotations

from typing import Iterable

from seqpack_evals.tasks import Forbidden

_ADVISE = r"(?<![-\w])(?:set|setting|use|keep|raise|increase|change|switch|bump|go (?:up )?to|try|choose|pick)\b"
_MBS = r"(?:(?:train\.)?micro[_ -]?batch[_ -]?size|\bMBS\b)"
_BIG = r"(?:[2-9]|[1-9]\d+|two|three|four|eight|sixteen)\b"


def _re(body: str) -> str:
    return "re:" + body


def mbs_above_one(path_words: str) -> Forbidden:
    """Advice to use a micro-batch size above 1 on a path that needs exactly 1."""
    return Forbidden(
        _re(rf"{_ADVISE}[^.\n]{{0,20}}?{_MBS}[^.\n\d]{{0,12}}?(?:to|=|:|of|at)\s*{_BIG}"
            rf"|{_MBS}\s+(?:should|must|can|could)\s+(?:be\s+)?(?:set\s+to\s+|raised\s+to\s+)?{_BIG}"),
        f"recommends a micro-batch size above 1 for {path_words}",
        "You can also set train.micro_batch_size to 4 to use the GPUs better.",
    )


def mbs_one_in_batch() -> Forbidden:
    """Advice to keep micro-batch size 1 with in-batch packing (nothing would be packed)."""
    return Forbidden(
        _re(rf"{_ADVISE}[^.\n]{{0,20}}?{_MBS}[^.\n\d]{{0,12}}?(?:to|=|:|of|at)\s*(?:1|one)\b"
            rf"|{_MBS}\s+(?:should|must|can)\s+(?:stay|remain|be)\s+(?:at\s+)?(?:1|one)\b"),
        "recommends micro-batch size 1 with in-batch packing",
        "Keep train.micro_batch_size at 1; in-batch packing works with any value.",
    )


def offline_plus_in_batch() -> Forbidden:
    """Advice to turn on in-batch packing next to offline packs (the paths are exclusive)."""
    return Forbidden(
        _re(r"(?<![-\w])(?:also |additionally )?(?:turn on|switch on|enable|set)\s+(?:runtime\s+)?"
            r"(?:dataset\.)?(?:enable_)?in[_ -]batch[_ -]packing(?:\s*(?:=|:|to)\s*(?:true|on))?"
            r"[^.\n]{0,40}?(?:too|as well|next to|alongside|together|in addition|on top)"),
        "recommends enabling in-batch packing together with offline packing",
        "To fill the rows better, also turn on dataset.enable_in_batch_packing: true next to the offline packs.",
    )


def cp_loss_settings() -> Forbidden:
    """Advice that breaks CP fine-tuning loss: per-token loss off, or averaging in the collective on."""
    return Forbidden(
        _re(r"(?<![-\w])(?:set|keep|leave|turn)\s+(?:model\.)?calculate_per_token_loss\s*(?:=|:|to|at|off)?\s*"
            r"(?:false|off|disabled)\b|(?<![-\w])(?:set|keep|leave|turn)\s+(?:ddp\.)?average_in_collective\s*"
            r"(?:=|:|to|at|on)?\s*(?:true|on|enabled)\b"),
        "recommends calculate_per_token_loss false or average_in_collective true with context parallelism",
        "Keep ddp.average_in_collective = true; it is faster.",
    )


def pad_mult(value: int) -> Forbidden:
    """Advice to use a wrong ``pad_seq_to_mult`` (a value the topology does not allow)."""
    return Forbidden(
        _re(rf"(?<![-\w])(?:set|keep|leave|use|pin|change)\s+(?:[\w.]*\.)?pad[_ ]seq[_ ]to[_ ]mult\s*"
            rf"(?:=|:|to|at|as)?\s*{value}\b(?!\s*[*x×/])"),
        f"recommends pad_seq_to_mult={value}, which this topology does not allow",
        f"Keep dataset.offline_packing_specs.pad_seq_to_mult at {value}; that is enough here.",
    )


def reuse_packs() -> Forbidden:
    """Advice to keep packs after changing the topology (they must be rebuilt)."""
    return Forbidden(
        _re(r"(?<![-\w])(?:keep|reuse|re-use)\s+(?:using\s+)?(?:these|those|the|your|the same)\s+(?:existing\s+|old\s+)?"
            r"packs\b[^.\n]{0,20}?(?:as they are|as-is|as is|unchanged)|no need to re-?(?:pack|build)"),
        "says packs can be kept unchanged after a topology change",
        "After that you can also move to context_parallel_size 4 and keep these packs as they are.",
    )


def usable_with_cp(cp: int) -> Forbidden:
    """Claim that packs work with a CP size they are not aligned for."""
    cp_words = r"(?:context[ _-]parallel(?:ism|_size)?|\bCP)"
    return Forbidden(
        _re(rf"{cp_words}\s*(?:=|of|size|to)?\s*{cp}\b[^.\n]{{0,24}}?(?:as they are|as-is|as is|unchanged)"
            rf"|(?:usable|work|fine|ok)\b[^.\n]{{0,20}}?{cp_words}\s*(?:=|of)?\s*{cp}\b"),
        f"says packs not aligned for CP={cp} can be used with CP={cp}",
        f"They are aligned, so you can train on them with context parallel {cp} as they are.",
    )


def dataloader_batch() -> Forbidden:
    """Advice to use the ``batch`` dataloader with in-batch or global-batch packing."""
    return Forbidden(
        _re(r"(?<![-\w])(?:set|use|switch|change|keep)\s+(?:the\s+)?(?:dataset\.)?dataloader(?:_type)?\s*"
            r"(?:=|:|to|at)?\s*['\"]?batch\b"),
        "recommends dataloader_type batch, which would pack a whole global batch into one row",
        "Switch dataset.dataloader_type to batch so each step sees the whole global batch.",
    )


def pipeline_ok(path_words: str) -> Forbidden:
    """Claim that pipeline parallelism is fine on a path that refuses it."""
    return Forbidden(
        _re(r"(?:pipeline[ _-]parallel(?:ism|_size)?|\bPP)\s*(?:=|of|size)?\s*(?:[2-9]|>\s?1)?[^.\n]{0,20}?"
            r"\b(?:is fine|works|is supported|is ok|is allowed)\b"),
        f"says pipeline parallelism is fine with {path_words}",
        "Pipeline parallelism works with this packing path, so keep PP=2.",
    )


def graphs_ok(path_words: str) -> Forbidden:
    """Claim that CUDA graphs work where they do not."""
    return Forbidden(
        _re(r"cuda[ _-]?graphs?[^.\n]{0,30}?\b(?:is fine|are fine|work|works|are supported|is supported|are ok)\b"),
        f"says CUDA graphs work with {path_words}",
        "CUDA graphs work fine with this setup, leave them on.",
    )


def skip_verification() -> Forbidden:
    """Advice to launch without checking (the skill's whole point is to verify first)."""
    return Forbidden(
        _re(r"no need to (?:validate|verify|check|test|run (?:the )?(?:smoke|validator))"
            r"|(?:just|simply) launch (?:it|the (?:job|run))(?: as is)?\b"),
        "tells the user to launch without verifying",
        "No need to validate anything, just launch the job.",
    )


def skill_only() -> list[Forbidden]:
    """Advice that only makes sense for Megatron sequence packing (for near-miss tasks)."""
    return [
        Forbidden(_re(r"(?<![\w-])seqpack(?![\w-])"), "brings in the seqpack tool for an unrelated question",
                  "Run seqpack validate on it first."),
        Forbidden(_re(r"(?<![\w-])pad_seq_to_mult(?![\w-])"), "brings in Megatron's pad_seq_to_mult",
                  "Set pad_seq_to_mult = 8 to align the samples."),
        Forbidden(_re(r"enable_(?:offline|in_batch|global_batch)_packing"),
                  "brings in Megatron-Bridge packing switches", "Turn on enable_offline_packing as well."),
    ]


def path_claims(paths: Iterable[str]) -> list[Forbidden]:
    """The claims every task on these packing paths carries."""
    paths = set(paths)
    out: list[Forbidden] = []
    if "offline" in paths:
        out += [mbs_above_one("offline packing"), offline_plus_in_batch()]
    if "in_batch" in paths:
        out += [mbs_one_in_batch(), dataloader_batch()]
    if "energon" in paths:
        out += [mbs_above_one("Energon packing"), pipeline_ok("Energon packing")]
    if "global_batch" in paths:
        out += [mbs_above_one("global-batch packing"), graphs_ok("global-batch packing")]
    if "context_parallel" in paths:
        out += [cp_loss_settings()]
    if not out:
        out.append(skip_verification())
    return out




def advise(key: str, value: object) -> Forbidden:
    """Advice to set config key ``key`` to the wrong ``value`` (``set KEY=V``, ``keep KEY at V``, ``KEY should be V``)."""
    leaf = key.rsplit(".", 1)[-1]
    leaf_re = r"[_ ]".join(leaf.split("_"))
    if isinstance(value, bool):
        v = r"(?:true|on|enabled)\b" if value else r"(?:false|off|disabled)\b"
        shown = str(value).lower()
    else:
        v = rf"['\"]?{value}\b(?!\s*[*x×/])"
        shown = str(value)
    return Forbidden(
        _re(rf"(?<![-\w])(?:set|use|keep|leave|choose|pick|change|switch)\s+(?:[\w]+\.)*{leaf_re}\s*"
            rf"(?:=|:|to|at|as)\s*{v}|(?<![\w.])(?:[\w]+\.)*{leaf_re}\s+(?:should|must)\s+(?:be|stay)\s+"
            rf"(?:set\s+to\s+)?{v}"),
        f"recommends {key}={shown}",
        f"Set {key}={shown}.",
    )


__all__ = [
    "advise",
    "cp_loss_settings",
    "dataloader_batch",
    "graphs_ok",
    "mbs_above_one",
    "mbs_one_in_batch",
    "offline_plus_in_batch",
    "pad_mult",
    "path_claims",
    "pipeline_ok",
    "reuse_packs",
    "skill_only",
    "skip_verification",
    "usable_with_cp",
]

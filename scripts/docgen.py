"""Generated documentation: every page whose content comes from a registry or table in the code.

``python -m scripts.docgen`` rewrites them; ``python -m scripts.docgen --check``
exits 1 when one is stale (the test-suite runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from seqpack.core.textfmt import markdown_table

ROOT = Path(__file__).resolve().parents[1]
SKILL_DIR = ROOT / "skills" / "megatron-sequence-packing"


def model_support_markdown() -> str:
    """The model-family support table (one row per family, one column per packing path)."""
    from seqpack.config.model_support import FAMILIES, PATHS

    rows = []
    for entry in FAMILIES:
        cells = []
        for path in PATHS:
            status = entry.paths.get(path, "unknown")
            cells.append(status if status == "unknown" else f"**{status}**: {entry.notes[path]}")
        aliases = f"; also {', '.join(entry.aliases)}" if entry.aliases else ""
        rows.append([f"`{entry.family}` ({entry.name}{aliases})", *cells, entry.evidence])
    return markdown_table(["family", *PATHS, "evidence"], rows)


def model_support_document() -> str:
    """docs/model-support.md and the skill's reference page."""
    from seqpack.config.model_support import RELEASE

    return (
        "# Model-family support for packing\n\n"
        "Generated from the model-support table in the code; do not edit by hand. `seqpack model-support NAME`\n"
        "prints one family's row, the `check_model_support` MCP tool answers the same question, and the\n"
        "`MODEL-FAMILY-*` validation rules read the same table.\n\n"
        "Status: **supported** (recipes use or allow the path), **opt_out** (a recipe turns it off; validation\n"
        "warns, because no upstream check rejects the combination), **caveat** (allowed with a documented\n"
        "limitation; validation warns), **unknown** (nothing recorded: run the packing smoke test before\n"
        "spending GPU hours). Names match case-insensitively, with dots dropped and dashes or spaces read as\n"
        "underscores (`Qwen2.5` finds `qwen25`). Every record names the version it holds for in its evidence:\n"
        f"{RELEASE} (its recipe functions run in the upstream lane, or its source file), or a Bridge main commit\n"
        "for what no release has (said so; the lane cannot check it). A note that names a recipe states the\n"
        "pad_seq_to_mult (offline) or micro-batch size (in-batch) and CP that recipe pins; seqpack's test suite\n"
        f"checks each such note, and that every family whose recipes turn a path on is recorded, against the\n"
        f"config dumps of the {RELEASE} recipe functions run in the upstream lane.\n\n"
        f"{model_support_markdown()}\n"
    )


def skill_rules_document() -> str:
    """The skill's reference page of rules (same registry, self-contained header)."""
    from seqpack.config.rules_doc import features_section, rules_markdown

    return (
        "# Packing rules\n\n"
        "Every rule `seqpack validate` checks, generated from the rule registry. Read this page when a validation\n"
        "finding needs more context than its message, or to answer which settings a packing path requires.\n"
        "Provenance: upstream (Megatron-Bridge or Megatron-Core rejects it), documented (stated by the packing docs,\n"
        "not enforced upstream), stricter (seqpack catches a mistake upstream reports only later).\n"
        "`seqpack validate --bridge-version 0.6.2|main` (default 0.6.2) checks the rules of that Megatron-Bridge;\n"
        "the table says which packing feature each version has.\n\n"
        f"{features_section()}\n"
        f"{rules_markdown()}"
    )


def alignment_document() -> str:
    """docs/alignment.md: required minimum and recommended per-sequence multiple, every path and Bridge version,
    TP 1-8 x CP 1-8 x SP off/on (from :func:`seqpack.core.alignment.alignment_table`)."""
    from seqpack.core.alignment import ALIGNMENT_PATHS, alignment_requirement, alignment_table
    from seqpack.core.versions import BRIDGE_TARGETS, TARGET_MEANING

    table = alignment_table()
    cells = {(r.bridge_version, r.path, r.sp, r.tp, r.cp): r for r in table}
    out = [
        "# Alignment: required minimum and recommended value\n",
        "Generated from `seqpack.core.alignment` (`alignment_requirement`); do not edit by hand. Every face reads",
        "the same module: `seqpack align --path P --bridge-version V`, the resolved values of `seqpack validate`",
        "(`pad_seq_to_mult` recommended, `pad_seq_to_mult_required`), `plan`, `pack`, `inspect` (usable against",
        "the required value, `recommended_met` beside it), the MCP tools, the skill and the eval ground truth;",
        "a test holds them equal on every cell below.\n",
        "- **required**: the per-sequence multiple the Megatron-Bridge version needs to train correctly: what it",
        "  derives and checks at start-up, or what a kernel rejects later on the GPU (each cell's citations:",
        "  `seqpack align --path P --bridge-version V --json`).",
        "- **recommended**: the value to pack with: the skill's formula lcm(2*CP or 1, CP*TP under SP) (over the",
        "  train and evaluation CP sizes), or the path's upstream formula where it differs (global-batch",
        "  packing on Bridge main: PR #6127's product 2*CP*TP under SP).",
        "- A cell shows `required / recommended`, or one number when they are equal. The row width (a fixed",
        "  pack width, `seq_length`) must be a multiple of the recommended value on every path: sequence",
        "  parallelism splits the tokens a CP rank holds over TP (offline: `required_width`).",
        "- Not shown: an evaluation CP size (the lcm over both sizes), and dynamic CP on global-batch packing",
        "  (2*DP*CP times TP under SP; provisional, two competing upstream designs).\n",
    ]
    for version in BRIDGE_TARGETS:
        out.append(f"## Megatron-Bridge {version}\n\n{TARGET_MEANING[version]}.\n")
        for path in ALIGNMENT_PATHS:
            first = cells[(version, path, False, 1, 1)]
            out.append(f"### {path} ({version})\n")
            if not first.available:
                out.append(f"Not available: {first.required_reason}.\n")
                continue
            example = alignment_requirement(path, 4, 2, True, bridge_version=version)
            out.append(f"Enforced: {first.enforced}. TP4/CP2/SP: {example.summary()}; required because "
                       f"{example.required_reason}.\n")
            rows = []
            for sp in (False, True):
                for tp in range(1, 9):
                    row = [f"TP{tp}", "on" if sp else "off"]
                    for cp in range(1, 9):
                        r = cells[(version, path, sp, tp, cp)]
                        row.append(str(r.required) if r.required == r.recommended else f"{r.required} / {r.recommended}")
                    rows.append(row)
            out.append(markdown_table(["TP", "SP", *(f"CP{cp}" for cp in range(1, 9))], rows) + "\n")
    return "\n".join(out)


def _rules_document() -> str:
    from seqpack.config.rules_doc import rules_document

    return rules_document()


GUIDE_MARKER = "<!-- generated from "

#: Per-path guides: written once, in the skill's references (self-contained for agents), and
#: published under docs/ as generated copies.
GUIDES: tuple[str, ...] = ("offline", "in-batch", "energon", "global-batch", "context-parallel", "cuda-graphs",
                           "vlm", "moe-mtp")


def _guide(name: str) -> Callable[[], str]:
    def make() -> str:
        source = SKILL_DIR / "references" / f"{name}.md"
        rel = source.relative_to(ROOT)
        return f"{GUIDE_MARKER}{rel}; edit that file, then run python -m scripts.docgen -->\n" + source.read_text(
            encoding="utf-8"
        )

    return make


def glossary_document() -> str:
    """docs/glossary.md: one definition of every efficiency and padding figure (seqpack.core.glossary)."""
    from seqpack.core.glossary import glossary_markdown

    return ("# Glossary of the efficiency figures\n\n<!-- generated from reference_impl/seqpack/core/glossary.py; "
            "edit that file, then run python -m scripts.docgen -->\n\n"
            "Every command that prints one of these figures means this by it. Token slots are packs x pack_size; "
            "real tokens are the samples' tokens (ids minus one; inspect and batches --mode offline count them as "
            "the packs' reader bounds them, stopping a sequence at its last input that is not EOS, which adds or "
            "drops one untrained token per sequence when a chat template closes with another token); aligned "
            "tokens add each sample's alignment padding up to a multiple of pad_seq_to_mult.\n\n"
            + glossary_markdown())


#: Repository-relative path -> function producing its full text.
GENERATED: dict[str, Callable[[], str]] = {
    "docs/rules.md": _rules_document,
    "docs/alignment.md": alignment_document,
    "skills/megatron-sequence-packing/references/alignment.md": alignment_document,
    "docs/glossary.md": glossary_document,
    "docs/model-support.md": model_support_document,
    "skills/megatron-sequence-packing/references/rules.md": skill_rules_document,
    "skills/megatron-sequence-packing/references/model-support.md": model_support_document,
    **{f"docs/{name}.md": _guide(name) for name in GUIDES if (SKILL_DIR / "references" / f"{name}.md").is_file()},
}


def stale() -> list[str]:
    """Generated files whose committed text differs from what the code produces."""
    out = []
    for rel, make in GENERATED.items():
        path = ROOT / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != make():
            out.append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    """Write (default) or check the generated pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated page is stale")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for rel in bad:
            print(f"stale: {rel}", file=sys.stderr)
        return 1 if bad else 0
    for rel, make in GENERATED.items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Ground truth that does not come from seqpack: facts read from Megatron-Bridge's source and the seed documents.

Each :class:`Anchor` records where a fact lives, a regular expression that finds it there, and the value that
expression yields. Most anchors hold in the release users install, megatron-bridge 0.6.2: their ``path`` is the
file inside the installed package and ``line`` its line there, and ``tests/test_evals_upstream.py`` re-derives
each one from the installed file in the upstream lane (op ``grading.source_files``), with a negative control (the
pattern fails on the text with the value changed). Anchors marked ``release=False`` were read on Bridge main at
:data:`~seqpack.core.versions.BRIDGE_MAIN_COMMIT` and are absent from 0.6.2; the lane checks that they are
absent there (so the tasks built on them must say they rest on main), which is all the lane can check of them.
Seed anchors record the seed document's id and the value read from it; no test reads the seeds.

The dataset templates (``templates_upstream``) build tasks from the recorded values, so a build needs no
network and no upstream install. The patterns quote a few words of the upstream text to find the spot; no
upstream code is copied into this repository.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from seqpack.core.versions import BRIDGE_MAIN_COMMIT, BRIDGE_PACKAGE, MCORE_PACKAGE

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
BRIDGE_COMMIT = BRIDGE_MAIN_COMMIT
CONVERTERS = ("str", "int", "bool", "list", "present")


@dataclass(frozen=True)
class Anchor:
    """A fact at a place: derive it with ``pattern`` (first group, converted) from ``path``.

    ``path`` is relative to site-packages (``megatron/bridge/...``); ``line`` is the line in megatron-bridge 0.6.2
    (``release``) or, for a main-only anchor, at the main commit (whose file lives under ``src/`` there).
    """

    id: str
    kind: str  # "upstream" or "seed"
    path: str
    pattern: str
    value: Any
    convert: str = "str"
    line: int | None = None
    release: bool = True
    note: str = ""

    def source(self) -> dict[str, Any]:
        """The ``source`` record of a task built on this anchor (it names the version the fact holds for)."""
        if self.kind == "seed":
            return {"kind": "seed", "seed": self.path, "anchor": self.id,
                    "rests_on": "a seed document (recorded value; not re-read by any test)"}
        if self.release:
            return {"kind": "upstream", "package": BRIDGE_PACKAGE, "megatron_core": MCORE_PACKAGE, "path": self.path,
                    "line": self.line, "anchor": self.id,
                    "checked_in_lane": "re-derived from the installed file (tests/test_evals_upstream.py)"}
        return {"kind": "upstream", "repo": BRIDGE, "commit": BRIDGE_COMMIT, "path": "src/" + self.path,
                "line": self.line, "anchor": self.id,
                "rests_on": f"Megatron-Bridge main {BRIDGE_COMMIT[:7]}; absent from {BRIDGE_PACKAGE} (checked in the lane)"}


def derive(anchor: Anchor, text: str) -> Any:
    """The value ``anchor.pattern`` yields in ``text`` (None when it does not match)."""
    m = re.search(anchor.pattern, text, re.S | re.M)
    if m is None:
        return None
    if anchor.convert == "present":
        return True
    raw = m.group(1)
    if anchor.convert == "int":
        return int(raw.replace(",", ""))
    if anchor.convert == "bool":
        return raw == "True"
    if anchor.convert == "list":
        return sorted(str(x) for x in ast.literal_eval("[" + raw.strip("[]{}") + "]"))
    return raw


def line_of(anchor: Anchor, text: str) -> int | None:
    """1-based line where the pattern's match starts."""
    m = re.search(anchor.pattern, text, re.S | re.M)
    return None if m is None else text.count("\n", 0, m.start()) + 1


_CFG = "megatron/bridge/training/config.py"
_SPECS = "megatron/bridge/data/packing/config.py"
_GLM = "megatron/bridge/recipes/glm/h100/glm45.py"
_QWEN_NEXT = "megatron/bridge/recipes/qwen/h100/qwen3_next.py"
_DSV4 = "megatron/bridge/recipes/deepseek/h100/deepseek_v4.py"
_DATASETS = "megatron/bridge/recipes/utils/dataset_utils.py"
_SEED_SKILL = "002_b0bd5a1da7cde53a.txt"
_SEED_DOC = "000_03d7ad1a67fddf90.txt"

ANCHORS: tuple[Anchor, ...] = (
    # ConfigContainer.validate
    Anchor("bridge-offline-mbs1", "upstream", _CFG,
           r"if self\.train\.micro_batch_size > (\d+):\s*raise ValueError\(\s*\"Micro batch size should be 1 when "
           r"training with packed sequence", 1, "int", 1466,
           note="offline packing rejects micro_batch_size above 1"),
    Anchor("bridge-offline-equivalent-gbs", "upstream", _CFG,
           r"Set global batch size to \{self\.train\.global_batch_size (//|\*) self\.train\.micro_batch_size\}", "//",
           "str", 1472, note="the error proposes global_batch_size // micro_batch_size"),
    Anchor("bridge-offline-equivalent-pack", "upstream", _CFG,
           r"Set packed sequence length to \{packed_sequence_size (\*|//) self\.train\.micro_batch_size\}", "*",
           "str", 1474, note="the error proposes packed_sequence_size * micro_batch_size"),
    Anchor("bridge-in-batch-mbs", "upstream", _CFG,
           r"if enable_in_batch_packing and self\.train\.micro_batch_size == (\d+):", 1, "int", 1480,
           note="in-batch packing rejects micro_batch_size 1"),
    Anchor("bridge-cp-seq-divisible", "upstream", _CFG,
           r"self\.model\.seq_length % \(self\.model\.context_parallel_size \* (\d+)\) == 0", 2, "int", 1436,
           note="seq_length must be divisible by 2 * CP"),
    Anchor("bridge-cp-per-token-loss", "upstream", _CFG,
           r"assert (self\.model\.calculate_per_token_loss), \(\s*\"When finetuning with CP>1", "self.model.calculate_per_token_loss",
           "str", 1452, note="fine-tuning with CP>1 needs calculate_per_token_loss"),
    Anchor("bridge-cp-avg-collective", "upstream", _CFG,
           r"assert (not) self\.ddp\.average_in_collective, \(\s*\"When finetuning with CP>1", "not", "str", 1455,
           note="fine-tuning with CP>1 needs average_in_collective off"),
    Anchor("bridge-energon-mbs1", "upstream", _CFG,
           r"Energon native sequence packing requires train\.micro_batch_size=(\d+)", 1, "int", 1329,
           release=False, note="Energon native packing needs micro_batch_size 1"),
    Anchor("bridge-energon-per-token-loss", "upstream", _CFG,
           r"Energon native sequence packing requires model\.calculate_per_token_loss=(True|False)", True, "bool", 1331,
           release=False, note="Energon native packing needs calculate_per_token_loss"),
    Anchor("bridge-energon-avg-collective", "upstream", _CFG,
           r"Energon native sequence packing requires ddp\.average_in_collective=(True|False)", False, "bool", 1333,
           release=False, note="Energon native packing needs average_in_collective off"),
    Anchor("bridge-energon-no-mtp", "upstream", _CFG,
           r"Energon native sequence packing (does not support) MTP", "does not support", "str", 1335,
           release=False, note="Energon native packing rejects MTP"),
    Anchor("bridge-energon-no-graphs", "upstream", _CFG,
           r"Energon native sequence packing (does not support) CUDA graphs", "does not support", "str", 1339,
           release=False, note="Energon native packing rejects CUDA graphs (language and vision)"),
    Anchor("bridge-energon-dataset-mbs", "upstream", _CFG,
           r"EnergonDatasetConfig\.micro_batch_size must match (train\.micro_batch_size)", "train.micro_batch_size",
           "str", 1202, note="the Energon dataset's micro_batch_size must equal train.micro_batch_size"),
    Anchor("bridge-pad-cu-needs-fixed-width", "upstream", _CFG,
           r"pad_cu_seqlens=True requires dataset (pad_to_max_length)=True", "pad_to_max_length", "str", 1170,
           note="pad_cu_seqlens needs pad_to_max_length"),
    Anchor("bridge-graphs-need-fixed-width", "upstream", _CFG,
           r"Offline packing with CUDA graphs requires dataset pad_to_max_length=(True|False)", True, "bool", 1179,
           note="offline packing with training CUDA graphs needs pad_to_max_length"),
    Anchor("bridge-attn-graphs-need-pad-cu", "upstream", _CFG,
           r"Packed attention CUDA graphs require offline_packing_specs\.pad_cu_seqlens=(True|False)", True, "bool",
           1186, note="graphs that capture attention need pad_cu_seqlens"),
    Anchor("bridge-attn-graph-scope", "upstream", _CFG,
           r"not cuda_graph_modules or \"(\w+)\" in cuda_graph_modules", "attn", "str", 1182,
           note="a TE graph captures packed attention when its scope is empty or contains attn"),
    Anchor("bridge-seq-length-match", "upstream", _CFG,
           r"assert self\.model\.seq_length (==) data_seq_length", "==", "str", 1505,
           note="model.seq_length must equal dataset.seq_length"),
    # PackedSequenceSpecs
    Anchor("bridge-specs-size-default", "upstream", _SPECS,
           r"packed_sequence_size: int = (-?\d+)", -1, "int", 30, note="packed_sequence_size defaults to -1"),
    Anchor("bridge-specs-size-positive", "upstream", _CFG,
           r"offline_packing_specs\.packed_sequence_size must be greater than (\d+)", 0, "int", 1464,
           note="packed_sequence_size must be > 0 when offline packing is on"),
    Anchor("bridge-specs-pad-default", "upstream", _SPECS,
           r"pad_seq_to_mult: int \| None = (\d+)", 1, "int", 39, note="pad_seq_to_mult defaults to 1"),
    Anchor("bridge-specs-pad-cu-default", "upstream", _SPECS,
           r"pad_cu_seqlens: bool = (True|False)", False, "bool", 37, note="pad_cu_seqlens defaults to False"),
    Anchor("bridge-specs-max-single", "upstream", _SPECS,
           r"max_single_sequence_length cannot exceed (packed_sequence_size)", "packed_sequence_size", "str", 53,
           note="max_single_sequence_length cannot exceed packed_sequence_size"),
    Anchor("bridge-parquet-suffixes", "upstream", "megatron/bridge/data/packing/paths.py",
           r"Files must end with \.(parquet) or \.pq", "parquet", "str", 150,
           note="packed Parquet files end with .parquet or .pq"),
    Anchor("bridge-parquet-suffix-pq", "upstream", "megatron/bridge/data/packing/paths.py",
           r"Files must end with \.parquet or \.(pq)", "pq", "str", 150, note="the short suffix .pq"),
    Anchor("bridge-npy-deprecated", "upstream", _SPECS,
           r"The \.npy packed sequence format is (deprecated)", "deprecated", "str", 60,
           note="the .npy packed format is deprecated in favour of packed Parquet"),
    Anchor("bridge-parquet-columns", "upstream", "megatron/bridge/data/packing/parquet.py",
           r"REQUIRED_COLUMNS = (\{[^}]*\})", ["input_ids", "loss_mask", "seq_start_id"], "list", 49,
           note="the packed Parquet reader requires these columns"),
    # algorithms and preparation
    Anchor("bridge-packing-algos", "upstream", "megatron/bridge/data/packing/algorithms.py",
           r"PACKING_ALGOS = (\[[^\]]*\])", ["first_fit_decreasing", "first_fit_shuffle"], "list", 27,
           note="the packing algorithms Bridge offers"),
    Anchor("bridge-default-algo", "upstream", "megatron/bridge/data/packing/offline.py",
           r"def prepare_gpt_sft_packed_data\(.*?packing_algorithm: str = \"(\w+)\"", "first_fit_shuffle", "str", 218,
           note="prepare_gpt_sft_packed_data uses first_fit_shuffle by default"),
    Anchor("bridge-stored-extra-token", "upstream", "megatron/bridge/data/packing/offline.py",
           r"stored_max_seq_length = runtime_max_seq_length \+ (\d+) if max_runtime_pad_cap", 1, "int", 183,
           note="with pad_seq_to_mult > 1 a stored sample keeps one extra token (labels are shifted input_ids)"),
    # recipes
    Anchor("bridge-glm45-no-packing", "upstream", _GLM,
           r"cfg\.dataset = default_squad_config\(seq_length=\d+, enable_offline_packing=(True|False)", False,
           "bool", 299, note="the GLM-4.5 SFT recipe turns offline packing off"),
    Anchor("bridge-glm45-seq", "upstream", _GLM,
           r"cfg\.dataset = default_squad_config\(seq_length=(\d+), enable_offline_packing=False", 2048, "int", 299,
           note="the GLM-4.5 SFT recipe's sequence length"),
    Anchor("bridge-qwen3next-no-packing", "upstream", _QWEN_NEXT,
           r"cfg\.dataset = default_squad_config\(seq_length=\d+, enable_offline_packing=(True|False)", False,
           "bool", 163, note="the Qwen3-Next SFT recipe turns offline packing off"),
    Anchor("bridge-qwen3next-gbs", "upstream", _QWEN_NEXT,
           r"cfg\.train\.global_batch_size = (\d+)  # enable_offline_packing=False", 64, "int", 203,
           note="the Qwen3-Next SFT recipe's global batch size without packing"),
    Anchor("bridge-dsv4-no-packing", "upstream", _DSV4,
           r"cfg\.dataset = default_squad_config\(seq_length=\d+, enable_offline_packing=(True|False)\)", False, "bool",
           356, note="the DeepSeek-V4 SFT recipe turns offline packing off"),
    Anchor("bridge-squad-pack-size", "upstream", _DATASETS,
           r"offline_packing_specs = PackedSequenceSpecs\(packed_sequence_size=(\w+), pad_seq_to_mult", "seq_length",
           "str", 132, note="the default SQuAD config packs to its seq_length"),
    Anchor("bridge-squad-fixed-width", "upstream", _DATASETS,
           r"if enable_offline_packing:\s*dataset_kwargs\[\"pad_to_max_length\"\] = (True|False)", True, "bool", 130,
           note="the default SQuAD config pads packs to a fixed width when packing"),
    # seed documents
    Anchor("seed-align-tp1-cp1", "seed", _SEED_SKILL, r"It produces (\d+) for TP1/CP1 with\s+SP disabled", 1, "int",
           note="the alignment formula gives 1 for TP1/CP1 without SP"),
    Anchor("seed-align-tp4-cp1-sp", "seed", _SEED_SKILL, r"and (\d+) for TP4/CP1 with SP enabled", 4, "int",
           note="the alignment formula gives 4 for TP4/CP1 with SP"),
    Anchor("seed-token-slots", "seed", _SEED_DOC, r"8K/GBS8 each retain ([\d,]+) token slots per step", 65536, "int",
           note="2K/GBS32, 4K/GBS16 and 8K/GBS8 keep the same token slots"),
    Anchor("seed-dp-limit", "seed", _SEED_DOC, r"8K/GBS8 run therefore requires DP no larger than (\d+)", 8, "int",
           note="GBS must be a multiple of DP and at least DP"),
    Anchor("seed-first-target", "seed", _SEED_DOC, r"use (\d+) as the first offline-pack target", 8192, "int",
           note="the recommended first offline pack length for text SFT"),
    Anchor("seed-buffer-unit", "seed", _SEED_DOC,
           r"packing_buffer_size counts (candidate samples) independently in every Energon worker",
           "candidate samples", "str", note="packing_buffer_size counts candidate samples"),
    Anchor("seed-global-pool", "seed", _SEED_DOC,
           r"It is the only packing path whose (pool crosses rank boundaries)", "pool crosses rank boundaries", "str",
           note="global-batch packing is the only path whose pool crosses DP ranks"),
    Anchor("seed-hybridep-width", "seed", _SEED_SKILL,
           r"HybridEP with a (\d+)-token combine chunk requires a width divisible by", 128, "int",
           note="a HybridEP combine chunk constrains the pack width"),
    Anchor("seed-pad-cu-metadata", "seed", _SEED_SKILL,
           r"pad_cu_seqlens = True` also requires a (metadata JSON file)", "metadata JSON file", "str",
           note="pad_cu_seqlens needs the packing metadata file"),
)

ANCHORS_BY_ID: dict[str, Anchor] = {a.id: a for a in ANCHORS}


def anchor(anchor_id: str) -> Anchor:
    """The anchor with this id (KeyError names the unknown id)."""
    return ANCHORS_BY_ID[anchor_id]


__all__ = ["ANCHORS", "ANCHORS_BY_ID", "Anchor", "BRIDGE", "BRIDGE_COMMIT", "anchor", "derive", "line_of"]

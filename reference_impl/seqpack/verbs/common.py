"""What several verbs' options share: the topology fields (declared once) and a few field declarations."""

from __future__ import annotations

from typing import Any

from seqpack.core.alignment import Topology
from seqpack.core.choices import ALGORITHMS, DEFAULT_ALGORITHM, SCHEMA_OPTIONS, TRUNCATION_MODES, VISION_OPTIONS
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_PAD_SEQ_TO_MULT, MAX_PARALLEL_SIZE, MAX_SEED, MAX_SEQS_PER_PACK
from seqpack.verbs.declare import option, verb_options

__all__ = [
    "AlignedOptions",
    "TopologyOptions",
    "algorithm_option",
    "bridge_version_option",
    "check_choice",
    "max_seqs_option",
    "parallel_option",
    "pixels_option",
    "template_error_option",
    "schema_option",
    "seed_option",
    "tokenizer_option",
    "truncation_option",
    "vision_option",
]


def parallel_option(default: Any, help: str, **meta: Any) -> Any:
    """A parallel size (TP, CP, evaluation CP) from 1 to MAX_PARALLEL_SIZE."""
    return option(default, help=help, minimum=1, maximum=MAX_PARALLEL_SIZE, **meta)


def seed_option(default: int, help: str = "random seed", **meta: Any) -> Any:
    """A seed: an integer from 0 to MAX_SEED (NumPy and torch take a signed 64-bit integer)."""
    return option(default, help=help, minimum=0, maximum=MAX_SEED, **meta)


def algorithm_option() -> Any:
    """The bin-packing algorithm."""
    return option(DEFAULT_ALGORITHM, help="bin-packing algorithm", choices=ALGORITHMS, label="packing algorithm")


def truncation_option(help: str = "samples longer than their cap: cut the end (right), the start (left; not for "
                      "chat), leave them out (reject), or drop a chat's oldest turns, keeping its system prompt and "
                      "last exchange (oldest_turns; chat only)") -> Any:
    """What happens to a sample longer than its cap."""
    return option("right", help=help, choices=TRUNCATION_MODES)


def max_seqs_option() -> Any:
    """The most sequences one pack may hold (None: no limit)."""
    return option(None, help="most sequences in one pack (default: no limit)", minimum=1, maximum=MAX_SEQS_PER_PACK)


def schema_option(default: Any = "auto", choices: Any = SCHEMA_OPTIONS,
                  help: str = "row schema of the JSONL (auto: detected from the first row)") -> Any:
    """The row schema of JSONL data."""
    return option(default, help=help, choices=choices)


#: The one wording of the tokenizer argument, on every command and tool.
TOKENIZER_HELP = ("the model's tokenizer: its folder (tokenizer.json, with tokenizer_config.json and its chat "
                  "template) or the tokenizer.json itself; default: the embedded byte tokenizer, reported as "
                  "'byte (default)', whose lengths are not the model's")


def tokenizer_option(help: str = TOKENIZER_HELP) -> Any:
    """A tokenizer: a path (file or folder) on the faces, a path or a tokenizer object in the library."""
    return option(None, help=help, path="tokenizer")


def bridge_version_option(what: str) -> Any:
    """The Megatron-Bridge a verb follows: the release the upstream lane checks (default) or main."""
    from seqpack.core.choices import BRIDGE_VERSIONS
    from seqpack.core.versions import DEFAULT_BRIDGE_TARGET

    return option(DEFAULT_BRIDGE_TARGET, choices=BRIDGE_VERSIONS,
                  help=f"the Megatron-Bridge {what}: {DEFAULT_BRIDGE_TARGET} (the release the upstream lane checks, "
                  "default) or main (Bridge main, read but not checkable in the lane)")


def pixels_option(which: str) -> Any:
    """The user's pixel budget of an image (``min`` or ``max``), replacing the vision preset's."""
    from seqpack.core.limits import MAX_IMAGE_PIXELS

    return option(None, help=f"{which}imum pixels of a resized image (default: the vision preset's; set it to your "
                  f"processor's {which}_pixels, e.g. from preprocessor_config.json)", minimum=1,
                  maximum=MAX_IMAGE_PIXELS)


def template_error_option() -> Any:
    """What a chat row the model's template refuses does."""
    from seqpack.core.choices import TEMPLATE_ERROR_POLICIES

    return option("error", help="chat rows the model's chat template refuses: stop with the row named (error) or "
                  "skip them, counted as template_error (skip)", choices=TEMPLATE_ERROR_POLICIES)


def vision_option(help: str) -> Any:
    """How rows with images are read: auto, none, or a vision preset."""
    return option("auto", help=help, choices=VISION_OPTIONS)


@verb_options
class TopologyOptions:
    """TP / CP / SP / evaluation CP of the run (unset sizes mean 1)."""

    tp: int | None = parallel_option(None, "tensor-parallel size (derives the alignment; default 1)")
    cp: int | None = parallel_option(None, "context-parallel size (derives the alignment; default 1)")
    sp: bool = option(False, help="sequence parallelism on (derives the alignment)")
    eval_cp: int | None = parallel_option(None, "a distinct evaluation CP size (derives the alignment)")

    @property
    def topology(self) -> Topology:
        """The topology (unset sizes are 1)."""
        return Topology(1 if self.tp is None else self.tp, 1 if self.cp is None else self.cp, self.sp, self.eval_cp)

    @property
    def topology_given(self) -> bool:
        """Whether any topology field was set."""
        return self.tp is not None or self.cp is not None or self.sp or self.eval_cp is not None


@verb_options
class AlignedOptions(TopologyOptions):
    """The topology plus an optional explicit ``pad_seq_to_mult``.

    :meth:`multiple` is the per-sequence alignment the verb uses: the explicit value when given (it
    must be a multiple of the required minimum, 2*CP over train and eval CP, rule
    ``PACK-OFFLINE-PAD-MULT-TOPOLOGY``; one that misses the recommended value is used with a warning),
    else the recommended one (:func:`seqpack.core.alignment.alignment_multiple`).
    """

    pad_seq_to_mult: int | None = option(
        None, help="explicit per-sequence alignment (default: the recommended value derived from TP/CP/SP; a given "
        "value must be a multiple of the required 2*CP)", minimum=1, maximum=MAX_PAD_SEQ_TO_MULT)

    def multiple(self) -> int:
        """The per-sequence alignment multiple (see the class docstring)."""
        return self.topology.multiple(self.pad_seq_to_mult)


def check_choice(name: str, value: Any, choices: Any, *, allow_none: bool = False) -> Any:
    """``value`` when it is one of ``choices`` (or None with ``allow_none``), else a UsageError listing them
    (for a value a verb derives itself; declared fields are checked by ``check_options``)."""
    if value is None and allow_none:
        return None
    options = tuple(choices)
    if value not in options:
        raise UsageError(f"unknown {name} {value!r}; choose one of {', '.join(options)}", field=name)
    return value

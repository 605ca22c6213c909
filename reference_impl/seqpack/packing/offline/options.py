"""Options of offline packing and the per-split accounting of every input row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from seqpack.core.arguments import positive_int
from seqpack.core.errors import UsageError
from seqpack.core.limits import MAX_PACK_LEN, MAX_PAD_SEQ_TO_MULT, MAX_SEQS_PER_PACK, MAX_SHARD_ROWS, MIN_SHARD_ROWS

EXAMPLES_PER_REASON = 5
SPLITS = ("training", "validation", "test")
WORK_DIR = ".seqpack-work"
PROBE_NAME = ".shared-probe"
LATER_OPTIONS = ("pad_seq_length_to_mult",)
#: Rows per shard of ``bin_scope="shard"`` when not given.
DEFAULT_SHARD_ROWS = 1_000_000

__all__ = ["OfflinePackOptions", "SplitAccount", "check_max_gap"]


def check_max_gap(value: Any) -> float | None:
    """``max_gap``: None, or a finite number >= 0 (0 asks for packs at the lower bound)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise UsageError(f"max_gap must be a finite number >= 0, got {value!r}", field="max_gap",
                         fix="for example --max-gap 0.001 (0.1 % above the lower bound)")
    return float(value)


# ------------------------------------------------------------------------------------------------
# Options and results
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfflinePackOptions:
    """Every option that changes which samples land in which pack (all are fingerprinted)."""

    pack_size: int
    pad_seq_to_mult: int = 1
    max_seq_length: int | None = None
    truncation: str = "right"
    algorithm: str = "best_fit_decreasing"
    seed: int = 1234
    max_seqs_per_pack: int | None = None
    bridge_compat: bool = False
    shuffle_packs: bool = True
    num_samples: int | None = None
    pad_seq_length_to_mult: int | None = None
    bin_scope: str = "global"
    shard_rows: int | None = None

    def __post_init__(self) -> None:
        positive_int("pack_size", self.pack_size, maximum=MAX_PACK_LEN)
        positive_int("pad_seq_to_mult", self.pad_seq_to_mult, maximum=MAX_PAD_SEQ_TO_MULT)
        positive_int("max_seqs_per_pack", self.max_seqs_per_pack, allow_none=True, maximum=MAX_SEQS_PER_PACK)
        positive_int("pad_seq_length_to_mult", self.pad_seq_length_to_mult, allow_none=True,
                     maximum=MAX_PAD_SEQ_TO_MULT)
        if self.max_seq_length is not None and not 1 <= self.max_seq_length <= self.pack_size:
            raise UsageError(
                f"max_seq_length={self.max_seq_length} must be between 1 and pack_size={self.pack_size}",
                rule_id="PACK-OFFLINE-MAX-SINGLE-LE-PACK",
                field="max_seq_length",
                fix="lower max_seq_length (the per-sample cap) or raise pack_size",
            )
        if self.cap < 1:
            raise UsageError(
                f"max_seq_length={self.seq_cap} is smaller than pad_seq_to_mult={self.pad_seq_to_mult}",
                field="max_seq_length",
                fix="the per-sample cap must be at least the alignment multiple",
            )
        if self.pack_size % self.pad_seq_to_mult:
            raise UsageError(
                f"pack_size={self.pack_size} is not a multiple of pad_seq_to_mult={self.pad_seq_to_mult}",
                rule_id="PACK-OFFLINE-WIDTH-ALIGNED",
                field="pack_size",
                fix="use a pack size that is a multiple of the alignment",
            )
        if self.bridge_compat and self.algorithm not in ("first_fit_shuffle", "first_fit_decreasing"):
            raise UsageError(
                "bridge_compat reproduces Bridge's first_fit_shuffle or first_fit_decreasing only",
                field="algorithm",
            )
        self._check_override()
        self._check_scope()

    def _check_scope(self) -> None:
        from seqpack.core.choices import BIN_SCOPES

        if self.bin_scope not in BIN_SCOPES:
            raise UsageError(f"unknown bin_scope {self.bin_scope!r}; choose one of {', '.join(BIN_SCOPES)}",
                             field="bin_scope")
        positive_int("shard_rows", self.shard_rows, allow_none=True, minimum=MIN_SHARD_ROWS, maximum=MAX_SHARD_ROWS)
        if self.bin_scope == "global" and self.shard_rows is not None:
            raise UsageError("shard_rows applies to bin_scope='shard' only", field="shard_rows",
                             fix="add --bin-scope shard, or drop --shard-rows")
        if self.bin_scope == "shard" and self.bridge_compat:
            raise UsageError("bridge_compat reproduces Megatron-Bridge's packing of the whole split; it has no shard "
                             "scope", field="bin_scope", fix="drop --bin-scope shard")

    @property
    def rows_per_shard(self) -> int | None:
        """Rows per shard with ``bin_scope="shard"`` (``shard_rows`` or :data:`DEFAULT_SHARD_ROWS`), else None."""
        if self.bin_scope != "shard":
            return None
        return self.shard_rows or DEFAULT_SHARD_ROWS

    def _check_override(self) -> None:
        override = self.pad_seq_length_to_mult
        if override is None:
            return
        if override % self.pad_seq_to_mult:
            raise UsageError(
                f"pad_seq_length_to_mult={override} is not a multiple of pad_seq_to_mult={self.pad_seq_to_mult}: "
                "pre-padded segments would break the alignment the topology needs",
                rule_id="PACK-OFFLINE-PAD-MULT-TOPOLOGY",
                field="pad_seq_length_to_mult",
                fix=f"use a multiple of {self.pad_seq_to_mult}",
            )
        if self.bridge_compat and self.pad_seq_to_mult == 1:
            raise UsageError(
                "with pad_seq_to_mult=1 Megatron-Bridge does not pre-pad at all and ignores pad_seq_length_to_mult, "
                "so bridge_compat cannot honour it",
                field="pad_seq_length_to_mult",
                fix="drop pad_seq_length_to_mult, or set pad_seq_to_mult > 1",
            )

    @property
    def seq_cap(self) -> int:
        """The per-sample budget in runtime tokens before alignment (``max_seq_length`` or ``pack_size``)."""
        return self.max_seq_length or self.pack_size

    @property
    def cap(self) -> int:
        """Largest runtime length a sample may have: ``floor(seq_cap / m) * m``."""
        return (self.seq_cap // self.pad_seq_to_mult) * self.pad_seq_to_mult

    @property
    def tokenize_budget(self) -> int:
        """Stored ids the tokenizer may produce for one sample: ``cap + 1``.

        With ``bridge_compat`` Megatron-Bridge's budget instead (``tokenize_dataset`` in
        megatron-bridge 0.6.2): ``seq_cap`` when ``m == 1`` (so a sample keeps at most ``seq_cap - 1``
        runtime tokens), else ``seq_cap + 1``, after which :attr:`stored_cut` cuts the sample.
        """
        if not self.bridge_compat:
            return self.cap + 1
        return self.seq_cap if self.pad_seq_to_mult == 1 else self.seq_cap + 1

    @property
    def stored_cut(self) -> int | None:
        """With ``bridge_compat`` and ``m > 1``: the stored length (``cap + 1``) a tokenized sample is cut
        to, keeping its head, as Bridge's pre-padding step does (the cut loses the EOS and the end of
        the completion; it only bites when ``seq_cap`` is not a multiple of ``m``). Otherwise None."""
        if self.bridge_compat and self.pad_seq_to_mult > 1 and self.tokenize_budget > self.cap + 1:
            return self.cap + 1
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (options in :data:`LATER_OPTIONS` only when set; ``bin_scope`` and ``shard_rows`` only for
        ``bin_scope="shard"``). With ``bridge_compat`` it also
        names the Megatron-Bridge release whose preparation is reproduced (``bridge_release``), so packs
        made for another release's rules never share a fingerprint with these."""
        data = asdict(self)
        for key in LATER_OPTIONS:
            if data[key] is None:
                del data[key]
        del data["shard_rows"]
        if self.bin_scope == "global":  # the exact default: fingerprints of earlier packs stay valid
            del data["bin_scope"]
        else:
            data["shard_rows"] = self.rows_per_shard
        if self.bridge_compat:
            from seqpack.core.versions import BRIDGE_RELEASE

            data["bridge_release"] = BRIDGE_RELEASE
        return data


@dataclass
class SplitAccount:
    """Where every input row of one split went."""

    rows_in: int = 0
    packed: int = 0
    truncated: int = 0
    skipped: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        """Rows skipped, all reasons together."""
        return sum(v["count"] for v in self.skipped.values())

    def skip(self, reason: str, where: dict[str, Any]) -> None:
        """Count one skipped row under ``reason`` (keeping the first few locations)."""
        entry = self.skipped.setdefault(reason, {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < EXAMPLES_PER_REASON:
            entry["examples"].append(where)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (with the total)."""
        return {
            "rows_in": self.rows_in,
            "packed": self.packed,
            "truncated": self.truncated,
            "skipped_total": self.skipped_total,
            "skipped": self.skipped,
        }

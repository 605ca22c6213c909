"""``PackingTaskEncoder``: an energon ``TaskEncoder`` that packs samples online, per worker.

Energon calls the hooks in this order inside every dataloader worker (energon.md section 2):

* :meth:`encode_sample` once per sample: tokenize the row with the data layer
  (:func:`seqpack.data.tokenize_row`; a VLM encoder decodes the sample's image members and
  follows the VLM sample contract, :func:`seqpack.data.vlm.sample.tokenize_vlm_row`: vision tokens
  per image, loss 0 on them), apply the next-token shift and compute the aligned length
  ``ceil(L / m) * m`` (``m`` = the topology's ``pad_seq_to_mult``) of the whole sequence, image
  tokens included.
  A sample whose aligned length exceeds ``seq_length`` raises :class:`PackingError` naming the
  sample key, file, line and lengths; nothing is truncated.
* :meth:`select_samples_to_pack` once per full buffer of ``packing_buffer_size`` encoded samples
  (and once more for the partial buffer at the end of a finite stream): first-fit decreasing on
  aligned lengths with capacity ``seq_length``
  (:func:`seqpack.packing.algorithms.pack_lengths`), mapped back to the sample objects.
  The groups always partition the buffer (checked), so energon never drops a sample.
* :meth:`pack_selected_samples` once per group: wrap it (empty restore key; energon sets it).
* :meth:`batch` once per pack (micro-batch size 1): one canonical THD row via
  :func:`seqpack.packing.thd.build_thd_batch`, plus ``sample_keys``, and for a VLM
  encoder the visual keys of :func:`seqpack.packing.vlm.attach_visual_inputs` (patch rows
  in segment order with their sequence index, grids, ``vision_index``, M-RoPE ids restarting in
  every sequence).

``encode_sample``, ``pack_selected_samples`` and ``batch`` are ``@stateless`` (their output
depends on the input only), which lets energon rebuild buffered samples and whole packs from
restore keys; ``select_samples_to_pack`` is deterministic, because energon replays it after a
restore.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np
from megatron.energon import Cooker, DefaultTaskEncoder, stateless

from seqpack.core.alignment import round_up
from seqpack.data.location import RowLocation, at_row
from seqpack.data.rejections import SampleRejected
from seqpack.data.schemas import PromptCompletionSchema, ChatSchema
from seqpack.data.tokenize import to_training_example, tokenize_row
from seqpack.data.tokenizers import Tokenizer
from seqpack.core.arguments import positive_int
from seqpack.core.errors import InputError, PackingError, SeqpackError, UsageError
from seqpack.packing.algorithms import pack_lengths
from seqpack.data.vlm.vision import VisionSpec
from seqpack.data.vlm.sample import VLMSettings, tokenize_vlm_row
from seqpack.packing.energon.media import resolve_members
from seqpack.packing.energon.samples import EncodedSample, PackedGroup, RowSample, cook_row_sample
from seqpack.packing.thd import build_thd_batch
from seqpack.packing.vlm import VISUAL_KEYS, attach_visual_inputs

#: Keys :meth:`PackingTaskEncoder.batch` adds next to the canonical THD keys.
BOOKKEEPING_KEYS: tuple[str, ...] = ("__key__", "__restore_key__", "sample_keys")
__all__ = ["BOOKKEEPING_KEYS", "VISUAL_KEYS", "PackingTaskEncoder"]


def _name_sample(err: SeqpackError, key: str) -> SeqpackError:
    """Put ``sample <key>:`` in front of an error's message (once).

    A :class:`SampleRejected` becomes a plain :class:`InputError` (same message and location):
    torch re-creates a worker's exception from its message alone, which a rejection, needing a
    reason too, does not survive.
    """
    if isinstance(err, SampleRejected):
        err = InputError(err.message, file=err.file, line=err.line, row=err.row, field=err.field, fix=err.fix)
    prefix = f"sample {key}: "
    if not err.message.startswith(prefix):
        err.message = prefix + err.message
        err.args = (err.message,)
    return err


class PackingTaskEncoder(DefaultTaskEncoder[RowSample, EncodedSample, dict, dict]):
    """Energon online packing into canonical THD micro-batches (module docstring).

    ``seq_length`` is the pack capacity (physical tokens per row), ``pad_seq_to_mult`` the
    per-sequence alignment. ``vision`` (a preset name, :class:`~seqpack.data.vlm.vision.VisionSpec`
    or :class:`~seqpack.data.vlm.sample.VLMSettings`; None for a text-only encoder) makes it a VLM
    encoder. ``pad_to_max_length`` makes every row exactly ``seq_length`` wide (the slack goes to
    the last sequence, as in-batch packing does).
    """

    cookers = [Cooker(cook_row_sample)]

    def __init__(
        self,
        *,
        seq_length: int,
        tokenizer: Tokenizer,
        schema: PromptCompletionSchema | ChatSchema,
        pad_seq_to_mult: int = 1,
        pad_to_max_length: bool = False,
        vision: str | VisionSpec | VLMSettings | None = None,
        label_pad_id: int = -100,
    ) -> None:
        super().__init__()
        for name, value in (("seq_length", seq_length), ("pad_seq_to_mult", pad_seq_to_mult)):
            positive_int(name, value)
        if pad_to_max_length and seq_length % pad_seq_to_mult:
            raise UsageError(
                f"pad_to_max_length needs seq_length={seq_length} divisible by pad_seq_to_mult={pad_seq_to_mult}",
                field="seq_length",
            )
        self.seq_length = seq_length
        self.pad_seq_to_mult = pad_seq_to_mult
        self.pad_to_max_length = bool(pad_to_max_length)
        self.tokenizer = tokenizer
        self.schema = schema
        self.vlm = vision if vision is None or isinstance(vision, VLMSettings) else VLMSettings.create(vision, tokenizer)
        self.label_pad_id = label_pad_id
        self.pad_token_id = int(getattr(tokenizer, "pad_id", 0) or 0)

    # -- per sample ---------------------------------------------------------------------------
    def aligned(self, length: int) -> int:
        """Physical length of a sample of ``length`` tokens: rounded up to ``pad_seq_to_mult``."""
        return round_up(length, self.pad_seq_to_mult)

    @stateless
    def encode_sample(self, sample: RowSample) -> EncodedSample:
        """Tokenize, expand the image marker, shift, measure; reject a sample that cannot fit."""
        src = sample.source or {}
        loc = RowLocation(file=src.get("file"), line=src.get("line"), row=src.get("row"))
        try:
            with at_row(loc):
                return self._encode(sample)
        except SeqpackError as err:
            raise _name_sample(err, sample.__key__) from None

    def _encode(self, sample: RowSample) -> EncodedSample:
        if self.vlm is not None:
            ex = tokenize_vlm_row(
                resolve_members(sample.row, sample.media or {}), self.schema, self.tokenizer,
                vision=self.vlm.vision, vision_tokens=self.vlm.tokens, max_length=sys.maxsize,
            )
            example, visuals = ex, tuple(ex.visuals)
        else:
            if sample.media:
                raise UsageError("the sample has images but the encoder was built without a vision spec "
                                 "(pass vision=..., e.g. 'qwen2_vl')", field="vision")
            tok = tokenize_row(sample.row, self.schema, self.tokenizer, max_length=sys.maxsize, truncation="reject")
            example, visuals = to_training_example(tok), ()
        length = int(example.tokens.shape[0])
        aligned = self.aligned(length)
        if aligned > self.seq_length:
            raise PackingError(
                f"aligned sequence length {aligned} ({length} tokens rounded up to a multiple of "
                f"{self.pad_seq_to_mult}) exceeds seq_length={self.seq_length}; samples are never truncated",
                field="seq_length",
                fix="raise seq_length, or shorten or drop this row in the source data",
            )
        return EncodedSample.derive_from(
            sample,
            tokens=example.tokens,
            labels=example.labels,
            loss_mask=example.loss_mask,
            length=length,
            aligned_length=aligned,
            visuals=visuals,
            source=dict(sample.source or {}),
        )

    # -- packing ------------------------------------------------------------------------------
    def select_samples_to_pack(self, samples: list[EncodedSample]) -> list[list[EncodedSample]]:
        """First-fit decreasing on aligned lengths; the groups partition ``samples`` exactly."""
        if not samples:
            return []
        lengths = np.fromiter((s.aligned_length for s in samples), dtype=np.int64, count=len(samples))
        bins = pack_lengths(lengths, self.seq_length, "first_fit_decreasing").bins()
        placed = sorted(i for b in bins for i in b)
        if placed != list(range(len(samples))):
            raise PackingError(
                f"packing selection does not partition the buffer of {len(samples)} samples "
                f"(placed {len(placed)}, distinct {len(set(placed))})"
            )
        return [[samples[i] for i in b] for b in bins]

    @stateless
    def pack_selected_samples(self, samples: list[EncodedSample]) -> PackedGroup:
        """Wrap one group; its restore key starts empty and energon fills it in."""
        if not samples:
            raise PackingError("cannot pack an empty group")
        return PackedGroup(
            __key__=",".join(s.__key__ for s in samples),
            __restore_key__=(),
            __subflavors__=None,
            samples=list(samples),
        )

    @stateless
    def batch(self, packs: list[PackedGroup]) -> dict[str, Any]:
        """One pack (micro-batch size 1) -> one canonical THD micro-batch plus bookkeeping keys."""
        if len(packs) != 1:
            raise PackingError(
                f"Energon online packing needs micro_batch_size=1 (one pack per micro-batch), got {len(packs)} packs",
                rule_id="PACK-ENERGON-MBS1",
            )
        return self.thd_batch(packs[0].samples)

    def thd_batch(self, samples: Sequence[EncodedSample]) -> dict[str, Any]:
        """The micro-batch of one group (also usable without energon, e.g. in tests)."""
        rows = [{"tokens": s.tokens, "labels": s.labels, "loss_mask": s.loss_mask} for s in samples]
        out = build_thd_batch(
            rows,
            pad_seq_to_mult=self.pad_seq_to_mult,
            max_length=self.seq_length,
            pad_to_max_length=self.pad_to_max_length,
            pad_token_id=self.pad_token_id,
            label_pad_id=self.label_pad_id,
        )
        if self.vlm is not None:
            attach_visual_inputs(out, [s.visuals for s in samples], self.vlm)
        out["sample_keys"] = [s.__key__ for s in samples]
        out["__key__"] = ",".join(out["sample_keys"])
        out["__restore_key__"] = ()
        return out

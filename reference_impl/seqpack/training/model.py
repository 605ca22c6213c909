"""A tiny reference GPT in plain torch, for checking packed batches numerically.

Token embeddings, rotary position embeddings driven by ``position_ids`` (so they restart with
every packed sequence), pre-norm blocks of multi-head self-attention under a boolean mask (see
:mod:`seqpack.training.attention`) and a two-layer MLP, a final RMS norm and an untied LM
head. Weights come from a seeded generator, so two models built with the same seed are
identical; ``dtype=torch.float64`` makes packed/unpacked comparisons exact to rounding.

The forward takes one row (``tokens [T]``, ``mask [T, Tk]``) or a stack of rows (``tokens [B, T]``,
``mask [B, T, Tk]``); the rows of a stack never see each other, so a padded stack computes every
row as if it ran alone. The smoke test's batched equivalence
(:mod:`seqpack.training.equivalence`) reads the model through two methods:
:meth:`TinyGPT.token_outputs` (every per-token output, by name) and :meth:`TinyGPT.token_losses`
(every per-token loss, by name). A model option that adds an output or a loss (an MTP head, a
router's probabilities) adds it there, and the smoke test compares it packed against unpacked
without further code.

Vision-language options (composable flags of :class:`TinyGPTConfig`, code in their own modules):
``vision`` adds a vision stem whose merged visual tokens replace the embeddings at image-token
positions (:mod:`seqpack.training.vision`), ``mrope_section`` rotates by 3-D multimodal
position ids (:mod:`seqpack.training.mrope`). Both read per-token inputs, named by
:attr:`TinyGPT.token_inputs` and passed as ``inputs`` to the forward; :meth:`TinyGPT.batch_inputs`
builds them from a canonical VLM batch (patch rows, ``vision_index``, ``mrope_position_ids``).

For context parallelism the forward takes an optional ``kv_exchange`` callable: each rank
computes keys and values for its own tokens, the callable gathers them from the whole CP group
(:class:`seqpack.training.cp_exchange.KVExchange`), and the local queries attend to the
global keys under a mask built from the global positions of both.

Model options are composable flags of :class:`TinyGPTConfig`: ``moe`` replaces every MLP by a
mixture of experts (:mod:`seqpack.training.moe`; a :class:`~seqpack.training.moe.Routing`
passed to the forward carries the padding mask in and the router statistics out), and ``mtp``
adds multi-token-prediction depths (:mod:`seqpack.training.mtp`; :meth:`TinyGPT.mtp_logits`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from seqpack.core.arguments import positive_int
from seqpack.core.errors import UsageError
from seqpack.training.attention import masked_attention
from seqpack.training.moe import MoEConfig, MoEMLP, Routing
from seqpack.training.mrope import TOKEN_INPUT as MROPE_INPUT
from seqpack.training.mrope import check_section, mrope_tables, token_positions
from seqpack.training.mtp import MTPConfig, MTPHead
from seqpack.training.rope import apply_rope, rope_tables, rotate
from seqpack.training.vision import TOKEN_INPUTS as VISION_INPUTS
from seqpack.training.vision import (
    VisionInputs,
    VisionStem,
    VisionStemConfig,
    place_visual_tokens,
    token_windows,
    vision_inputs,
)

if TYPE_CHECKING:
    from seqpack.training.equivalence import TokenLoss, TokenRows

__all__ = ["TinyGPT", "TinyGPTConfig"]

KVExchangeFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class TinyGPTConfig:
    """Sizes and options of :class:`TinyGPT`. ``hidden_size`` must divide by ``num_heads`` into an even head size.

    ``vision``: a vision stem (None: text only); ``mrope_section``: M-RoPE frequency split
    (temporal, height, width) summing to head_size / 2 (None: 1-D RoPE). ``moe`` (a
    :class:`MoEConfig` or its dict) turns every MLP into a mixture of experts; ``mtp`` (a
    :class:`MTPConfig` or its dict) adds MTP depths. All default to off (a dense text model). The MTP
    depths of a VLM read the language embedding of the rolled token ids (an image token's placeholder
    embedding, as Megatron-Core's MTP layer embeds ``input_ids``) and rotate by the rolled 1-D
    positions on all three M-RoPE axes.
    """

    vocab_size: int = 64
    hidden_size: int = 32
    num_heads: int = 4
    num_layers: int = 2
    ffn_hidden_size: int = 64
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    init_std: float = 0.2
    vision: VisionStemConfig | None = None
    mrope_section: tuple[int, int, int] | None = None
    moe: MoEConfig | None = None
    mtp: MTPConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.vision, dict):  # from to_dict() (a CP job file)
            object.__setattr__(self, "vision", VisionStemConfig(**self.vision))
        if self.mrope_section is not None:
            object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
        for name, kind in (("moe", MoEConfig), ("mtp", MTPConfig)):
            value = getattr(self, name)
            if value is True or isinstance(value, dict):  # a flag, or the option's fields
                object.__setattr__(self, name, kind(**({} if value is True else value)))
            elif value is False:
                object.__setattr__(self, name, None)
            elif value is not None and not isinstance(value, kind):
                raise UsageError(f"{name} must be true/false, a mapping of its fields or a {kind.__name__}, "
                                 f"got {value!r}", field=name)
        for name in ("vocab_size", "hidden_size", "num_heads", "num_layers", "ffn_hidden_size"):
            positive_int(name, getattr(self, name))
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise UsageError(
                f"hidden_size {self.hidden_size} / num_heads {self.num_heads} must be an even integer (RoPE pairs)",
                field="hidden_size",
            )
        if self.mrope_section is not None:
            check_section(self.mrope_section, self.hidden_size // self.num_heads)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class _Block(nn.Module):
    def __init__(self, cfg: TinyGPTConfig, draw: Callable[..., nn.Parameter]) -> None:
        super().__init__()
        h, f = cfg.hidden_size, cfg.ffn_hidden_size
        self.cfg = cfg
        self.attn_norm = draw(h, around_one=True)
        self.qkv = draw(h, 3 * h)
        self.proj = draw(h, h)
        self.mlp_norm = draw(h, around_one=True)
        if cfg.moe is None:
            self.fc1 = draw(h, f)
            self.fc2 = draw(f, h)
        else:
            self.moe = MoEMLP(cfg.moe, h, draw)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        kv_exchange: KVExchangeFn | None = None,
        routing: Routing | None = None,
        one_row: bool = False,
    ) -> torch.Tensor:
        cfg = self.cfg
        b, t = x.shape[:2]
        heads, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        qkv = (_rms_norm(x, self.attn_norm, cfg.norm_eps) @ self.qkv).reshape(b, t, 3 * heads, d)
        q, k = rotate(qkv[:, :, : 2 * heads], rope).split(heads, dim=2)  # queries and keys in one rotation
        v = qkv[:, :, 2 * heads :]
        if kv_exchange is not None:  # one row (checked by TinyGPT.trunk)
            k, v = (part[None] for part in kv_exchange(k[0], v[0]))
        x = x + masked_attention(q, k, v, mask).reshape(b, t, cfg.hidden_size) @ self.proj
        normed = _rms_norm(x, self.mlp_norm, cfg.norm_eps)
        if cfg.moe is not None:  # each row of a stack is its own micro-batch; one row keeps [T, H] statistics
            return x + (self.moe(normed[0], routing)[None] if one_row else self.moe(normed, routing))
        return x + torch.nn.functional.gelu(normed @ self.fc1) @ self.fc2


class TinyGPT(nn.Module):
    """Reference decoder: ``forward(tokens [T], position_ids [T], mask [T, Tk]) -> logits [T, V]``
    (or ``[B, T]``, ``[B, T]``, ``[B, T, Tk]`` -> ``[B, T, V]`` for a stack of independent rows)."""

    def __init__(self, config: TinyGPTConfig | None = None, *, seed: int, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        cfg = config or TinyGPTConfig()
        if not dtype.is_floating_point:
            raise UsageError(f"dtype must be a floating point dtype, got {dtype}", field="dtype")
        self.config = cfg
        gen = torch.Generator().manual_seed(int(seed))

        def draw(*shape: int, around_one: bool = False) -> nn.Parameter:
            noise = torch.randn(*shape, generator=gen, dtype=torch.float64)
            value = 1.0 + 0.1 * noise if around_one else cfg.init_std * noise
            return nn.Parameter(value.to(dtype))

        self.embedding = draw(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(_Block(cfg, draw) for _ in range(cfg.num_layers))
        self.final_norm = draw(cfg.hidden_size, around_one=True)
        self.lm_head = draw(cfg.hidden_size, cfg.vocab_size)
        self.vision: VisionStem | None = None
        if cfg.vision is not None:  # its own generator: the language model's weights do not depend on the option
            vision_gen = torch.Generator().manual_seed(int(seed) + 1)

            def draw_vision(*shape: int) -> nn.Parameter:
                return nn.Parameter((cfg.init_std * torch.randn(*shape, generator=vision_gen,
                                                                dtype=torch.float64)).to(dtype))

            self.vision = VisionStem(cfg.vision, cfg.hidden_size, draw_vision)
        if cfg.mtp is not None:
            self.mtp = MTPHead(cfg.mtp, cfg.hidden_size, cfg.norm_eps, draw, lambda: _Block(cfg, draw))

    def forward(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
        routing: Routing | None = None,
    ) -> torch.Tensor:
        """Logits for ``tokens`` ``[T]`` (``mask`` ``[T, T_keys]``, ``T_keys`` = gathered length under CP)
        or for a stack of rows ``[B, T]`` (``mask`` ``[B, T, T]``; no ``kv_exchange``).

        ``inputs``: per-token inputs named by :attr:`token_inputs`, each ``tokens.shape + [...]``
        (:meth:`batch_inputs`); one left out counts as text (no images; M-RoPE ids equal to
        ``position_ids`` on all three axes). ``routing``: the MoE padding mask in, router statistics out."""
        return self.head(self.trunk(tokens, position_ids, mask, kv_exchange=kv_exchange, inputs=inputs,
                                    routing=routing))

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the trunk's last hidden state."""
        return _rms_norm(hidden, self.final_norm, self.config.norm_eps) @ self.lm_head

    def rope(self, position_ids: torch.Tensor, dtype: torch.dtype,
             mrope_axes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary tables of ``position_ids`` for this model's head size (:func:`rope_tables`); with
        M-RoPE, of ``mrope_axes`` ``[..., T, 3]`` (default: ``position_ids`` on all three axes, as text)."""
        cfg = self.config
        head_dim = cfg.hidden_size // cfg.num_heads
        if cfg.mrope_section is None:
            return rope_tables(position_ids, head_dim, cfg.rope_base, dtype)
        axes = position_ids[..., None].expand(*position_ids.shape, 3) if mrope_axes is None else mrope_axes
        return mrope_tables(axes.movedim(-1, 0), head_dim, cfg.rope_base, cfg.mrope_section, dtype)

    def mtp_logits(
        self,
        hidden: torch.Tensor,
        streams: dict[str, torch.Tensor],
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        routing: Routing | None = None,
    ) -> list[torch.Tensor]:
        """Logits of every MTP depth from the trunk's ``hidden`` (``[T, H]`` or ``[B, T, H]``) and the rolled
        ``streams`` (``[1, T, D]`` or ``[B, T, D]``, :mod:`seqpack.training.mtp`)."""
        if self.config.mtp is None:
            raise UsageError("this model has no MTP head (TinyGPTConfig.mtp is None)", field="mtp")
        one_row = hidden.dim() == 2
        if one_row:
            hidden, mask = hidden[None], mask[None]
        logits = self.mtp(hidden, streams, self.embedding, self.lm_head, mask, self.rope,
                          {"kv_exchange": kv_exchange, "routing": routing, "one_row": one_row})
        return [depth[0] for depth in logits] if one_row else logits

    def trunk(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        inputs: Mapping[str, torch.Tensor] | None = None,
        routing: Routing | None = None,
    ) -> torch.Tensor:
        """Hidden state ``[T, H]`` (or ``[B, T, H]`` for a stack) after the last block (before the final norm)."""
        if tokens.dim() not in (1, 2) or position_ids.shape != tokens.shape:
            raise UsageError(
                f"tokens and position_ids must be [T] or [B, T] of equal shape, got {list(tokens.shape)} "
                f"and {list(position_ids.shape)}"
            )
        one_row = tokens.dim() == 1
        if mask.dim() != tokens.dim() + 1 or mask.shape[:-1] != tokens.shape:
            raise UsageError(f"mask must be [{'T' if one_row else 'B, T'}, T_keys] for tokens {list(tokens.shape)}, "
                             f"got {list(mask.shape)}")
        if kv_exchange is not None and not one_row:
            raise UsageError("kv_exchange (context parallelism) takes one row: tokens [T]")
        vocab = self.config.vocab_size
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
            raise UsageError(f"token ids must lie in [0, {vocab}), got [{int(tokens.min())}, {int(tokens.max())}]")
        extra = self._checked_inputs(tokens, inputs)
        if one_row:
            tokens, position_ids, mask = tokens[None], position_ids[None], mask[None]
            extra = {k: v[None] for k, v in extra.items()}
        x = self.embedding[tokens]
        if self.vision is not None and VISION_INPUTS[0] in extra:
            x = place_visual_tokens(x, *(extra[k] for k in VISION_INPUTS), self.vision)
        rope = self.rope(position_ids, x.dtype, extra.get(MROPE_INPUT))
        for layer in self.layers:
            x = layer(x, rope, mask, kv_exchange, routing, one_row)
        return x[0] if one_row else x

    def _checked_inputs(self, tokens: torch.Tensor, inputs: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        extra = dict(inputs or {})
        known = self.token_inputs
        for name, value in extra.items():
            if name not in known:
                raise UsageError(f"the model reads no token input {name!r} (its token_inputs: {list(known) or 'none'}; "
                                 "images need TinyGPTConfig.vision, M-RoPE ids mrope_section)", field=name)
            if tuple(value.shape[: tokens.dim()]) != tuple(tokens.shape):
                raise UsageError(f"token input {name!r} has shape {list(value.shape)} for tokens {list(tokens.shape)}",
                                 field=name)
        if (VISION_INPUTS[0] in extra) != (VISION_INPUTS[1] in extra):
            raise UsageError(f"the token inputs {' and '.join(VISION_INPUTS)} go together", field=VISION_INPUTS[0])
        return extra

    @property
    def token_inputs(self) -> tuple[str, ...]:
        """Per-token batch keys the model reads besides tokens and positions: the vision stem's
        ``visual_patches`` and ``visual_token`` (:data:`seqpack.training.vision.TOKEN_INPUTS`),
        M-RoPE's ``mrope_positions`` (:data:`seqpack.training.mrope.TOKEN_INPUT`); none for
        the text model. The smoke test carries them from the batches and samples
        (:meth:`batch_inputs`) into :attr:`TokenRows.extras`."""
        return (VISION_INPUTS if self.vision is not None else ()) + (
            (MROPE_INPUT,) if self.config.mrope_section is not None else ())

    def batch_inputs(self, batch: Mapping[str, Any], *, whole_row: bool = True) -> dict[str, torch.Tensor]:
        """Every :attr:`token_inputs` of a canonical batch, in its layout ``[1, T, ...]``: a VLM batch's
        patch rows and ``vision_index`` as per-token merge windows
        (:func:`~seqpack.training.vision.token_windows`), its ``mrope_position_ids`` axes last;
        a text batch gives text values. ``whole_row`` is False for a CP rank's slice of a row."""
        vision = vision_inputs(batch)
        if vision is not None and self.vision is None:
            raise UsageError("the batch carries images but the model has no vision stem (TinyGPTConfig.vision)")
        out: dict[str, torch.Tensor] = {}
        if self.vision is not None:
            if vision is None:
                empty = torch.zeros((0, self.vision.cfg.patch_dim))
                vision = VisionInputs(empty, empty, torch.full(batch["tokens"].shape[1:], -1, dtype=torch.int64))
            windows, named = token_windows(vision, self.vision.cfg, whole_row=whole_row)
            out.update(zip(VISION_INPUTS, (windows[None], named[None])))
        if self.config.mrope_section is not None:
            out[MROPE_INPUT] = token_positions(batch)
        return out

    def token_routing(self, rows: TokenRows, *, count_padding: bool = False) -> Routing:
        """The :class:`Routing` of a stack of rows, each row its own micro-batch: every position of a row
        outside its sequences (alignment gaps, width padding) is padding, and the stack's right padding
        lies outside every micro-batch. ``count_padding``: the negative control (the router counts the
        rows' padding like real tokens)."""
        outside = torch.arange(rows.tokens.shape[1]) >= rows.lengths[:, None]
        return Routing(padding_mask=rows.segments < 0, count_padding=count_padding, outside=outside)

    def token_outputs(self, rows: TokenRows, routing: Routing | None = None) -> dict[str, torch.Tensor]:
        """Every per-token output ``[B, T, ...]`` of a stack of rows, by name: ``logits``, and with MTP
        ``mtp_logits_1 .. mtp_logits_D`` (inputs rolled inside each sequence, :meth:`token_streams`).

        The smoke test compares each output at every real token, packed against unpacked, and
        checks that perturbing one sequence leaves the others' outputs unchanged. A model option
        that adds an output adds it here. MoE layers route each row as its own micro-batch
        (``routing``: default :meth:`token_routing`; pass one to collect the router statistics).
        """
        cfg = self.config
        if routing is None and cfg.moe is not None:
            routing = self.token_routing(rows)
        hidden = self.trunk(rows.tokens, rows.position_ids, rows.attention, inputs=rows.extras, routing=routing)
        out = {"logits": self.head(hidden)}
        if cfg.mtp is not None:
            streams = self.token_streams(rows)
            for k, logits in enumerate(self.mtp_logits(hidden, streams, rows.attention, routing=routing), 1):
                out[f"mtp_logits_{k}"] = logits
        return out

    #: How :meth:`token_streams` rolls MTP inputs and targets: ``"sequence"`` (inside each sequence),
    #: ``"row"`` (over each whole row, across boundaries: the smoke test's ``mtp_cross_boundary`` control;
    #: a row holding one sequence rolls the same either way) or ``"given"`` (by the rows' ``mtp_source`` maps,
    #: e.g. Megatron-Core's own roll, :func:`~seqpack.training.mtp.upstream_roll_source`; rows without one
    #: roll inside their sequences).
    mtp_roll: str = "sequence"

    def token_streams(self, rows: TokenRows) -> dict[str, torch.Tensor]:
        """The MTP streams ``[B, T, D]`` of a stack of rows (:func:`~seqpack.training.mtp.stack_streams`)."""
        from seqpack.training.mtp import stack_streams

        if self.mtp_roll not in ("sequence", "row", "given"):
            raise UsageError(f"mtp_roll must be 'sequence', 'row' or 'given', got {self.mtp_roll!r}", field="mtp_roll")
        segments = rows.segments
        if self.mtp_roll == "row":
            inside = torch.arange(segments.shape[1]) < rows.lengths[:, None]
            segments = torch.where(inside, torch.zeros_like(segments), torch.full_like(segments, -1))
        values = {"mtp_tokens": rows.tokens, "mtp_position_ids": rows.position_ids, "mtp_labels": rows.labels,
                  "mtp_loss_mask": rows.loss_mask}
        source = rows.mtp_source if self.mtp_roll == "given" else None
        return stack_streams(values, segments, self.config.mtp.num_layers if self.config.mtp else 0, source)

    def token_losses(self, rows: TokenRows, outputs: dict[str, torch.Tensor]) -> dict[str, TokenLoss]:
        """Every per-token loss of a stack of rows, by name: ``lm``, the next-token cross-entropy, and with
        MTP ``mtp_1 .. mtp_D``, each depth's cross-entropy against the rolled labels under the rolled
        loss mask (the sums ``process_mtp_loss`` scales).

        A loss is a :class:`~seqpack.training.equivalence.TokenLoss`: values ``[B, T]`` and the
        weight of each position (the loss mask). The smoke test compares the per-sequence sums of
        every loss, packed against unpacked, and the gradients of their weighted sum. A model
        option that adds a loss (an MTP head's, an auxiliary loss) adds it here.
        """
        from seqpack.training.equivalence import TokenLoss
        from seqpack.training.loss import token_cross_entropy

        mask = rows.loss_mask
        out = {"lm": TokenLoss(token_cross_entropy(outputs["logits"], rows.labels, mask), mask)}
        if self.config.mtp is not None:
            streams = self.token_streams(rows)
            for k in range(self.config.mtp.num_layers):
                k_mask = streams["mtp_loss_mask"][..., k]
                losses = token_cross_entropy(outputs[f"mtp_logits_{k + 1}"], streams["mtp_labels"][..., k], k_mask)
                out[f"mtp_{k + 1}"] = TokenLoss(losses, k_mask)
        return out

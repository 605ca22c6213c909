"""A tiny reference GPT in plain torch, for checking packed batches numerically.

Token embeddings, rotary position embeddings driven by ``position_ids`` (so they restart with
every packed sequence), pre-norm blocks of multi-head self-attention under a boolean mask (see
:mod:`reference_impl.training.attention`) and a two-layer MLP, a final RMS norm and an untied LM
head. Weights come from a seeded generator, so two models built with the same seed are
identical; ``dtype=torch.float64`` makes packed/unpacked comparisons exact to rounding.

Vision-language options (composable flags of :class:`TinyGPTConfig`, code in their own modules):
``vision`` adds a vision stem whose merged visual tokens replace the embeddings at image-token
positions (:mod:`reference_impl.training.vision`), ``mrope_section`` rotates by 3-D multimodal
position ids (:mod:`reference_impl.training.mrope`).

For context parallelism the forward takes an optional ``kv_exchange`` callable: each rank
computes keys and values for its own tokens, the callable gathers them from the whole CP group
(:class:`reference_impl.training.cp_exchange.KVExchange`), and the local queries attend to the
global keys under a mask built from the global positions of both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from reference_impl.arguments import positive_int
from reference_impl.errors import UsageError
from reference_impl.training.attention import masked_attention
from reference_impl.training.mrope import apply_mrope, check_section
from reference_impl.training.vision import VisionInputs, VisionStem, VisionStemConfig, embed_with_vision

__all__ = ["TinyGPT", "TinyGPTConfig", "apply_rope"]

KVExchangeFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class TinyGPTConfig:
    """Sizes of :class:`TinyGPT`. ``hidden_size`` must divide by ``num_heads`` into an even head size.

    ``vision``: a vision stem (None: text only); ``mrope_section``: M-RoPE frequency split
    (temporal, height, width) summing to head_size / 2 (None: 1-D RoPE).
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

    def __post_init__(self) -> None:
        if isinstance(self.vision, dict):  # from to_dict() (a CP job file)
            object.__setattr__(self, "vision", VisionStemConfig(**self.vision))
        if self.mrope_section is not None:
            object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
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


def apply_rope(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate ``x`` ``[T, heads, d]`` by the angles of ``position_ids`` ``[T]`` (rotate-half convention)."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(half, dtype=x.dtype, device=x.device) / half)
    angles = position_ids.to(x.dtype)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def _rotate(x: torch.Tensor, position_ids: torch.Tensor, cfg: TinyGPTConfig) -> torch.Tensor:
    if cfg.mrope_section is not None:
        return apply_mrope(x, position_ids, cfg.rope_base, cfg.mrope_section)
    return apply_rope(x, position_ids, cfg.rope_base)


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
        self.fc1 = draw(h, f)
        self.fc2 = draw(f, h)

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, kv_exchange: KVExchangeFn | None
    ) -> torch.Tensor:
        cfg = self.cfg
        t = x.shape[0]
        heads, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        q, k, v = (_rms_norm(x, self.attn_norm, cfg.norm_eps) @ self.qkv).split(cfg.hidden_size, dim=-1)
        q = _rotate(q.reshape(t, heads, d), position_ids, cfg)
        k = _rotate(k.reshape(t, heads, d), position_ids, cfg)
        v = v.reshape(t, heads, d)
        if kv_exchange is not None:
            k, v = kv_exchange(k, v)
        x = x + masked_attention(q, k, v, mask).reshape(t, cfg.hidden_size) @ self.proj
        hidden = torch.nn.functional.gelu(_rms_norm(x, self.mlp_norm, cfg.norm_eps) @ self.fc1)
        return x + hidden @ self.fc2


class TinyGPT(nn.Module):
    """Reference decoder: ``forward(tokens [T], position_ids [T] (or [3, T] with M-RoPE), mask [T, Tk]) -> logits [T, V]``."""

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

    def forward(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        vision: VisionInputs | None = None,
        whole_row: bool = True,
    ) -> torch.Tensor:
        """Logits for 1-D ``tokens``; ``mask`` is ``[T, T_keys]`` (``T_keys`` = gathered length under CP).

        With M-RoPE, ``position_ids`` is ``[3, T]`` (a ``[T]`` tensor counts as text on all axes);
        ``vision`` places visual tokens (needs the vision stem); ``whole_row`` is False for a CP
        rank's slice (:func:`~reference_impl.training.vision.embed_with_vision`).
        """
        if self.config.mrope_section is not None and position_ids.dim() == 1:
            position_ids = position_ids.expand(3, -1)
        want = tokens.shape if self.config.mrope_section is None else (3, *tokens.shape)
        if tokens.dim() != 1 or position_ids.shape != want:
            raise UsageError(
                f"tokens must be 1-D and position_ids {'[3, T]' if len(want) == 2 else 'of the same length'}, "
                f"got {list(tokens.shape)} and {list(position_ids.shape)}"
            )
        vocab = self.config.vocab_size
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
            raise UsageError(f"token ids must lie in [0, {vocab}), got [{int(tokens.min())}, {int(tokens.max())}]")
        x = self.embedding[tokens]
        if vision is not None:
            if self.vision is None:
                raise UsageError("the batch carries images but the model has no vision stem (TinyGPTConfig.vision)")
            x = embed_with_vision(x, vision, self.vision, whole_row=whole_row)
        for layer in self.layers:
            x = layer(x, position_ids, mask, kv_exchange)
        return _rms_norm(x, self.final_norm, self.config.norm_eps) @ self.lm_head

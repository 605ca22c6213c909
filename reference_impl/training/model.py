"""A tiny reference GPT in plain torch, for checking packed batches numerically.

Token embeddings, rotary position embeddings driven by ``position_ids`` (so they restart with
every packed sequence), pre-norm blocks of multi-head self-attention under a boolean mask (see
:mod:`reference_impl.training.attention`) and a two-layer MLP, a final RMS norm and an untied LM
head. Weights come from a seeded generator, so two models built with the same seed are
identical; ``dtype=torch.float64`` makes packed/unpacked comparisons exact to rounding.

For context parallelism the forward takes an optional ``kv_exchange`` callable: each rank
computes keys and values for its own tokens, the callable gathers them from the whole CP group
(:class:`reference_impl.training.cp_exchange.KVExchange`), and the local queries attend to the
global keys under a mask built from the global positions of both.

Model options are composable flags of :class:`TinyGPTConfig`: ``moe`` replaces every MLP by a
mixture of experts (:mod:`reference_impl.training.moe`; a :class:`~reference_impl.training.moe.Routing`
passed to the forward carries the padding mask in and the router statistics out), and ``mtp``
adds multi-token-prediction depths (:mod:`reference_impl.training.mtp`; :meth:`TinyGPT.mtp_logits`).
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
from reference_impl.training.moe import MoEConfig, MoEMLP, Routing
from reference_impl.training.mtp import MTPConfig, MTPHead

__all__ = ["TinyGPT", "TinyGPTConfig", "apply_rope"]

KVExchangeFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class TinyGPTConfig:
    """Sizes and options of :class:`TinyGPT`. ``hidden_size`` must divide by ``num_heads`` into an even head size.

    ``moe`` (a :class:`MoEConfig` or its dict) turns every MLP into a mixture of experts; ``mtp``
    (a :class:`MTPConfig` or its dict) adds MTP depths. Both default to off (a dense model).
    """

    vocab_size: int = 64
    hidden_size: int = 32
    num_heads: int = 4
    num_layers: int = 2
    ffn_hidden_size: int = 64
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    init_std: float = 0.2
    moe: MoEConfig | None = None
    mtp: MTPConfig | None = None

    def __post_init__(self) -> None:
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
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        kv_exchange: KVExchangeFn | None = None,
        routing: Routing | None = None,
    ) -> torch.Tensor:
        cfg = self.cfg
        t = x.shape[0]
        heads, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        q, k, v = (_rms_norm(x, self.attn_norm, cfg.norm_eps) @ self.qkv).split(cfg.hidden_size, dim=-1)
        q = apply_rope(q.reshape(t, heads, d), position_ids, cfg.rope_base)
        k = apply_rope(k.reshape(t, heads, d), position_ids, cfg.rope_base)
        v = v.reshape(t, heads, d)
        if kv_exchange is not None:
            k, v = kv_exchange(k, v)
        x = x + masked_attention(q, k, v, mask).reshape(t, cfg.hidden_size) @ self.proj
        normed = _rms_norm(x, self.mlp_norm, cfg.norm_eps)
        if cfg.moe is not None:
            return x + self.moe(normed, routing)
        return x + torch.nn.functional.gelu(normed @ self.fc1) @ self.fc2


class TinyGPT(nn.Module):
    """Reference decoder: ``forward(tokens [T], position_ids [T], mask [T, Tk]) -> logits [T, V]``."""

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
        if cfg.mtp is not None:
            self.mtp = MTPHead(cfg.mtp, cfg.hidden_size, cfg.norm_eps, draw, lambda: _Block(cfg, draw))

    def forward(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        routing: Routing | None = None,
    ) -> torch.Tensor:
        """Logits for 1-D ``tokens``; ``mask`` is ``[T, T_keys]`` (``T_keys`` = gathered length under CP)."""
        return self.head(self.trunk(tokens, position_ids, mask, kv_exchange=kv_exchange, routing=routing))

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the trunk's last hidden state."""
        return _rms_norm(hidden, self.final_norm, self.config.norm_eps) @ self.lm_head

    def mtp_logits(
        self,
        hidden: torch.Tensor,
        streams: dict[str, torch.Tensor],
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        routing: Routing | None = None,
    ) -> list[torch.Tensor]:
        """Logits of every MTP depth from the trunk's ``hidden`` and the rolled ``streams`` (``training.mtp``)."""
        if self.config.mtp is None:
            raise UsageError("this model has no MTP head (TinyGPTConfig.mtp is None)", field="mtp")
        return self.mtp(hidden, streams, self.embedding, self.lm_head, mask,
                        {"kv_exchange": kv_exchange, "routing": routing})

    def trunk(
        self,
        tokens: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        *,
        kv_exchange: KVExchangeFn | None = None,
        routing: Routing | None = None,
    ) -> torch.Tensor:
        """Hidden state ``[T, H]`` after the last block (before the final norm)."""
        if tokens.dim() != 1 or position_ids.shape != tokens.shape:
            raise UsageError(
                f"tokens and position_ids must be 1-D of equal length, got {list(tokens.shape)} "
                f"and {list(position_ids.shape)}"
            )
        vocab = self.config.vocab_size
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
            raise UsageError(f"token ids must lie in [0, {vocab}), got [{int(tokens.min())}, {int(tokens.max())}]")
        x = self.embedding[tokens]
        for layer in self.layers:
            x = layer(x, position_ids, mask, kv_exchange, routing)
        return x

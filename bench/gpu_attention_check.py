#!/usr/bin/env python
"""GPU check without Transformer Engine: seqpack's THD batches through PyTorch's own attention kernels (bf16).

Usage (repository root)::

    python bench/gpu_attention_check.py [--json bench/results/gpu_attention_check.json] [--seed 0]
                                        [--device auto|cuda|cpu] [--quick]

Needs only PyTorch (FlexAttention; ``torch.nn.attention.varlen.varlen_attn`` when the installed torch has it)
and seqpack. Without a CUDA device (``--device auto``) it prints ``skipped: no CUDA device``, writes
``{"skipped": true, ...}`` and exits 0. ``--device cpu --quick`` runs every check that works on a CPU (the
dense and FlexAttention forward paths; FlexAttention has no CPU backward, varlen no CPU kernel: those are
reported as skipped) on small shapes; the test-suite runs that.

Batches come from seqpack's own builder (``seqpack.packing.thd.build_thd_batch``) over lengths drawn from a
realistic mix (``seqpack.data.length_mixes``, bimodal) and packed by seqpack's best-fit-decreasing planner.
A small pre-norm transformer with rotary positions (read from the batch's ``position_ids``) runs them with
one of these attention backends:

* ``flex``: FlexAttention with a document mask from the batch's boundaries (compiled on CUDA);
* ``varlen``: ``varlen_attn`` over the physical boundaries, causal (its signature is probed: ``is_causal``
  or ``window_size=(-1, 0)``);
* ``dense``: SDPA under the same document mask as a boolean ``[T, T]`` matrix;
* ``causal_row`` (negative control): SDPA causal over the whole packed row, boundaries ignored;
* ``sdpa_padded`` (throughput baseline): the same sequences right-padded to the longest one, causal SDPA
  with a key padding mask; ``unpacked``: each sequence alone (the correctness oracle).

Checks, each passed / failed / skipped (with the reason), on the layouts ``aligned`` (per-sequence padding
to 8, fixed width), ``tail_only`` (every sequence aligned, padding only at the row's end) and ``folded``
(``fold_alignment_padding``), and with head dimension 64 and 256:

1. ``packed_equals_unpacked``: per-sequence mean losses within ``LOSS_TOL`` and the parameter gradient of a
   random weighted sum of them with cosine >= ``GRAD_COS`` and relative error <= ``GRAD_REL`` against the
   sequences run alone (bf16 on CUDA, float32 on CPU);
2. ``no_cross_sequence_leak``: changing the tokens of the first sequence leaves every other sequence's
   logits bit-identical, and changes its own;
3. the negative control ``causal_row`` must fail both;
4. ``throughput``: real tokens per second (forward and backward, median of timed steps after warm-up) of the
   packed layout (flex, varlen) against the padded one, at widths 4096 and 8192, with the padding share of
   each layout.

Writes the JSON (device, versions, checks, throughput) and prints a table; exit status 1 when a check fails.
One process; on one H100 the whole run is a few minutes (the compile of FlexAttention included).
"""

from __future__ import annotations

import argparse
import inspect
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "reference_impl") not in sys.path:
    sys.path.insert(0, str(ROOT / "reference_impl"))

LOSS_TOL = {"bf16": 2e-2, "fp32": 1e-4}  # absolute, per-sequence mean loss
GRAD_COS = {"bf16": 0.999, "fp32": 0.999999}
GRAD_REL = {"bf16": 5e-2, "fp32": 1e-4}
MULTIPLE = 8


# ------------------------------------------------------------------------------------------------
# masks from a canonical THD batch


def documents(batch: dict) -> tuple[Any, Any]:
    """Per position: the physical sequence it belongs to (int64 ``[T]``) and whether it is a real token."""
    import torch

    bounds = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).to(torch.int64)
    width = int(batch["tokens"].shape[1])
    lengths = torch.diff(bounds)
    doc = torch.repeat_interleave(torch.arange(lengths.numel(), device=bounds.device), lengths)
    if doc.numel() < width:  # a tail past the last boundary is a document of its own
        doc = torch.cat([doc, torch.full((width - doc.numel(),), lengths.numel(), device=bounds.device)])
    return doc, ~batch["padding_mask"][0].to(bounds.device)


def document_mask_mod(doc: Any, real: Any) -> Callable:
    """FlexAttention ``mask_mod``: a real query sees the real keys of its document at or before it; a padding
    position sees itself only (its row stays finite), as seqpack's reference attention
    (``seqpack.training.attention``, mode ``thd``) does."""

    def mask_mod(b, h, q, kv):  # noqa: ANN001 - FlexAttention's index tensors
        return ((doc[q] == doc[kv]) & (kv <= q) & real[kv] & real[q]) | (q == kv)

    return mask_mod


def dense_document_mask(doc: Any, real: Any) -> Any:
    """The same mask as a boolean ``[T, T]`` matrix."""
    import torch

    t = doc.numel()
    q = torch.arange(t, device=doc.device)[:, None]
    kv = torch.arange(t, device=doc.device)[None, :]
    return ((doc[:, None] == doc[None, :]) & (kv <= q) & real[None, :] & real[:, None]) | (q == kv)


def varlen_causal_kwargs(fn: Callable) -> dict[str, Any]:
    """The causal switch ``varlen_attn`` takes in this torch: ``is_causal=True`` (2.10) or ``window_size=(-1, 0)``
    (later); KeyError when it has neither."""
    params = inspect.signature(fn).parameters
    if "is_causal" in params:
        return {"is_causal": True}
    if "window_size" in params:
        return {"window_size": (-1, 0)}
    raise KeyError("varlen_attn takes neither is_causal nor window_size")


# ------------------------------------------------------------------------------------------------
# the model


class Context:
    """What an attention backend needs for one batch (built once per batch and backend)."""

    def __init__(self, backend: str, batch: dict, device: Any, compiled: bool) -> None:
        import torch

        self.backend = backend
        self.batch = batch
        doc, real = documents(batch)
        self.doc, self.real = doc.to(device), real.to(device)
        self.fn: Any = None
        if backend == "flex":
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            t = self.doc.numel()
            self.block_mask = create_block_mask(document_mask_mod(self.doc, self.real), None, None, t, t,
                                                device=str(device))
            self.fn = torch.compile(flex_attention) if compiled else flex_attention
        elif backend == "dense":
            self.mask = dense_document_mask(self.doc, self.real)
        elif backend == "varlen":
            from torch.nn.attention.varlen import varlen_attn

            bounds = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).to(device=device, dtype=torch.int32)
            if int(bounds[-1]) < self.doc.numel():
                bounds = torch.cat([bounds, torch.tensor([self.doc.numel()], device=device, dtype=torch.int32)])
            self.fn, self.cu = varlen_attn, bounds
            self.max_len = int(torch.diff(bounds).max())
            self.kwargs = varlen_causal_kwargs(varlen_attn)

    def attend(self, q: Any, k: Any, v: Any) -> Any:
        """``[1, H, T, D]`` queries, keys, values -> ``[1, H, T, D]``."""
        import torch.nn.functional as F

        if self.backend == "flex":
            return self.fn(q, k, v, block_mask=self.block_mask)
        if self.backend == "dense":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[None, None])
        if self.backend == "varlen":
            out = self.fn(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), self.cu, self.cu,
                          self.max_len, self.max_len, **self.kwargs)
            return out.transpose(0, 1)[None]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # causal_row, unpacked, per-row padded


def build_model(hidden: int, heads: int, layers: int, vocab: int, seed: int) -> Any:
    """A small pre-norm transformer with rotary positions taken from ``position_ids``."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.out = nn.Linear(hidden, hidden, bias=False)
            self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden, bias=False), nn.GELU(),
                                     nn.Linear(4 * hidden, hidden, bias=False))

        def forward(self, x, cos, sin, ctx, key_padding=None):  # noqa: ANN001
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if key_padding is None:
                a = ctx.attend(q, k, v)
            else:  # right-padded rows: causal and no padded key
                import torch.nn.functional as F

                causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
                mask = causal[None, None] & key_padding[:, None, None, :]
                mask = mask | torch.eye(t, dtype=torch.bool, device=x.device)[None, None]
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.out(a.transpose(1, 2).reshape(b, t, hidden))
            return x + self.mlp(self.norm2(x))

    def rotate(x, cos, sin):  # noqa: ANN001
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
            d = hidden // heads
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, d // 2).float() / (d // 2))),
                                 persistent=False)

        def forward(self, tokens, positions, ctx, key_padding=None):  # noqa: ANN001
            angles = positions.float()[..., None] * self.inv_freq  # [B, T, d/2]
            cos, sin = angles.cos()[:, None].to(self.head.weight.dtype), angles.sin()[:, None].to(self.head.weight.dtype)
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x, cos, sin, ctx, key_padding)
            return self.head(self.norm(x))

    torch.manual_seed(seed)
    return Model()


# ------------------------------------------------------------------------------------------------
# data


def sequences(lengths: list[int], vocab: int, seed: int) -> list[dict]:
    """Random sequences of the given lengths: tokens, next-token labels, the first quarter unsupervised."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(1, vocab, (n + 1,), generator=gen)
        mask = torch.ones(n)
        mask[: n // 4] = 0
        out.append({"tokens": ids[:-1], "labels": ids[1:], "loss_mask": mask})
    return out


def packed_batch(seqs: list[dict], layout: str, width: int | None = None) -> dict:
    """seqpack's canonical THD batch of ``seqs`` in the named layout."""
    from seqpack.packing.thd import build_thd_batch

    rows = [{k: s[k] for k in ("tokens", "labels", "loss_mask")} for s in seqs]
    content = sum(-(-len(s["tokens"]) // MULTIPLE) * MULTIPLE for s in seqs)
    width = width or content + 2 * MULTIPLE
    return build_thd_batch(rows, pad_seq_to_mult=MULTIPLE, max_length=width, pad_to_max_length=True,
                           slack="pad_sequence", label_pad_id=0, fold_alignment_padding=layout == "folded")


def layout_lengths(layout: str, seed: int, quick: bool) -> list[int]:
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 4 if quick else 6
    top = 40 if quick else 700
    lengths = rng.integers(5, top, n).tolist()
    if layout == "tail_only":
        lengths = [-(-x // MULTIPLE) * MULTIPLE for x in lengths]
    return lengths


# ------------------------------------------------------------------------------------------------
# checks


def _losses(logits: Any, labels: Any, mask: Any, segments: list[tuple[int, int]]) -> Any:
    """Per-sequence mean losses over supervised tokens (float32)."""
    import torch
    import torch.nn.functional as F

    flat = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    flat = flat * mask.reshape(-1).float()
    return torch.stack([flat[a:b].sum() / mask.reshape(-1)[a:b].float().sum().clamp(min=1) for a, b in segments])


def _grads(model: Any) -> Any:
    import torch

    return torch.cat([p.grad.detach().float().reshape(-1) for p in model.parameters() if p.grad is not None])


def run_packed(model: Any, batch: dict, backend: str, weights: Any, device: Any, compiled: bool) -> tuple[Any, Any, Any]:
    """Per-sequence losses, logits and the gradient of ``weights . losses`` for a packed batch."""
    ctx = Context(backend, batch, device, compiled)
    real_starts = batch.get("cu_seqlens_q_padded", batch["cu_seqlens_q"]).tolist()
    logical = batch["cu_seqlens_q"].tolist()
    n = len(weights)
    segments = [(real_starts[i], real_starts[i] + (logical[i + 1] - logical[i])) for i in range(n)]
    if batch.get("cu_seqlens_q_padded") is None:  # folded or unpadded: the real part comes from padding_mask
        real = (~batch["padding_mask"][0]).tolist()
        segments = [(a, a + sum(real[a:b])) for a, b in zip(real_starts[:n], real_starts[1 : n + 1])]
    model.zero_grad(set_to_none=True)
    tokens = batch["tokens"].to(device)
    logits = model(tokens, batch["position_ids"].to(device), ctx)
    losses = _losses(logits, batch["labels"].to(device), batch["loss_mask"].to(device), segments)
    (losses * weights).sum().backward()
    return losses.detach(), (logits.detach()[0], segments), _grads(model)


def run_unpacked(model: Any, seqs: list[dict], weights: Any, device: Any) -> tuple[Any, list, Any]:
    """Each sequence alone (positions from 0, causal SDPA); losses, logits and the summed weighted gradient."""
    import torch

    model.zero_grad(set_to_none=True)
    losses, logits = [], []
    ctx = Context("unpacked", {"cu_seqlens_q": torch.tensor([0, 1]), "tokens": torch.zeros(1, 1),
                               "padding_mask": torch.zeros(1, 1, dtype=torch.bool)}, "cpu", False)
    for w, s in zip(weights, seqs):
        n = len(s["tokens"])
        out = model(s["tokens"].to(device)[None], torch.arange(n, device=device)[None], ctx)
        loss = _losses(out, s["labels"].to(device)[None], s["loss_mask"].to(device)[None], [(0, n)])[0]
        (loss * w).backward()
        losses.append(loss.detach())
        logits.append(out.detach()[0])
    return torch.stack(losses), logits, _grads(model)


def equivalence(model: Any, seqs: list[dict], batch: dict, backend: str, device: Any, compiled: bool,
                precision: str, seed: int) -> dict:
    """Check 1 for one backend and layout: numbers and pass/fail."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    weights = (0.5 + torch.rand(len(seqs), generator=gen)).to(device)
    p_loss, (p_logits, segments), p_grad = run_packed(model, batch, backend, weights, device, compiled)
    u_loss, u_logits, u_grad = run_unpacked(model, seqs, weights, device)
    loss_diff = float((p_loss - u_loss).abs().max())
    cos = float(torch.nn.functional.cosine_similarity(p_grad, u_grad, dim=0))
    rel = float((p_grad - u_grad).norm() / u_grad.norm().clamp(min=1e-30))
    logit_diff = max(float((p_logits[a:b].float() - u.float()).abs().max()) for (a, b), u in zip(segments, u_logits))
    ok = loss_diff <= LOSS_TOL[precision] and cos >= GRAD_COS[precision] and rel <= GRAD_REL[precision]
    return {"status": "passed" if ok else "failed", "max_loss_diff": loss_diff, "grad_cosine": cos,
            "grad_rel_err": rel, "max_logit_diff": logit_diff}


def leak(model: Any, batch: dict, backend: str, device: Any, compiled: bool, vocab: int) -> dict:
    """Check 2: change the first sequence's tokens; every other real token's logits must stay bit-identical."""
    import torch

    ctx = Context(backend, batch, device, compiled)
    doc, real = ctx.doc, ctx.real
    tokens, positions = batch["tokens"].to(device), batch["position_ids"].to(device)
    with torch.no_grad():
        before = model(tokens, positions, ctx)[0]
        changed = tokens.clone()
        first = (doc == 0) & real
        changed[0, first] = (changed[0, first] + 7) % (vocab - 1) + 1
        after = model(changed, positions, ctx)[0]
    delta = (after.float() - before.float()).abs().amax(dim=-1)
    others = float(delta[(doc != 0) & real].max())
    own = float(delta[first].max())
    return {"status": "passed" if others == 0.0 and own > 0 else "failed", "max_other_change": others,
            "own_change": own}


def throughput(model: Any, backend: str, width: int, device: Any, compiled: bool, seed: int, steps: int,
               warmup: int) -> dict:
    """Real tokens per second (forward and backward) for packed rows of ``width`` or their padded twin."""
    import numpy as np
    import torch

    from seqpack.data.length_mixes import sample_lengths
    from seqpack.packing.algorithms import pack_lengths

    lengths = sample_lengths("bimodal", 4000, seed=seed, min_len=16, max_len=width - MULTIPLE)
    aligned = (-(-lengths // MULTIPLE) * MULTIPLE).tolist()
    packed = pack_lengths(aligned, width, "best_fit_decreasing")
    bins = [b for b in packed.bins][: steps + warmup]
    vocab = model.head.weight.shape[0]
    batches = []
    for k, b in enumerate(bins):
        seqs = sequences([int(lengths[i]) for i in b], vocab, seed + k)
        batches.append((seqs, packed_batch(seqs, "aligned", width)))
    real = [sum(len(s["tokens"]) for s in seqs) for seqs, _ in batches]
    times = []
    for k, (seqs, batch) in enumerate(batches):
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        if backend == "sdpa_padded":
            longest = max(len(s["tokens"]) for s in seqs)
            tokens = torch.zeros(len(seqs), longest, dtype=torch.int64, device=device)
            keep = torch.zeros(len(seqs), longest, dtype=torch.bool, device=device)
            for i, s in enumerate(seqs):
                tokens[i, : len(s["tokens"])] = s["tokens"].to(device)
                keep[i, : len(s["tokens"])] = True
            positions = torch.arange(longest, device=device)[None].expand(len(seqs), -1)
            out = model(tokens, positions, None, key_padding=keep)
            loss = out.float()[keep].logsumexp(-1).mean()
        else:
            ctx = Context(backend, batch, device, compiled)
            out = model(batch["tokens"].to(device), batch["position_ids"].to(device), ctx)
            loss = out.float()[0][ctx.real].logsumexp(-1).mean()
        loss.backward()
        sync()
        if k >= warmup:
            times.append(time.perf_counter() - start)
    timed = real[warmup:]
    padded_slots = [len(seqs) * max(len(s["tokens"]) for s in seqs) for seqs, _ in batches[warmup:]]
    share = (1 - sum(timed) / (len(timed) * width)) if backend != "sdpa_padded" else (1 - sum(timed) / sum(padded_slots))
    return {"backend": backend, "width": width, "steps": len(times),
            "tokens_per_s": float(np.median([r / t for r, t in zip(timed, times)])),
            "median_step_s": float(statistics.median(times)), "padding_share": float(share)}


# ------------------------------------------------------------------------------------------------
# the run


def _versions() -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def _skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def run(device_name: str, seed: int, quick: bool) -> dict:
    import torch

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    precision = "bf16" if cuda else "fp32"
    dtype = torch.bfloat16 if cuda else torch.float32
    compiled = cuda
    vocab = 512 if quick else 4096
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
                              "versions": _versions(), "precision": precision, "checks": [], "throughput": []}
    try:
        from torch.nn.attention.varlen import varlen_attn

        report["varlen_signature"] = str(inspect.signature(varlen_attn))
    except ImportError as exc:
        report["varlen_signature"] = None
        report["varlen_missing"] = str(exc)
    heads_dims = [(2, 16)] if quick else [(16, 64), (4, 256)]
    for heads, head_dim in heads_dims:
        hidden = heads * head_dim
        model = build_model(hidden, heads, 2 if quick else 4, vocab, seed).to(device=device, dtype=dtype)
        for layout in ("aligned", "tail_only", "folded"):
            seqs = sequences(layout_lengths(layout, seed, quick), vocab, seed + 1)
            batch = packed_batch(seqs, layout)
            for backend in ("dense", "flex", "varlen", "causal_row"):
                name = f"D{head_dim} {layout} {backend}"
                entry = {"name": name, "head_dim": head_dim, "layout": layout, "backend": backend}
                if backend == "varlen" and (not cuda or report["varlen_signature"] is None):
                    entry.update(_skipped("varlen_attn needs CUDA" if report["varlen_signature"] else
                                          "this torch has no varlen_attn"))
                    report["checks"].append(entry)
                    continue
                if backend == "flex" and not cuda:  # FlexAttention has no CPU backward
                    entry["equivalence"] = _skipped("FlexAttention has no backward on CPU")
                else:
                    entry["equivalence"] = _guarded(equivalence, model, seqs, batch, backend, device, compiled,
                                                    precision, seed)
                entry["leak"] = _guarded(leak, model, batch, backend, device, compiled, vocab)
                if backend == "causal_row":  # the negative control must fail both checks
                    fails = [entry[c]["status"] == "failed" for c in ("equivalence", "leak")]
                    entry["status"] = "passed" if all(fails) else "failed"
                    entry["note"] = "negative control: must fail equivalence and leak"
                else:
                    states = {entry[c]["status"] for c in ("equivalence", "leak")}
                    entry["status"] = "failed" if "failed" in states else (
                        "skipped" if states == {"skipped"} else "passed")
                report["checks"].append(entry)
    if cuda and not quick:
        model = build_model(1024, 16, 4, vocab, seed).to(device=device, dtype=dtype)
        for width in (4096, 8192):
            for backend in ("flex", "varlen", "sdpa_padded"):
                if backend == "varlen" and report["varlen_signature"] is None:
                    continue
                report["throughput"].append(_guarded(throughput, model, backend, width, device, compiled, seed,
                                                     steps=10, warmup=4))
    else:
        report["throughput_skipped"] = "needs CUDA (and not --quick)"
    report["ok"] = all(c["status"] != "failed" for c in report["checks"]) and \
        all(t.get("status") != "failed" for t in report["throughput"])
    return report


def _guarded(fn: Callable, *args: Any, **kwargs: Any) -> dict:
    """A check's result, or ``failed`` with the error (a kernel that refuses a shape is a finding)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        return {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:400]}"}


def _print(report: dict) -> None:
    print(f"device {report['device']} ({report['precision']}); torch {report['versions']['torch']}")
    for c in report["checks"]:
        eq, lk = c.get("equivalence", {}), c.get("leak", {})
        nums = ""
        if "max_loss_diff" in eq:
            nums = f"loss {eq['max_loss_diff']:.2e} cos {eq['grad_cosine']:.6f} rel {eq['grad_rel_err']:.2e}"
        if "max_other_change" in lk:
            nums += f" leak {lk['max_other_change']:.2e}"
        print(f"  {c['status']:8s} {c['name']:28s} {nums} {c.get('reason', '')}")
    for t in report["throughput"]:
        if "tokens_per_s" in t:
            print(f"  W={t['width']:5d} {t['backend']:12s} {t['tokens_per_s']:12.0f} tok/s  padding "
                  f"{t['padding_share']:.1%}")
        else:
            print(f"  throughput failed: {t.get('error')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "gpu_attention_check.json"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--quick", action="store_true", help="small shapes (the CPU test)")
    args = parser.parse_args(argv)
    import torch

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    device = args.device
    if device in ("auto", "cuda") and not torch.cuda.is_available():
        report = {"skipped": True, "reason": "no CUDA device", "versions": _versions()}
        out.write_text(json.dumps(report, indent=1), encoding="utf-8")
        print("skipped: no CUDA device")
        return 0
    if device == "auto":
        device = "cuda"
    start = time.perf_counter()
    report = run(device, args.seed, args.quick)
    report["seconds"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    _print(report)
    print(f"{'OK' if report['ok'] else 'FAILED'} in {report['seconds']} s -> {out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

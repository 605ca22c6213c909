"""The CPU-side parts of ``bench/gpu_attention_check.py`` (the GPU check that needs no Transformer Engine).

What runs without a GPU: the document mask built from seqpack's THD batches equals seqpack's reference
attention mask (tail-only and folded layouts included) and FlexAttention's own materialised mask; the
``varlen_attn`` causal argument follows the installed signature; the script skips cleanly without CUDA
(exit 0, a JSON that says so); and ``--device cpu --quick`` runs every check a CPU can run (dense attention
packed == unpacked, FlexAttention forward without a leak), with the whole-row causal negative control
failing, as on a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_attention_check.py"


@pytest.fixture(scope="module")
def gac():
    spec = importlib.util.spec_from_file_location("gpu_attention_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # the first FlexAttention import and call cost seconds
@pytest.mark.parametrize("layout", ["aligned", "tail_only", "folded"])
def test_document_mask_is_seqpacks_reference_mask(gac, layout):
    from seqpack.training.attention import attention_mask
    from seqpack.training.boundaries import thd_layout

    seqs = gac.sequences(gac.layout_lengths(layout, 3, True), 64, 1)
    batch = gac.packed_batch(seqs, layout)
    doc, real = gac.documents(batch)
    ours = gac.dense_document_mask(doc, real)
    t = batch["tokens"].shape[1]
    if layout != "folded":  # folded boundaries are physical: seqpack's mask then lets padding keys in, by design
        ref = attention_mask(thd_layout(batch), torch.arange(t), torch.arange(t), "thd")
        assert torch.equal(ours, ref)
    # FlexAttention's own reading of the mask_mod is the same matrix
    from torch.nn.attention.flex_attention import create_mask

    flex = create_mask(gac.document_mask_mod(doc, real), None, None, t, t, device="cpu")[0, 0]
    assert torch.equal(flex, ours)
    # negative control: the whole-row causal mask is not it
    assert not torch.equal(torch.ones(t, t, dtype=torch.bool).tril(), ours)


def test_varlen_causal_argument_follows_the_signature(gac):
    def old(q, k, v, cu_q, cu_k, max_q, max_k, *, is_causal=False, return_aux=None):
        return None

    def new(q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)):
        return None

    def neither(q, k, v, cu_q, cu_k, max_q, max_k):
        return None

    assert gac.varlen_causal_kwargs(old) == {"is_causal": True}
    assert gac.varlen_causal_kwargs(new) == {"window_size": (-1, 0)}
    with pytest.raises(KeyError):
        gac.varlen_causal_kwargs(neither)


@pytest.mark.slow  # a fresh interpreter importing torch
def test_skips_cleanly_without_cuda(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here: the skip path is for machines without one")
    assert done.returncode == 0 and "skipped: no CUDA device" in done.stdout
    report = json.loads(out.read_text())
    assert report["skipped"] is True and report["reason"] == "no CUDA device"


@pytest.mark.slow
def test_quick_cpu_run_passes_and_its_negative_control_fails(tmp_path):
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    report = json.loads(out.read_text())
    by = {c["name"]: c for c in report["checks"]}
    for layout in ("aligned", "tail_only", "folded"):
        dense = by[f"D16 {layout} dense"]
        assert dense["status"] == "passed" and dense["equivalence"]["max_loss_diff"] < 1e-4
        assert dense["leak"]["max_other_change"] == 0.0 and dense["leak"]["own_change"] > 0
        flex = by[f"D16 {layout} flex"]
        assert flex["leak"]["status"] == "passed" and flex["equivalence"]["status"] == "skipped"
        assert by[f"D16 {layout} varlen"]["status"] == "skipped"
        control = by[f"D16 {layout} causal_row"]
        assert control["status"] == "passed"  # i.e. both of its checks failed, as a negative control must
        assert control["equivalence"]["status"] == "failed" and control["leak"]["max_other_change"] > 0
    assert report["throughput"] == [] and report["ok"] is True

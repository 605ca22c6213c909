"""Benchmark: Energon online packing, packing_buffer_size vs bin fill, latency, throughput and RSS.

Usage: python bench/bench_energon.py [--buffers 4 8 16 32 64] [--seq-length 8192] [--workers 2]
Prepares the bundled prompt/completion demo data (2000 rows) twice, text only and with synthetic
pictures (about half the rows, 16-48 pixels a side, decoded and patchified in the workers with the
qwen2_vl preset), then runs one finite epoch per
buffer size and variant, side by side in one run, and reports per run: packs, mean samples per
pack, bin fill (real tokens / (packs x seq_length)), first-batch latency (iter to first batch,
worker start and first buffer fill included), steady samples/s after the first batch, and the
largest resident set size of a dataloader worker (RSS, shared pages included, and USS, its private
pages: what the packing buffer and prefetched packs add). Writes bench/results/energon.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from seqpack.config import load_config  # noqa: E402
from seqpack.data import demo_path  # noqa: E402
from seqpack.packing.energon.loader import get_savable_loader, get_train_dataset  # noqa: E402
from seqpack.packing.energon.media import MediaSpec  # noqa: E402
from seqpack.packing.energon.prepare import prepare_energon_dataset  # noqa: E402
from seqpack.core.textfmt import text_table  # noqa: E402

torch.utils.data._utils.worker.MP_STATUS_CHECK_INTERVAL = 0.1
torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL = 0.1


def worker_memory_mib() -> tuple[float, float] | None:
    """Largest RSS and largest USS (private pages) among the dataloader workers, in MiB."""
    try:
        import psutil
    except ImportError:
        return None
    rss, uss = [], []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            info = child.memory_full_info()
        except psutil.Error:
            continue
        rss.append(info.rss)
        uss.append(info.uss)
    return (max(rss) / 2**20, max(uss) / 2**20) if rss else None


def run_once(root: Path, seq_length: int, buffer: int, workers: int) -> dict:
    cfg = load_config(
        {
            "model": {"seq_length": seq_length, "calculate_per_token_loss": True},
            "dataset": {"kind": "energon", "packing_buffer_size": buffer, "micro_batch_size": 1},
            "train": {"micro_batch_size": 1, "global_batch_size": 8},
            "ddp": {"average_in_collective": False},
        }
    )
    loader = get_savable_loader(get_train_dataset(cfg, root, num_workers=workers, repeat=False))
    t0 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    t_first = time.perf_counter() - t0
    packs, samples, real = 1, len(first["sample_keys"]), int(first["cu_seqlens_q"][-1])
    mem = [worker_memory_mib()]
    t1 = time.perf_counter()
    for batch in it:
        packs += 1
        samples += len(batch["sample_keys"])
        real += int(batch["cu_seqlens_q"][-1])
        if packs % 16 == 0:
            mem.append(worker_memory_mib())
    steady = time.perf_counter() - t1
    mem = [m for m in mem if m is not None]
    return {
        "buffer": buffer,
        "packs": packs,
        "samples": samples,
        "samples_per_pack": samples / packs,
        "bin_fill": real / (packs * seq_length),
        "first_batch_s": t_first,
        "steady_samples_per_s": (samples - len(first["sample_keys"])) / steady if steady > 0 else None,
        "worker_rss_mib": max(m[0] for m in mem) if mem else None,
        "worker_uss_mib": max(m[1] for m in mem) if mem else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffers", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--seq-length", type=int, default=8192)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    results: dict = {"seq_length": args.seq_length, "workers": args.workers, "cpu_count": os.cpu_count(), "runs": {}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        variants = {"text": None, "media": MediaSpec(seed=args.seed)}
        roots = {}
        for name, media in variants.items():
            prepared = prepare_energon_dataset(demo_path("prompt_completion"), Path(tmp) / name, media=media)
            roots[name] = prepared.root
            results[f"prepare_{name}_s"] = prepared.seconds
        for buffer in args.buffers:
            for name in variants:
                r = run_once(roots[name], args.seq_length, buffer, args.workers)
                results["runs"].setdefault(name, []).append(r)
                rows.append([
                    name, buffer, r["packs"], f"{r['samples_per_pack']:.1f}", f"{r['bin_fill']:.1%}",
                    f"{r['first_batch_s']:.2f}", f"{r['steady_samples_per_s']:.0f}",
                    "n/a" if r["worker_rss_mib"] is None else f"{r['worker_rss_mib']:.0f}",
                    "n/a" if r["worker_uss_mib"] is None else f"{r['worker_uss_mib']:.1f}",
                ])
    print(f"Energon online packing, demo prompt/completion (2000 rows), seq_length={args.seq_length}, "
          f"{args.workers} workers, {os.cpu_count()} CPUs")
    print(f"prepare: text {results['prepare_text_s']:.2f}s, media {results['prepare_media_s']:.2f}s")
    print(text_table(
        ["data", "buffer", "packs", "samples/pack", "bin fill", "first batch s", "samples/s", "worker RSS MiB",
         "worker USS MiB"], rows
    ))
    out = ROOT / "bench" / "results" / "energon.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

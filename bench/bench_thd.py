"""Benchmark of the canonical THD builder and the stored-row collate.

One command: ``python bench/bench_thd.py`` prints a table and writes
``bench/results/bench_thd.json``. Each case packs rows drawn from a shared length mix into packs of
``--pack-size`` tokens and times, side by side in one run:

* ``build_thd_batch`` on numpy rows and on torch rows;
* a per-token Python loop that lays out the same batch (the baseline the builder must beat);
* ``collate_stored_row_canonical`` on the equivalent stored packed row (``m`` alignment, eos 0);
* with ``--baseline-ref REF`` (e.g. ``main``): the ``build_thd_batch`` of ``reference_impl/seqpack/packing/thd.py``
  at git revision ``REF``, on the same rows, so a change to the builder is measured before and after
  in one run.

The builder cases take turns within every repeat (one pass over all packs each), so machine noise
hits them alike; the table gives the median pass.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo

from seqpack.data.length_mixes import sample_lengths  # noqa: E402
from seqpack.packing.thd import build_thd_batch  # noqa: E402
from seqpack.packing.thd_collate import collate_stored_row_canonical  # noqa: E402

log = logging.getLogger("bench_thd")


def _packs(lengths: np.ndarray, pack_size: int, m: int) -> list[list[int]]:
    """Greedy consecutive packs whose aligned sum fits ``pack_size``."""
    packs: list[list[int]] = [[]]
    used = 0
    for u in lengths.tolist():
        aligned = -(-u // m) * m
        if aligned > pack_size:
            continue
        if used + aligned > pack_size:
            packs.append([])
            used = 0
        packs[-1].append(u)
        used += aligned
    return [p for p in packs if p]


def _rows(pack: list[int], rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    rows = []
    for u in pack:
        tokens = rng.integers(1, 32000, size=u, dtype=np.int64)
        rows.append({"tokens": tokens, "labels": np.roll(tokens, -1),
                     "loss_mask": (rng.random(u) < 0.7).astype(np.float32)})
    return rows


def _loop_baseline(rows: list[dict[str, np.ndarray]], m: int, width: int) -> dict[str, Any]:
    """A straightforward per-token layout, for comparison only."""
    tokens, labels, loss, pos, pad = [], [], [], [], []
    cu, cu_p = [0], [0]
    for r in rows:
        u = len(r["tokens"])
        p = -(-u // m) * m
        for j in range(p):
            real = j < u
            tokens.append(int(r["tokens"][j]) if real else 0)
            labels.append(int(r["labels"][j]) if real else -100)
            loss.append(float(r["loss_mask"][j]) if real else 0.0)
            pos.append(j)
            pad.append(not real)
        cu.append(cu[-1] + u)
        cu_p.append(cu_p[-1] + p)
    slack = width - cu_p[-1]
    tokens += [0] * slack
    labels += [-100] * slack
    loss += [0.0] * slack
    pos += [0] * slack
    pad += [True] * slack
    if slack:
        cu.append(cu[-1])
        cu_p.append(width)
    return {
        "tokens": torch.tensor([tokens]), "labels": torch.tensor([labels]),
        "loss_mask": torch.tensor([loss]), "position_ids": torch.tensor([pos]),
        "padding_mask": torch.tensor([pad]), "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32),
        "cu_seqlens_q_padded": torch.tensor(cu_p, dtype=torch.int32),
    }


def _stored_row(rows: list[dict[str, np.ndarray]], m: int) -> dict[str, list[int]]:
    """The stored packed row equivalent of ``rows`` (pre-padded with eos 0 to k*m + 1)."""
    ids: list[np.ndarray] = []
    loss: list[np.ndarray] = []
    starts = []
    offset = 0
    for r in rows:
        u = len(r["tokens"])
        p = -(-u // m) * m
        seg = np.zeros(p + 1, dtype=np.int64)
        seg[:u] = r["tokens"]
        seg_loss = np.zeros(p + 1, dtype=np.int8)
        seg_loss[:u] = r["loss_mask"]
        starts.append(offset)
        offset += p + 1
        ids.append(seg)
        loss.append(seg_loss)
    return {"input_ids": np.concatenate(ids), "loss_mask": np.concatenate(loss),
            "seq_start_id": np.asarray(starts)}


def _time_round_robin(cases: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of every case; the cases take turns within each repeat (after one
    warm-up call each)."""
    for fn in cases.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def load_baseline(ref: str) -> Callable[..., dict[str, Any]]:
    """``build_thd_batch`` of ``reference_impl/seqpack/packing/thd.py`` at git revision ``ref``."""
    text = subprocess.run(["git", "show", f"{ref}:reference_impl/seqpack/packing/thd.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    module = types.ModuleType(f"thd_at_{ref}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(text, f"{ref}:reference_impl/seqpack/packing/thd.py", "exec"), module.__dict__)  # noqa: S102
    return module.build_thd_batch


def run(pack_size: int, m: int, mix: str, num_packs: int, repeats: int, seed: int,
        baseline: tuple[str, Callable[..., dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(mix, 20 * num_packs * max(1, pack_size // 2048), seed=seed, max_len=pack_size)
    packs = _packs(lengths, pack_size, m)[:num_packs]
    rows_np = [_rows(p, rng) for p in packs]
    rows_torch = [[{k: torch.from_numpy(v) for k, v in r.items()} for r in rows] for rows in rows_np]
    stored = [_stored_row(rows, m) for rows in rows_np]
    kwargs = dict(pad_seq_to_mult=m, max_length=pack_size, pad_to_max_length=True, slack="pad_sequence")

    # the baseline and the builder agree on the layout
    check = build_thd_batch(rows_np[0], **kwargs)
    base = _loop_baseline(rows_np[0], m, pack_size)
    for key in ("tokens", "labels", "loss_mask", "padding_mask"):
        assert torch.equal(check[key], base[key]), key

    cases = {
        "build_thd_batch (numpy rows)": lambda: [build_thd_batch(r, **kwargs) for r in rows_np],
        "build_thd_batch (torch rows)": lambda: [build_thd_batch(r, **kwargs) for r in rows_torch],
    }
    if baseline is not None:
        ref, old = baseline
        for name, rows in (("numpy", rows_np), ("torch", rows_torch)):
            reference = [build_thd_batch(r, **kwargs) for r in rows[:4]]
            for got, want in zip([old(r, **kwargs) for r in rows[:4]], reference):
                assert got.keys() == want.keys() and all(
                    torch.equal(got[k], want[k]) if isinstance(want[k], torch.Tensor) else got[k] == want[k]
                    for k in want), f"the builder at {ref} lays {name} rows out differently"
            cases[f"{ref}: build_thd_batch ({name} rows)"] = (lambda rows=rows: [old(r, **kwargs) for r in rows])
    cases["collate_stored_row_canonical"] = lambda: [
        collate_stored_row_canonical(s, pack_size=pack_size, pad_seq_to_mult=m, eos_id=0,
                                     pad_to_max_length=True) for s in stored
    ]
    timed = _time_round_robin(cases, repeats)
    timed["per-token Python loop"] = _time_round_robin(
        {"loop": lambda: [_loop_baseline(r, m, pack_size) for r in rows_np]}, max(1, repeats // 5))["loop"]
    seqs = sum(len(p) for p in packs)
    results = []
    for name, secs in timed.items():
        results.append({
            "case": name, "pack_size": pack_size, "pad_seq_to_mult": m, "mix": mix,
            "packs": len(packs), "sequences": seqs,
            "ms_per_pack": 1000 * secs / len(packs),
            "packs_per_s": len(packs) / secs,
        })
    loop_ms = next(r["ms_per_pack"] for r in results if r["case"] == "per-token Python loop")
    for r in results:
        r["speedup_vs_loop"] = loop_ms / r["ms_per_pack"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack-sizes", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--pad-seq-to-mult", type=int, default=8)
    parser.add_argument("--mix", default="bimodal")
    parser.add_argument("--packs", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--baseline-ref", default=None,
                        help="also time build_thd_batch as of this git revision (e.g. main), side by side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bench_thd.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    baseline = None if args.baseline_ref is None else (args.baseline_ref, load_baseline(args.baseline_ref))
    results = []
    for pack_size in args.pack_sizes:
        results += run(pack_size, args.pad_seq_to_mult, args.mix, args.packs, args.repeats, args.seed, baseline)
    header = f"{'case':40} {'pack':>6} {'m':>3} {'packs':>5} {'seqs':>6} {'ms/pack':>9} {'packs/s':>9} {'x loop':>8}"
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r['case']:40} {r['pack_size']:>6} {r['pad_seq_to_mult']:>3} {r['packs']:>5} "
            f"{r['sequences']:>6} {r['ms_per_pack']:>9.3f} {r['packs_per_s']:>9.1f} {r['speedup_vs_loop']:>8.1f}"
        )
    if baseline is not None:
        ref = baseline[0]
        for r in results:
            for kind in ("numpy", "torch"):
                if r["case"] == f"build_thd_batch ({kind} rows)":
                    before = next(b for b in results if b["pack_size"] == r["pack_size"]
                                  and b["case"] == f"{ref}: build_thd_batch ({kind} rows)")
                    r[f"speedup_vs_{ref}"] = before["ms_per_pack"] / r["ms_per_pack"]
                    lines.append(f"build_thd_batch ({kind} rows, pack {r['pack_size']}): {before['ms_per_pack']:.3f} "
                                 f"ms at {ref} -> {r['ms_per_pack']:.3f} ms now, {r[f'speedup_vs_{ref}']:.2f}x")
    print("\n".join(lines))  # noqa: T201 - a benchmark script's table is its output
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": platform.platform(), "python": platform.python_version(),
               "torch": torch.__version__, "numpy": np.__version__, "args": vars(args) | {"out": str(args.out)},
               "results": results}
    args.out.write_text(json.dumps(payload, indent=2))
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()

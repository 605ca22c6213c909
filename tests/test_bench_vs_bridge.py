"""bench/bench_vs_bridge.py: the comparison with megatron-bridge 0.6.2 runs both sides and checks their results.

The quick mode runs on a tiny input in the upstream lane (slow): every section has a Bridge cell and
seqpack cells, every seqpack cell's result equals Bridge's (or holds the same samples, or is a valid
packing), and the planted cells (seqpack run on changed inputs) are reported as differing and timed
as nothing. The helpers that decide "equal" are checked directly on constructed inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_vs_bridge as B  # noqa: E402
from _vs_bridge_common import core_view, digest, thd_view  # noqa: E402


def _packs(rows: list[list[list[int]]]) -> dict[str, np.ndarray]:
    """Flat columns of packed rows given as lists of segments (loss mask 1 on every token)."""
    ids, starts, counts, offsets = [], [], [], [0]
    for row in rows:
        s = 0
        for seg in row:
            starts.append(s)
            s += len(seg)
            ids.extend(seg)
        counts.append(len(row))
        offsets.append(offsets[-1] + s)
    return {"input_ids": np.array(ids, dtype=np.int64), "loss_mask": np.ones(len(ids), dtype=np.int64),
            "seq_start_id": np.array(starts, dtype=np.int64), "seq_counts": np.array(counts, dtype=np.int64),
            "row_offsets": np.array(offsets, dtype=np.int64)}


def test_pack_comparisons_tell_order_content_and_lengths():
    a = _packs([[[1, 2, 3], [4, 5]], [[6, 7, 8, 9]]])
    same = _packs([[[1, 2, 3], [4, 5]], [[6, 7, 8, 9]]])
    reordered = _packs([[[6, 7, 8, 9]], [[4, 5], [1, 2, 3]]])
    changed = _packs([[[1, 2, 3], [4, 5]], [[6, 7, 8, 0]]])
    assert B.compare_rows(a, same) is None
    assert B.compare_rows(a, reordered) is not None
    assert "input_ids" in B.compare_rows(a, changed)
    assert B.segment_multiset(a) == B.segment_multiset(reordered)
    assert B.segment_multiset(a) != B.segment_multiset(changed)
    assert B.runtime_lengths(a).tolist() == [2, 1, 3]


def test_batch_digests_see_keys_dtypes_shapes_and_values():
    batch = {"tokens": torch.arange(6).reshape(1, 6), "token_count": [6], "max_seqlen": torch.tensor(6)}
    assert digest(batch) == digest({k: (v.clone() if hasattr(v, "clone") else list(v)) for k, v in batch.items()})
    assert digest(batch) != digest({**batch, "tokens": batch["tokens"].to(torch.int32)})
    assert digest(batch) != digest({**batch, "tokens": batch["tokens"].reshape(2, 3)})
    assert digest(batch) != digest({**batch, "token_count": [5]})
    assert digest(batch) != digest({**batch, "extra": None})
    # the THD view takes absent padded boundaries as the real ones (seqpack writes them only when they differ)
    cu = torch.tensor([0, 3, 6], dtype=torch.int32)
    ours = {"tokens": torch.arange(6), "labels": torch.arange(6), "loss_mask": torch.ones(6),
            "position_ids": torch.arange(6), "cu_seqlens_q": cu, "cu_seqlens_kv": cu, "max_seqlen_q": 3,
            "max_seqlen_kv": 3}
    theirs = {**{("input_ids" if k == "tokens" else k): v for k, v in ours.items()}, "cu_seqlens_q_padded": cu,
              "cu_seqlens_kv_padded": cu, "max_seqlen_q": torch.tensor(3), "max_seqlen_kv": torch.tensor(3)}
    assert digest(thd_view(ours, bridge=False)) == digest(thd_view(theirs, bridge=True))
    theirs["cu_seqlens_q_padded"] = torch.tensor([0, 4, 6], dtype=torch.int32)
    assert digest(thd_view(ours, bridge=False)) != digest(thd_view(theirs, bridge=True))
    # the reader's shared keys compare as int64 (Bridge's loss mask is int64, the canonical one float)
    assert digest(core_view({"tokens": torch.arange(3), "labels": torch.arange(3), "position_ids": torch.arange(3),
                             "loss_mask": torch.ones(3)})) == \
        digest(core_view({"tokens": torch.arange(3), "labels": torch.arange(3), "position_ids": torch.arange(3),
                          "loss_mask": torch.ones(3, dtype=torch.int64)}))


def test_a_differing_cell_gets_no_speedup_and_misses_its_target():
    bridge = {"impl": B.BRIDGE, "mbs": 4, "micro_batches_per_s": 100.0, "check": B.check("reference")}
    equal = {"impl": "seqpack build_thd_batch", "mbs": 4, "micro_batches_per_s": 300.0, "check": B.check("equal")}
    differ = {**equal, "check": B.check("DIFFER", "1 of 10 micro-batches differ")}
    cells = {s: [] for s in B.SECTIONS}
    cells["in_batch"] = [bridge, equal]
    _, compared = B.tables(cells)
    assert compared[0]["speedup"] == pytest.approx(3.0)
    assert B.targets(compared, 10**6)[3]["met"] is True
    cells["in_batch"] = [bridge, differ]
    _, compared = B.tables(cells)
    assert compared[0]["speedup"] is None
    assert B.targets(compared, 10**6)[3]["met"] is False


@pytest.mark.slow
def test_quick_run_checks_both_sides_and_reports_the_planted_mismatches(upstream, tmp_path):
    out = tmp_path / "vs_bridge.json"
    env = {**os.environ, "SEQPACK_UPSTREAM_VENV": str(upstream.status.venv)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_vs_bridge.py"), "--quick", "--rows", "1500",
         "--tokenizers", "wordlevel", "--plant-mismatch", "--in-batch-rows", "48", "--mbs", "4", "8",
         "--read-limit", "30", "--tmp", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for section in B.SECTIONS:
        cells = report["sections"][section]
        impls = {c["impl"] for c in cells}
        assert B.BRIDGE in impls and any(i.startswith("seqpack") for i in impls), (section, impls)
        for cell in cells:
            status = (cell.get("check") or {}).get("status")
            if cell["impl"] == B.BRIDGE:
                assert cell["ok_runs"] == cell["runs"] == 1, (section, cell.get("failure"))
            elif cell["impl"].startswith("PLANTED"):
                assert status == "DIFFER", (section, cell["impl"], cell.get("check"))
            else:
                assert status in ("equal", "same samples", "valid", "agree"), (section, cell["impl"], cell.get("check"))
    compat = [c for c in report["sections"]["offline"] if "bridge-compat" in c["impl"] and "PLANTED" not in c["impl"]]
    assert len(compat) == 2 and all(c["check"]["status"] == "equal" for c in compat)
    planted = [c for c in report["compared"] if c["impl"].startswith("PLANTED")]
    assert len(planted) == 6 and all(c["speedup"] is None for c in planted)  # offline, stage, read, 2 MBS, validate
    assert {g["target"].split(":")[0] for g in report["targets"]} >= {"packing stage alone", "reader"}
    assert "DIFFER" in proc.stdout and "targets:" in proc.stdout

"""MoE + MTP global-batch step under CP=2 (two gloo processes) against the CP=1 reference of the same packs.

The worker (tests/distributed/moe_global_batch_worker.py) runs two steps with different numbers of
micro-batches; router statistics, MTP streams and counts travel across the CP split, so the logged
auxiliary losses and the gradients must equal the CP=1 numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqpack.training.ranks import reserved_port

ROOT = Path(__file__).resolve().parents[1]
EXACT = 1e-10

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("moe_cp2")
    with reserved_port() as port:  # held while torchrun's rendezvous binds it
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               str(ROOT / "tests" / "distributed" / "moe_global_batch_worker.py"), "--out", str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_steps_ran_different_numbers_of_micro_batches(reports: list[dict]) -> None:
    counts = [s["num_micro_batches"] for s in reports[0]["steps"]]
    assert len(set(counts)) == 2 and min(counts) >= 2


def test_logged_aux_losses_equal_cp1(reports: list[dict]) -> None:
    for report in reports:
        for step in report["steps"]:
            aux, ref = step["aux"], step["ref_aux"]
            assert aux["micro_batches"] == ref["micro_batches"] == step["num_micro_batches"]
            for key in ("load_balancing_loss", "z_loss"):
                assert aux[key] == pytest.approx(ref[key], rel=1e-12)
            assert aux["mtp_loss"] == pytest.approx(ref["mtp_loss"], rel=1e-12)
            assert aux["expert_load"] == ref["expert_load"]


def test_gradients_with_aux_and_mtp_terms_equal_cp1(reports: list[dict]) -> None:
    for report in reports:
        for step in report["steps"]:
            assert step["grad_diff"] < EXACT
            assert step["loss_sum"] == pytest.approx(step["ref_loss_sum"], rel=1e-12)

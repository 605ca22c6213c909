"""Shared fixtures."""

import json
from pathlib import Path

import pytest


@pytest.fixture
def write_jsonl(tmp_path):
    """Write rows (dicts or raw strings) as a JSONL file in tmp_path and return its path."""

    def _write(rows, name="data.jsonl"):
        path = Path(tmp_path) / name
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
        return path

    return _write


@pytest.fixture(scope="session")
def smoke_cp_reports():
    """The smoke test of every registered path (default config, tiny data) and of two CP negative controls,
    with their CP checks in one launch of two ranks: name -> report.

    ``offline-pad1``: offline packs aligned to 1 instead of 2*CP; ``in_batch-mean-loss``: in-batch with
    ``calculate_per_token_loss=false``.
    """
    from reference_impl.packing_paths import path_names
    from reference_impl.smoke import SmokeRequest, default_config, run_packing_smoke_tests

    pad1 = default_config("offline")
    pad1["dataset"]["offline_packing_specs"]["pad_seq_to_mult"] = 1
    requests = {name: SmokeRequest(name) for name in path_names()}
    requests["offline-pad1"] = SmokeRequest("offline", pad1)
    requests["in_batch-mean-loss"] = SmokeRequest("in_batch", overrides=("model.calculate_per_token_loss=false",))
    return dict(zip(requests, run_packing_smoke_tests(list(requests.values()), size="tiny")))

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

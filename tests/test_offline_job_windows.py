"""A tokenization job carries only its rows' part of a JSONL line index to a worker (issue 33).

Before, every worker (and every Ray shard task) loaded and verified the index of the whole file: memory per
worker and time per task grew with the file (10M rows: about 240 MB of index per worker, and a full
verification read of the file per Ray shard task).
"""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from seqpack.core.errors import InputError
from seqpack.data.jsonl import JsonlFile
from seqpack.data.rows import open_rows
from seqpack.packing.offline.jobs import TokenizeJob


def _rows_file(path, n: int, *, bad: int | None = None) -> str:
    lines = [json.dumps({"input": f"q{i}", "output": f"a{i}"}) for i in range(n)]
    if bad is not None:
        lines[bad] = '{"input": "q", "output": '  # malformed
    path.write_text("\n\n".join(lines) + "\n")  # blank lines: physical lines differ from rows
    return str(path)


def test_a_job_pickles_with_a_window_of_the_index_whatever_the_file_size(tmp_path):
    sizes = []
    for n in (2_000, 60_000):
        path = _rows_file(tmp_path / f"d{n}.jsonl", n)
        source = open_rows(path)
        rows = np.arange(n - 1024, n, dtype=np.int64)
        sizes.append(len(pickle.dumps(TokenizeJob(0, path, rows, None, source))))
        whole = len(pickle.dumps(source))  # negative control: the reader itself carries every row's offsets
        assert whole > 20 * n
    assert sizes[1] < 1.1 * sizes[0] and sizes[1] < 64 * 1024


def test_a_window_reads_and_names_rows_like_the_whole_reader(tmp_path):
    path = _rows_file(tmp_path / "d.jsonl", 5_000, bad=4_100)
    source = JsonlFile(path)
    rows = np.array([4_099, 17, 17, 3_000, 4_100], dtype=np.int64)  # any order, repeats
    job = pickle.loads(pickle.dumps(TokenizeJob(3, path, rows, None, source)))
    window = job.source
    assert window.index_source == "window" and len(window) == len(source)
    assert window.rows(rows[:4].tolist()) == source.rows(rows[:4].tolist())
    assert window.location(3_000) == source.location(3_000) and window.line_number(17) == 35
    with pytest.raises(InputError) as theirs:
        source.row(4_100)
    with pytest.raises(InputError) as ours:
        window.row(4_100)
    assert str(ours.value) == str(theirs.value) and ":8201, row 4100:" in str(ours.value)
    with pytest.raises(IndexError):
        window.row(18)  # outside the window: a programming error, never another row's bytes


def test_a_window_refuses_a_file_replaced_with_the_same_size_and_time(tmp_path):
    path = _rows_file(tmp_path / "d.jsonl", 3_000)
    job = pickle.loads(pickle.dumps(TokenizeJob(0, path, np.arange(10, dtype=np.int64), None, open_rows(path))))
    st = os.stat(path)
    text = open(path).read()
    with open(path, "w") as fh:  # the last row's digits change, the size does not
        fh.write(text[: -3] + ("9" if text[-3] != "9" else "8") + text[-2:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(InputError, match="changed while"):
        job.source.rows(list(range(10)))

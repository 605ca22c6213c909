"""JSONL line index, its cache, lazy row access and bad-input errors."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import jsonl as jl
from seqpack.data.jsonl import JsonlFile, build_line_index, cache_paths
from seqpack.core.errors import InputError


def naive_rows(data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, physical line) of every non-blank line, computed the obvious way."""
    out, pos = [], 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip(b" \t\r\n"):
            out.append((pos, pos + len(line), number))
        pos += len(line) + 1
    return out


def write(path, data: bytes):
    path.write_bytes(data)
    return path


LINES = st.sampled_from([b"", b" ", b"\t\r", b"\r", b'{"a": 1}', b'  {"b": "x y"}', b'{"c": "zzzzzzzzzzzz"}'])


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(LINES, max_size=12), ending=st.sampled_from([b"", b"\n", b"\r\n", b"  "]),
       chunk=st.sampled_from([1, 2, 3, 5, 7, 64, 1 << 20]))
def test_index_matches_naive_scan_for_any_chunk_size(tmp_path_factory, parts, ending, chunk):
    data = b"\n".join(parts) + ending
    path = write(tmp_path_factory.mktemp("idx") / "f.jsonl", data)
    index = build_line_index(path, chunk_size=chunk)
    got = list(zip(index.starts.tolist(), index.ends.tolist(), index.lines.tolist()))
    assert got == naive_rows(data)
    assert index.starts.dtype == np.int64 and index.lines.dtype == np.int64


def test_rows_skip_blank_lines_and_keep_physical_line_numbers(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"i": 0}\n\n   \n{"i": 1}\r\n\t\n{"i": 2}')
    f = JsonlFile(path)
    assert len(f) == 3
    assert [f.line_number(i) for i in range(3)] == [1, 4, 6]
    assert [r["i"] for r in f] == [0, 1, 2]
    assert f.raw(1) == b'{"i": 1}'  # CR of the CRLF is not part of the row
    assert f[-1] == {"i": 2}
    with pytest.raises(IndexError):
        f.row(3)


def test_utf8_bom_at_file_start_is_ignored(tmp_path):
    path = write(tmp_path / "bom.jsonl", b'\xef\xbb\xbf{"a": "\xc3\xa9"}\n')
    assert JsonlFile(path).row(0) == {"a": "é"}


def test_index_is_built_once_then_reused(tmp_path, monkeypatch):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n{"a": 2}\n')
    calls = []
    real = jl.build_line_index
    monkeypatch.setattr(jl, "build_line_index", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = JsonlFile(path)
    cache = tmp_path / ".seqpack-cache" / "d.jsonl.idx.npz"
    assert first.index_source == "built" and first.cache_path == cache and cache.is_file()
    stamp = cache.stat().st_mtime_ns
    second = JsonlFile(path)
    assert second.index_source == "cache" and len(calls) == 1
    assert cache.stat().st_mtime_ns == stamp
    assert np.array_equal(second.index.starts, first.index.starts)
    assert [p.name for p in cache.parent.iterdir()] == ["d.jsonl.idx.npz"]  # no temp file left


def test_cache_invalidated_when_rows_are_appended(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n')
    assert len(JsonlFile(path)) == 1
    with open(path, "ab") as fh:
        fh.write(b'{"a": 2}\n')
    again = JsonlFile(path)
    assert again.index_source == "built" and len(again) == 2 and again.row(1) == {"a": 2}


def test_cache_invalidated_by_same_size_edit_with_restored_mtime(tmp_path):
    """Size and mtime unchanged: only the edge hash can tell; it must."""
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n{"a": 2}\n')
    JsonlFile(path)
    st_before = path.stat()
    write(path, b'{"a": 1}\n\n{"a":2}\n')  # same size, one more blank line, rows move
    os.utime(path, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))
    again = JsonlFile(path)
    assert again.index_source == "built"
    assert [again.line_number(i) for i in range(2)] == [1, 3] and again.row(1) == {"a": 2}


def test_corrupt_cache_is_rebuilt(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n')
    cache = JsonlFile(path).cache_path
    cache.write_bytes(b"not an npz")
    again = JsonlFile(path)
    assert again.index_source == "built" and again.row(0) == {"a": 1}
    assert JsonlFile(path).index_source == "cache"


def test_explicit_cache_dir_keeps_data_folder_clean(tmp_path):
    data_dir, cache_dir = tmp_path / "data", tmp_path / "cache"
    data_dir.mkdir()
    path = write(data_dir / "d.jsonl", b'{"a": 1}\n')
    f = JsonlFile(path, cache_dir=cache_dir)
    assert f.cache_path.parent == cache_dir and f.cache_path.name.startswith("d.jsonl-")
    assert sorted(p.name for p in data_dir.iterdir()) == ["d.jsonl"]
    assert JsonlFile(path, cache_dir=cache_dir).index_source == "cache"


def test_falls_back_to_user_cache_dir_when_data_folder_is_not_writable(tmp_path, monkeypatch):
    data_dir = tmp_path / "ro"
    data_dir.mkdir()
    path = write(data_dir / "d.jsonl", b'{"a": 1}\n')
    (data_dir / ".seqpack-cache").write_bytes(b"")  # a file where the cache folder should be: mkdir fails
    monkeypatch.setenv("SEQPACK_CACHE_DIR", str(tmp_path / "user"))
    f = JsonlFile(path)
    assert f.index_source == "built"
    assert f.cache_path == cache_paths(path)[1] and f.cache_path.is_relative_to(tmp_path / "user")
    assert JsonlFile(path).index_source == "cache"


def test_keeps_index_in_memory_when_nothing_is_writable(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n')
    blocker = write(tmp_path / "blocker", b"")
    f = JsonlFile(path, cache_dir=blocker / "sub")
    assert f.index_source == "memory" and f.cache_path is None and f.row(0) == {"a": 1}


def test_use_cache_false_writes_nothing(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n')
    f = JsonlFile(path, use_cache=False)
    assert f.index_source == "memory" and not (tmp_path / ".seqpack-cache").exists()


def test_failed_cache_write_leaves_no_temp_file(tmp_path, monkeypatch):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n')

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(jl.np, "savez", boom)
    monkeypatch.setenv("SEQPACK_CACHE_DIR", str(tmp_path / "user"))
    f = JsonlFile(path)
    assert f.index_source == "memory"
    leftovers = [p for d in (tmp_path / ".seqpack-cache", tmp_path / "user" / "jsonl-index") if d.exists()
                 for p in d.iterdir()]
    assert leftovers == []


def test_row_reads_only_its_own_line(tmp_path, monkeypatch):
    rows = [json.dumps({"i": i, "pad": "x" * 50}).encode() for i in range(100)]
    data = b"\n".join(rows) + b"\n"
    path = write(tmp_path / "d.jsonl", data)
    f = JsonlFile(path)
    assert f.row(0)["i"] == 0  # opening the file reads its two 4 KiB edges (the fingerprint), once
    reads, real = [], os.pread

    def recording(fd, n, offset):
        reads.append((offset, offset + n))
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", recording)
    assert f.row(57)["i"] == 57
    start, end = int(f.index.starts[57]), int(f.index.ends[57])
    assert reads and all(start <= a and b <= end for a, b in reads)


def test_a_broken_line_does_not_affect_other_rows(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n{broken\n\xff\xfe\n{"a": 4}\n')
    f = JsonlFile(path)
    assert len(f) == 4 and f.row(0) == {"a": 1} and f.row(3) == {"a": 4}


def test_malformed_json_names_file_line_and_column(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n\n{"a": 2,, "b": 3}\n')
    with pytest.raises(InputError) as info:
        JsonlFile(path).row(1)
    err = info.value
    assert (err.file, err.line, err.row) == (str(path), 3, 1)
    assert "column 9" in str(err) and str(err).startswith(f"{path}:3, row 1: malformed JSON")


@pytest.mark.parametrize("line, kind", [(b"[1, 2]", "array"), (b"42", "number"), (b'"x"', "string"), (b"null", "null")])
def test_line_that_is_not_an_object(tmp_path, line, kind):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n' + line + b"\n")
    with pytest.raises(InputError, match=f"got a JSON {kind}") as info:
        JsonlFile(path).row(1)
    assert info.value.line == 2


def test_non_utf8_names_line_and_byte_offset(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n{"a": "ok\xc3\x28"}\n')
    with pytest.raises(InputError) as info:
        JsonlFile(path).row(1)
    err = info.value
    assert err.line == 2 and err.file == str(path)
    # line 2 starts at byte 9; the bad byte 0xc3 is its 10th byte (index 9) -> file offset 18
    assert "0xc3 at byte offset 18" in err.message and "byte 10 of the line" in err.message


@pytest.mark.parametrize("data", [b"", b"\n\n  \r\n\t"])
def test_file_without_rows_is_an_error_naming_it(tmp_path, data):
    path = write(tmp_path / "empty.jsonl", data)
    with pytest.raises(InputError, match="no rows") as info:
        JsonlFile(path)
    assert info.value.file == str(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        JsonlFile(tmp_path / "nope.jsonl")


def test_file_changed_after_indexing_is_detected_on_first_read(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n')
    f = JsonlFile(path)
    write(path, b'{"a": 1}\n{"a": 2}\n')
    with pytest.raises(InputError, match="changed while it was being read"):
        f.row(0)
    assert JsonlFile(path).row(1) == {"a": 2}  # a reader opened again re-indexes


def test_pickles_without_its_open_file_and_reopens_lazily(tmp_path):
    path = write(tmp_path / "d.jsonl", b'{"a": 1}\n{"a": 2}\n')
    f = JsonlFile(path)
    assert f.row(1) == {"a": 2}  # the file is now open
    clone = pickle.loads(pickle.dumps(f))
    assert clone._fh is None
    assert clone.row(0) == {"a": 1} and clone._fh is not None


def test_works_in_dataloader_workers(tmp_path):
    torch = pytest.importorskip("torch")
    path = write(tmp_path / "d.jsonl", b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(20)))
    f = JsonlFile(path)

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(f)

        def __getitem__(self, i):
            return f.row(i)["i"]

    loader = torch.utils.data.DataLoader(DS(), batch_size=4, num_workers=2)
    assert sorted(int(x) for batch in loader for x in batch) == list(range(20))


# ------------------------------------------------------------------------------------------------
# rows(): orjson where it cannot disagree with the standard library, the stdlib path otherwise
# ------------------------------------------------------------------------------------------------

_ODD_LINES = [
    b'{"a": 1}',
    b'{"a": NaN, "b": Infinity}',  # stdlib reads them, orjson refuses: the stdlib value
    b'{"a": 1e400}',  # inf
    b'{"big": 123456789012345678901234567890, "s": "12345678901234567890"}',  # orjson would give a float
    b'{"a": -0.0, "b": 5e-324, "c": 1.7976931348623157e308, "d": 0.1}',
    b'{"a": 1, "a": 2}',
    b'{"e": "\\ud83d\\ude00 caf\\u00e9"}',  # an escaped pair: the same text
    b'{"deep": ' + b"[" * 120 + b"]" * 120 + b"}",  # deeper than MAX_JSON_DEPTH: the stdlib error
    b'{"lone": "\\ud800"}',  # a lone surrogate: the stdlib path's error
    b'{"bad": "\xff"}',  # not UTF-8
    b"[1, 2]",  # not an object
    b'{"a": 1} trailing',
    b'{"crlf": true}\r',
    b"\t {\"padded\": 1}  ",
]


def _rows_or_errors(jf, indices):
    out = []
    for i in indices:
        try:
            out.append(jf.rows([i])[0])
        except InputError as exc:
            out.append(str(exc))
    return out


@pytest.mark.parametrize("bom", [False, True])
def test_rows_fast_and_stdlib_give_the_same_rows_and_errors(tmp_path, monkeypatch, bom):
    from seqpack.data import jsontext

    path = tmp_path / "odd.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(_ODD_LINES) + b"\n")
    monkeypatch.setattr(jsontext, "_FAST", None)
    assert jsontext.fast_loads() is not None  # orjson is a core dependency
    jf = JsonlFile(path, use_cache=False)
    fast = _rows_or_errors(jf, range(len(jf)))
    good = [i for i, r in enumerate(fast) if isinstance(r, dict)]
    together = jf.rows(good + good[::-1])  # many at once, in any order
    monkeypatch.setenv("SEQPACK_JSON", "stdlib")
    monkeypatch.setattr(jsontext, "_FAST", None)
    assert jsontext.fast_loads() is None
    slow = _rows_or_errors(jf, range(len(jf)))
    assert json.dumps(fast, default=repr) == json.dumps(slow, default=repr)
    assert together == [slow[i] for i in good + good[::-1]]
    assert isinstance(fast[3]["big"], int) and fast[1]["a"] != fast[1]["a"]  # NaN came through the stdlib
    assert "deeper than" in fast[7] and "surrogate" in fast[8] and "UTF-8" in fast[9] and "array" in fast[10]


def test_rows_raise_the_first_bad_row_like_row(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\nnot json\n{"a": 3}\n[1]\n')
    jf = JsonlFile(path, use_cache=False)
    with pytest.raises(InputError) as info:
        jf.rows(range(5))
    assert info.value.line == 3 and info.value.row == 2
    with pytest.raises(IndexError):
        jf.rows([0, 7])

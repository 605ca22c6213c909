"""The packed reader per Megatron-Bridge version: megatron-bridge 0.6.2's collate (the default) and Bridge
main's (``bridge_version="main"``), on stored rows whose batches upstream code produced.

Vectors (``tests/data/bridge_collate_versions.json``): the two of Megatron-Bridge PR #5610's own tests and
four more (prompt/completion, an EOS typed at the end of a completion, a supervised token right after an
EOS-valued one, a legacy prompt-template segment); each with the batch megatron-bridge 0.6.2's
``collate_fn`` returned in the upstream lane and the one PR #5610's head (which carries #5213 and #5470)
returned on the same rows. What changes on main: no loss zeroing where the input is EOS (PR #5213), a
``padding_mask`` on every batch (PR #5470), a supervised trailing EOS counts in the logical length and a
``pad_between_seqs`` key (PR #5610).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqpack.core.errors import UsageError
from seqpack.packing.thd_collate import collate_stored_rows, stored_row_segments

VECTORS = json.loads((Path(__file__).parent / "data" / "bridge_collate_versions.json").read_text())["vectors"]
KEYS = ("tokens", "labels", "loss_mask", "cu_seqlens_q", "cu_seqlens_q_padded", "padding_mask", "pad_between_seqs")


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else value


def _collate(vector: dict, version: str) -> dict:
    row = {k: np.asarray(v) for k, v in vector["row"].items()}
    out = collate_stored_rows([row], pack_size=vector["width"], pad_seq_to_mult=vector["m"], eos_id=vector["eos"],
                              pad_to_max_length=True, bridge_version=version)
    return {k: _plain(out[k]) for k in KEYS if k in out}


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"].split()[0] for v in VECTORS])
@pytest.mark.parametrize("version", ["0.6.2", "main"])
def test_collate_equals_upstreams_batch(vector, version):
    ours = _collate(vector, version)
    theirs = vector[version]
    assert ours == theirs, (vector["name"], version)


def test_the_versions_differ_where_the_pull_requests_say():
    by_name = {v["name"].split()[0]: v for v in VECTORS}
    # PR #5213: a supervised label after an EOS input is trained on main only (V3)
    v3 = by_name["V3"]
    assert _collate(v3, "0.6.2")["loss_mask"] != _collate(v3, "main")["loss_mask"]
    # PR #5610: the supervised terminal EOS counts as real on main (U2)
    u2 = by_name["U2"]
    assert _collate(u2, "0.6.2")["cu_seqlens_q"] == [[0, 3]] and _collate(u2, "main")["cu_seqlens_q"] == [[0, 4]]
    # PR #5470 / #5610: keys only main has
    for v in VECTORS:
        assert "padding_mask" not in _collate(v, "0.6.2") and "pad_between_seqs" not in _collate(v, "0.6.2")
        assert isinstance(_collate(v, "main")["pad_between_seqs"], bool)
    # the legacy template segment (V4) trains its EOS padding on main, not on 0.6.2
    v4 = by_name["V4"]
    assert sum(_collate(v4, "0.6.2")["loss_mask"][0]) == 2 and sum(_collate(v4, "main")["loss_mask"][0]) == 7


def test_a_wrong_rule_is_caught():
    """Negative control: the 0.6.2 rules do not reproduce main's batches (and vice versa)."""
    mismatched = [v["name"] for v in VECTORS if _collate(v, "0.6.2") != v["main"]]
    assert len(mismatched) == len(VECTORS)  # every vector differs at least in main's extra keys
    core = [v["name"] for v in VECTORS
            if {k: x for k, x in _collate(v, "0.6.2").items() if k in KEYS[:5]} !=
            {k: x for k, x in v["main"].items() if k in KEYS[:5]}]
    assert len(core) >= 3, core  # U2, V2, V3, V4 differ in loss or boundaries


def test_segments_follow_the_version_and_refuse_an_unknown_one():
    row = {"input_ids": [50, 51, 52, 2, 2, 2], "loss_mask": [0, 1, 1, 1, 1, 1], "seq_start_id": [0]}
    old = stored_row_segments(row, eos_id=2, pad_seq_to_mult=4)
    new = stored_row_segments(row, eos_id=2, pad_seq_to_mult=4, bridge_version="main")
    assert old[0]["loss_mask"].tolist() == [0, 1, 1, 0, 0] and old[0]["valid_length"] == 3
    assert new[0]["loss_mask"].tolist() == [0, 1, 1, 1, 1] and new[0]["valid_length"] == 5
    with pytest.raises(UsageError, match="0.6.2, main"):
        stored_row_segments(row, eos_id=2, pad_seq_to_mult=4, bridge_version="0.7")


# ------------------------------------------------------------------------------------------------
# PR #5737: Bridge main refuses a non-empty completion that keeps no supervised token


class _Silent:
    """The byte tokenizer, except that the text ``"~~"`` encodes to no token at all."""

    def __init__(self) -> None:
        from seqpack.data import ByteTokenizer

        self._inner = ByteTokenizer()

    def __getattr__(self, name):
        return getattr(self._inner, name)

    encode_batch_flat = None  # text by text, through encode below

    def encode(self, text: str) -> list[int]:
        return [] if text.strip() == "~~" else self._inner.encode(text)

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]


def test_main_refuses_a_completion_left_without_supervision(write_jsonl, tmp_path):
    from seqpack.core.errors import InputError
    from seqpack.data import PromptCompletionSchema
    from seqpack.packing.offline.prepare import prepare_packed_dataset

    rows = [{"prompt": "p", "completion": "fine"}, {"prompt": "a longer prompt", "completion": "~~"},
            {"prompt": "r", "completion": "also fine"}]
    path = write_jsonl(rows)
    schema = PromptCompletionSchema(add_eos=False)
    # 0.6.2 (the default): packed by Bridge with no trained label; seqpack skips and counts it
    res = prepare_packed_dataset(path, tmp_path / "a", pack_size=64, schema=schema, tokenizer=_Silent())
    acc = res.manifest["splits"]["training"]["accounting"]
    assert acc["packed"] == 2 and acc["skipped"]["no_supervised_tokens"]["count"] == 1
    # main: the row is refused, naming its line (PR #5737)
    with pytest.raises(InputError, match="#5737") as info:
        prepare_packed_dataset(path, tmp_path / "b", pack_size=64, schema=schema, tokenizer=_Silent(),
                               bridge_version="main")
    assert info.value.line == 2 and str(path) in str(info.value.file)
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").rglob("*.parquet"))
    # negative control: an empty completion (allowed, no EOS) is no refusal on main either (#5737 needs text)
    allow = PromptCompletionSchema(add_eos=False, allow_empty_completion=True, separator="")
    empty = write_jsonl([{"prompt": "p", "completion": "fine"}, {"prompt": "a longer prompt", "completion": ""}], name="e.jsonl")
    res = prepare_packed_dataset(empty, tmp_path / "c", pack_size=64, schema=allow, tokenizer=_Silent(),
                                 bridge_version="main")
    assert res.manifest["splits"]["training"]["accounting"]["skipped"]["no_supervised_tokens"]["count"] == 1
    # the default target keeps the packs' fingerprint; main is a different one
    same = prepare_packed_dataset(path, tmp_path / "d", pack_size=64, schema=schema, tokenizer=_Silent(),
                                  bridge_version="0.6.2")
    assert same.manifest["fingerprint"] == res_fingerprint(tmp_path / "a")


def res_fingerprint(root):
    import json as _json

    (manifest,) = list(root.rglob("manifest.json")) or list(root.rglob("*manifest*.json"))
    return _json.loads(manifest.read_text())["fingerprint"]

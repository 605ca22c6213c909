"""seqpack's offline preparation against Megatron-Bridge's own ``prepare_gpt_sft_packed_data``.

Bridge's ``data/packing/offline.py`` (with its ``algorithms.py``) is read from the snapshot and run
on the samples seqpack tokenizes (its dataset builder is replaced by one that hands over those
samples, which is the only part of Bridge not under test). Compared: the pre-padding (Bridge pads
with the tokenizer's EOD), the ``pad_seq_length_to_mult`` override in ``dataset_kwargs``, the packed
rows with ``--bridge-compat``, and appending to an existing metadata file. Skipped, with the
reason, when the snapshot is not on this machine.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from upstream_snapshots import BRIDGE, load_bridge_offline, mirror, skip_reason

from reference_impl.data import ByteTokenizer, PromptCompletionSchema, tokenize_row
from reference_impl.packing.offline import prepare_packed_dataset
from reference_impl.packing.parquet import PackedParquetReader

pytestmark = pytest.mark.slow

PACK = 256
OLD_ENTRY = {"dataset_max_seqlen": 100, "max_samples_per_bin": 3, "packing_factor": 2.5, "packing_efficiency": 90.1,
             "pack_size": 128, "min_packed_seqlen": 64}


class EodByteTokenizer(ByteTokenizer):
    """The byte tokenizer with an end-of-document id distinct from EOS (as Megatron's NullTokenizer has)."""

    eod_id = ByteTokenizer.PAD

    @property
    def eod(self) -> int:  # Bridge's name
        return self.eod_id


@pytest.fixture(scope="module")
def bridge():
    if mirror(BRIDGE) is None:
        pytest.skip(skip_reason(BRIDGE))
    return load_bridge_offline()


def _rows(n: int) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{"prompt": f"q{i} " + "p" * int(rng.integers(0, 120 if i % 9 else 400)),
             "completion": "c" * int(rng.integers(1, 80))} for i in range(n)]


class _Dataset:
    """What Bridge's builder returns, holding samples seqpack tokenized with Bridge's stored budget."""

    def __init__(self, rows, tokenizer, seq_length, dataset_kwargs):
        self.tokenizer = tokenizer
        self.pad_seq_length_to_mult = dataset_kwargs["pad_seq_length_to_mult"]
        self.items = []
        for row in rows:
            s = tokenize_row(row, PromptCompletionSchema(), tokenizer, max_length=seq_length)
            self.items.append({"input_ids": s.input_ids.tolist(), "loss_mask": s.loss_mask.tolist()})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return dict(self.items[i])


def _bridge_rows(bridge, rows, tmp_path, *, m, override, seed, tokenizer):
    meta = tmp_path / "bridge_meta.json"
    meta.write_text(json.dumps([OLD_ENTRY]))
    out = tmp_path / "bridge.npy"
    kwargs = {} if override is None else {"pad_seq_length_to_mult": override}
    bridge.prepare_gpt_sft_packed_data(
        input_path=tmp_path / "unused.jsonl", output_path=out, output_metadata_path=meta, packed_sequence_size=PACK,
        tokenizer=tokenizer, max_seq_length=PACK, seed=seed, packing_algorithm="first_fit_shuffle",
        dataset_kwargs=kwargs, pad_seq_to_mult=m, num_tokenizer_workers=1,
        dataset_builder=lambda path, tokenizer, seq_length, dataset_kwargs, **_: _Dataset(rows, tokenizer, seq_length,
                                                                                          dataset_kwargs),
    )
    packed = np.load(out, allow_pickle=True)
    return [{k: [int(v) for v in row[k]] for k in ("input_ids", "loss_mask", "seq_start_id")} for row in packed], \
        json.loads(meta.read_text())


@pytest.mark.parametrize("m, override, seed", [(4, None, 7), (4, 8, 11), (2, 16, 0)])
def test_bridge_compat_packs_and_appended_metadata_equal_bridges(bridge, write_jsonl, tmp_path, m, override, seed):
    rows = _rows(400)
    tok = EodByteTokenizer()
    expected, bridge_meta = _bridge_rows(bridge, rows, tmp_path, m=m, override=override, seed=seed, tokenizer=tok)
    ours_meta = tmp_path / "ours_meta.json"
    ours_meta.write_text(json.dumps([OLD_ENTRY]))
    res = prepare_packed_dataset(write_jsonl(rows), tmp_path / "out", pack_size=PACK, pad_seq_to_mult=m,
                                 pad_seq_length_to_mult=override, bridge_compat=True, algorithm="first_fit_shuffle",
                                 seed=seed, tokenizer=tok, metadata_path=ours_meta)
    reader = PackedParquetReader(res.files["training"])
    assert len(reader) == len(expected)
    for i, row in enumerate(expected):
        got = reader.row(i)
        assert got["input_ids"].tolist() == row["input_ids"], i
        assert got["loss_mask"].tolist() == row["loss_mask"], i
        assert got["seq_start_id"].tolist() == row["seq_start_id"], i
    assert json.loads(ours_meta.read_text()) == bridge_meta and len(bridge_meta) == 2
    assert tok.eod_id != tok.eos_id and any(tok.eod_id in r["input_ids"] for r in expected)  # EOD pre-padding ran
    assert res.manifest["tokenizer"]["eod_id"] == tok.eod_id


def test_bridge_ignores_the_override_without_pad_seq_to_mult(bridge, tmp_path):
    """Why seqpack refuses the override with bridge_compat and pad_seq_to_mult=1: Bridge does not pre-pad then."""
    rows = _rows(120)
    tok = EodByteTokenizer()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain, _ = _bridge_rows(bridge, rows, tmp_path / "a", m=1, override=None, seed=1, tokenizer=tok)
    with_override, _ = _bridge_rows(bridge, rows, tmp_path / "b", m=1, override=64, seed=1, tokenizer=tok)
    assert plain == with_override
    assert not any(tok.eod_id in r["input_ids"] for r in plain)

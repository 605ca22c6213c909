"""Packed readers against the released Megatron-Bridge (0.6.2), both directions, in the upstream lane.

Packs written by seqpack (``--bridge-compat`` and its own best-fit packs) and by Bridge's
``prepare_gpt_sft_packed_data`` are read by Bridge's ``GPTSFTPackedParquetDataset`` (built by its
``build_gpt_sft_split``) and by seqpack's ``PackedParquetDataset``, with every reader option
(``pad_to_max_length``, ``pad_cu_seqlens``, ``pad_seq_length_to_mult``, ``ceil_to_power_2``,
``return_cu_seqlen``, ``answer_only_loss``, ``max_num_samples``), including padding indices. Compared:

* every collated batch: seqpack's ``collate_bridge`` against Bridge's ``collate_fn`` (all keys,
  dtypes, shapes and values);
* every one-row batch as a micro-batch: seqpack's canonical ``collate`` and its
  ``PackedSeqParams`` fields against Bridge's batch and ``get_packed_seq_params``;
* the data order with ``max_num_samples`` (Bridge's samples mapping);
* ``seqpack inspect`` of Bridge's packs against the metadata Bridge wrote and its
  ``calculate_avg_seqlen`` (its verdict on what the reader trains: ``test_diff_inspect.py``).

What megatron-bridge 0.6.2's collate does, as these cases check: a segment's logical length ends at its
last input token that is not EOS (the rule before Bridge PR #5610, which keeps a supervised trailing
EOS on main), the batch has no ``padding_mask`` and no ``pad_between_seqs`` key (both Bridge main).
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from offline_lane_data import RECIPE_PC, fresh_dir, numeral_rows, read_rows, seqpack_pack, wordlevel, write_jsonl
from stable_strategies import booleans, integers, lists, sampled_from
from thd_lane import encode as plain

from seqpack.core.errors import SeqpackError
from seqpack.verbs.inspection import inspect_packed_dataset
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.packing.packed_dataset import PackedParquetDataset
from seqpack.training.packed_seq_params import packed_seq_params_kwargs
from seqpack_lane import differences as D

pytestmark = pytest.mark.slow

LANE = dict(derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
PARAM_FIELDS = ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
                "max_seqlen_q", "max_seqlen_kv", "total_tokens")


# ------------------------------------------------------------------------------------------------
# the packs: written by both sides


_PACKS: dict[str, list[dict]] = {}


def packs(upstream) -> list[dict]:
    """Packed files to read: ``{"name", "path", "metadata", "pack", "m", "writer", "bridge_compat"}``."""
    key = str(upstream.workdir)
    if key in _PACKS:
        return _PACKS[key]
    tok = wordlevel(upstream)
    out = []
    for k, (pack, m, algorithm, compat_mode) in enumerate([(64, 4, "first_fit_shuffle", True),
                                                            (64, 1, "first_fit_shuffle", True),
                                                            (96, 8, "best_fit_decreasing", False),
                                                            (48, 2, "first_fit_decreasing", True)]):
        folder = fresh_dir(upstream, "seqpack-pack")
        data = write_jsonl(folder, numeral_rows(300 + k, 30, prompt_max=pack, completion_max=pack // 3,
                                                long_every=6, long_len=2 * pack, eos_every=4))
        if compat_mode:
            res = seqpack_pack(data, folder / "out", tok.seqpack, pack_size=pack, max_seq_length=pack, m=m,
                               algorithm=algorithm, seed=k, pc=RECIPE_PC)
        else:
            from offline_lane_data import pc_schema

            res = prepare_packed_dataset(data, folder / "out", pack_size=pack, pad_seq_to_mult=m,
                                         schema=pc_schema(RECIPE_PC), tokenizer=tok.seqpack, algorithm=algorithm,
                                         seed=k)
        out.append({"name": f"seqpack {algorithm} P{pack} m{m}", "path": str(res.files["training"]),
                    "metadata": str(res.metadata_path), "pack": pack, "m": m, "writer": "seqpack",
                    "bridge_compat": compat_mode})
    cases = []
    for k, (pack, m, legacy) in enumerate([(64, 1, False), (64, 2, False), (128, 8, False), (64, 4, True)]):
        folder = fresh_dir(upstream, "bridge-pack")
        data = write_jsonl(folder, numeral_rows(400 + k, 30, prompt_max=pack, completion_max=pack // 3,
                                                long_every=6, long_len=2 * pack, eos_every=5))
        kwargs = {} if legacy else {"prompt_completion_config": RECIPE_PC}
        cases.append({"input_path": str(data), "output_path": str(folder / "training.idx.parquet"),
                      "output_metadata_path": str(folder / "metadata.json"), "packed_sequence_size": pack,
                      "tokenizer": tok.folder, "max_seq_length": pack, "seed": k, "pad_seq_to_mult": m,
                      "dataset_kwargs": kwargs})
        out.append({"name": f"Bridge P{pack} m{m}" + (" legacy template" if legacy else ""),
                    "path": cases[-1]["output_path"], "metadata": cases[-1]["output_metadata_path"], "pack": pack,
                    "m": m, "writer": "bridge", "bridge_compat": False, "data": str(data), "seed": k,
                    "legacy": legacy})
    for answer in upstream.call("offline.prepare", cases=cases):
        assert not answer["raises"], answer
    _PACKS[key] = out
    return out


# ------------------------------------------------------------------------------------------------
# comparing batches


def batch_difference(ours: dict, theirs: dict) -> str | None:
    """None when equal (keys, dtypes, shapes, values), else what differs first."""
    if set(ours) != set(theirs):
        return f"keys: seqpack only {sorted(set(ours) - set(theirs))}, Bridge only {sorted(set(theirs) - set(ours))}"
    for key in sorted(ours):
        a, b = plain(ours[key]), theirs[key]
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                return f"{key}: seqpack {a.get('__t__')}{a.get('s')} {a.get('d', [])[:24]} vs Bridge " \
                       f"{b.get('__t__')}{b.get('s')} {b.get('d', [])[:24]}"
            return f"{key}: seqpack {a} vs Bridge {b}"
    return None


def seqpack_dataset(pack: dict, opts: dict, pad_cu: bool, tok, **extra) -> PackedParquetDataset:
    """seqpack's reader of ``pack`` with Bridge's reader options ``opts`` (its dataset_kwargs)."""
    foreign = {} if pack["writer"] == "seqpack" else {"pack_size": pack["pack"], "pad_seq_to_mult": pack["m"],
                                                      "eos_id": tok.eos_id}
    return PackedParquetDataset(
        pack["path"], metadata=pack["metadata"], pad_to_max_length=opts.get("pad_to_max_length", False),
        pad_cu_seqlens=pad_cu, pad_seq_length_to_mult=opts.get("pad_seq_length_to_mult", 16),
        ceil_to_power_2=opts.get("ceil_to_power_2", False), return_cu_seqlen=opts.get("return_cu_seqlen", True),
        answer_only_loss=opts.get("answer_only_loss", True), max_num_samples=opts.get("max_num_samples"),
        seed=opts.get("seed", 1234), **foreign, **extra)


def compare_params(compat, ds, indices: list[int], theirs_batch: dict, theirs_params: dict, m: int, name: str) -> None:
    """The canonical micro-batch of one row and its PackedSeqParams fields against Bridge's."""
    canonical = ds.collate([ds[indices[0]]])
    ours = {k: plain(v) for k, v in packed_seq_params_kwargs(canonical).items() if k in PARAM_FIELDS}
    theirs = {k: theirs_params.get(k) for k in PARAM_FIELDS}
    rows_equal = all(plain(canonical[k]) == theirs_batch[k] or
                     plain(canonical[k].to(torch.int64)) == theirs_batch[k]
                     for k in ("tokens", "labels", "position_ids", "loss_mask"))
    if ours == theirs and rows_equal:
        compat.equal(D.READER_PARAMS)
        return
    # documented: with pad_seq_to_mult=1 Bridge counts the width padding as one more real sequence
    q = theirs["cu_seqlens_q"]["d"]
    end = int(canonical["cu_seqlens_q"][-1])  # where the real tokens end
    width_padding = m == 1 and theirs["cu_seqlens_q_padded"] is None and q[-1] > end
    if width_padding and rows_equal:
        assert ours["cu_seqlens_q_padded"]["d"] == q, (name, ours, theirs)
        assert ours["cu_seqlens_q"]["d"] == [min(v, end) for v in q], (name, ours, theirs)
        assert ours["max_seqlen_q"] == theirs["max_seqlen_q"]
        compat.by_design(D.READER_PARAMS, "readers-width-padding-sequence")
        return
    # documented: the canonical micro-batch carries padded boundaries only when they differ
    same_boundaries = m > 1 and ours["cu_seqlens_q_padded"] is None and theirs["cu_seqlens_q_padded"] is not None \
        and theirs["cu_seqlens_q_padded"]["d"] == q
    if same_boundaries and rows_equal and {k: v for k, v in ours.items() if "padded" not in k} == \
            {k: v for k, v in theirs.items() if "padded" not in k}:
        compat.by_design(D.READER_PARAMS, "readers-padded-boundaries-equal")
        return
    compat.check(D.READER_PARAMS, False, detail=f"{name} {indices}: seqpack {ours} vs Bridge {theirs}; rows equal "
                 f"{rows_equal}")


def run_reader_cases(upstream, compat, specs: list[dict]) -> None:
    """Collate every batch of every spec on both sides and report each batch (and micro-batch)."""
    tok = wordlevel(upstream)
    cases = []
    for spec in specs:
        pack = spec["pack"]
        cases.append({"path": pack["path"], "tokenizer": tok.folder, "seq_length": pack["pack"],
                      "packed_sequence_size": pack["pack"], "metadata_path": pack["metadata"],
                      "pad_cu_seqlens": spec["pad_cu_seqlens"], "pad_seq_to_mult": pack["m"],
                      "seed": spec["opts"].get("seed", 1234),
                      "dataset_kwargs": {k: v for k, v in spec["opts"].items() if k != "seed"},
                      "batches": spec["batches"], "params": True})
    answers = upstream.call("readers.collate", cases=cases)
    for spec, theirs in zip(specs, answers):
        pack, name = spec["pack"], f"{spec['pack']['name']} {spec['opts']} pad_cu={spec['pad_cu_seqlens']}"
        try:
            ds = seqpack_dataset(pack, spec["opts"], spec["pad_cu_seqlens"], tok, bridge_compat=True)
        except SeqpackError as err:
            compat.check(D.COLLATE, theirs["raises"], detail=f"{name}: seqpack refuses the reader ({err.message}), "
                         "Bridge builds it")
            continue
        if theirs["raises"]:  # Bridge refuses the reader itself: seqpack must refuse every batch
            for indices in spec["batches"]:
                with pytest.raises(SeqpackError):
                    ds.collate_bridge([ds[i] for i in indices])
            compat.equal(D.COLLATE)
            continue
        assert len(ds) == theirs["len"], name
        for indices, tb, tp in zip(spec["batches"], theirs["batches"], theirs["params"]):
            try:
                ob = ds.collate_bridge([ds[i] for i in indices])
            except SeqpackError as err:
                if not tb.get("raises") and err.__class__.__name__ == "AlignmentError" and \
                        not spec["opts"].get("pad_to_max_length") and spec["opts"].get("pad_seq_length_to_mult", 16) % pack["m"]:
                    compat.by_design(D.COLLATE, "readers-width-not-aligned")
                else:
                    compat.check(D.COLLATE, bool(tb.get("raises")), detail=f"{name} {indices}: seqpack raises "
                                 f"{err.message}; Bridge {tb.get('message', 'collates')}")
                continue
            if tb.get("raises"):
                compat.check(D.COLLATE, False, detail=f"{name} {indices}: Bridge raises {tb['message']}, seqpack collates")
                continue
            diff = batch_difference(ob, tb)
            compat.check(D.COLLATE, diff is None, detail=f"{name} {indices}: {diff}")
            if tp is not None and not tp.get("raises") and spec["opts"].get("return_cu_seqlen", True):
                compare_params(compat, ds, indices, tb, tp, pack["m"], name)
        ds.close()


# ------------------------------------------------------------------------------------------------
# property-based: every reader option on every pack


@st.composite
def reader_specs(draw, all_packs: list[dict]) -> dict:
    pack = draw(sampled_from(all_packs))
    fixed = draw(booleans())
    opts = {
        "pad_to_max_length": fixed,
        "pad_seq_length_to_mult": draw(sampled_from([1, 2, 3, 8, 16, 16, 64])),
        "ceil_to_power_2": draw(sampled_from([False, False, False, True])),
        "return_cu_seqlen": draw(sampled_from([True, True, True, True, False])),
        "answer_only_loss": draw(sampled_from([True, True, True, False])),
        "seed": draw(integers(0, 2**31 - 1)),
    }
    if draw(booleans()):
        opts["max_num_samples"] = draw(integers(1, 80))
    pad_cu = draw(sampled_from([False, False, fixed, fixed, True]))
    rows = 80  # an index range valid for every pack, folded into the real length below
    batches = draw(lists(lists(integers(-rows, rows - 1), 1, 4), 3, 6))
    return {"pack": pack, "opts": opts, "pad_cu_seqlens": pad_cu, "batches": batches}


def _fold(specs: list[dict], lengths: dict[str, int]) -> list[dict]:
    """Indices folded into each reader's length (negative ones stay padding indices)."""
    for spec in specs:
        n = spec["opts"].get("max_num_samples") or lengths[spec["pack"]["path"]]
        spec["batches"] = [[i % n if i >= 0 else -((-i - 1) % n) - 1 for i in b] for b in spec["batches"]]
    return specs


def _lengths(all_packs: list[dict]) -> dict[str, int]:
    from seqpack.packing.parquet import PackedParquetReader

    out = {}
    for pack in all_packs:
        reader = PackedParquetReader(pack["path"])
        out[pack["path"]] = len(reader)
        reader.close()
    return out


@pytest.fixture(scope="module")
def all_packs(upstream):
    return packs(upstream)


@settings(max_examples=16, **LANE)
@given(data=st.data())
def test_readers_equal_bridge_over_every_option(upstream, compat, all_packs, data):
    specs = data.draw(lists(reader_specs(all_packs), 8, 8))
    run_reader_cases(upstream, compat, _fold(specs, _lengths(all_packs)))


# ------------------------------------------------------------------------------------------------
# fixed cases


def test_fixed_reader_cases_on_every_pack(upstream, compat, all_packs):
    """Each pack with the recipe reader settings (fixed width, pad_cu_seqlens with the metadata) and with
    a free width, every row as a micro-batch, plus the whole pack as one collate call."""
    lengths = _lengths(all_packs)
    specs = []
    for pack in all_packs:
        n = lengths[pack["path"]]
        singles = [[i] for i in range(n)] + [[-1]]
        specs.append({"pack": pack, "opts": {"pad_to_max_length": True}, "pad_cu_seqlens": True, "batches": singles})
        specs.append({"pack": pack, "opts": {"pad_to_max_length": False}, "pad_cu_seqlens": False,
                      "batches": singles + [list(range(n))]})
    run_reader_cases(upstream, compat, specs)


def test_data_order_with_max_num_samples(upstream, compat, all_packs):
    """Bridge's samples mapping (global legacy RNG seeded with the dataset seed, one shuffle per epoch)
    against seqpack's: equal for --bridge-compat packs by default and for any pack with
    bridge_compat=True; seqpack's own order otherwise (documented)."""
    tok = wordlevel(upstream)
    cases, expect = [], []
    for pack in all_packs:
        for max_num_samples, seed in ((7, 0), (25, 1234), (80, 99), (3, 5)):
            cases.append({"path": pack["path"], "tokenizer": tok.folder, "seq_length": pack["pack"],
                          "packed_sequence_size": pack["pack"], "pad_seq_to_mult": pack["m"], "seed": seed,
                          "dataset_kwargs": {"max_num_samples": max_num_samples}, "batches": [[0], [-1]]})
            expect.append((pack, max_num_samples, seed))
    answers = upstream.call("readers.collate", cases=cases)
    for (pack, max_num_samples, seed), theirs in zip(expect, answers):
        assert not theirs["raises"], theirs
        opts = {"max_num_samples": max_num_samples, "seed": seed}
        compat_order = seqpack_dataset(pack, opts, False, tok, bridge_compat=True).mapping.tolist()
        compat.check(D.SAMPLES_MAPPING, compat_order == theirs["order"],
                     detail=f"{pack['name']} {opts}: {compat_order} vs {theirs['order']}")
        default = seqpack_dataset(pack, opts, False, tok)
        if default.bridge_compat:
            compat.check(D.SAMPLES_MAPPING, default.mapping.tolist() == theirs["order"], detail=pack["name"])
        elif default.mapping.tolist() != theirs["order"]:
            compat.by_design(D.SAMPLES_MAPPING, "readers-own-epoch-order")
        else:  # tiny mappings can coincide
            compat.equal(D.SAMPLES_MAPPING)
        # the padding index reads the last mapped row with its loss mask zeroed, on both sides
        assert theirs["batches"][1]["loss_mask"]["d"] == [0] * len(theirs["batches"][1]["loss_mask"]["d"])


def test_inspect_reports_bridges_metadata_and_averages_of_its_packs(upstream, compat, all_packs):
    """``seqpack inspect`` accepts Bridge's packs (no manifest: pack size and EOS given) and reports the
    metadata entry Bridge wrote for them and the inputs of its calculate_avg_seqlen."""
    tok = wordlevel(upstream)
    bridge_packs = [p for p in all_packs if p["writer"] == "bridge"]
    requests = [{"path": p["path"], "gbs": 1, "max_seq_len": p["pack"], "drop_remainder": False}
                for p in all_packs]
    averages = upstream.call("readers.statistics", cases=requests)
    for pack, theirs in zip(all_packs, averages):
        assert not theirs["raises"], theirs
        report = inspect_packed_dataset(pack["path"], pack_size=pack["pack"], eos_id=tok.eos_id)
        s = report.stats
        if pack.get("legacy"):  # Bridge's legacy template mode stores loss on every segment's last token (Q3),
            # which its reader never reads: usable (the count stays in the statistics)
            assert report.ok, report.issues
            assert s["loss_on_segment_end"] == s["segments"]
        else:
            assert report.ok and s["loss_on_segment_end"] == 0, report.issues
        ours = {"avg_seqlen_count": s["segments"] / s["rows"], "avg_seqlen_total": s["aligned_tokens"] / s["rows"],
                "avg_seqlen_sq_individual": s["segment_length"]["sum_of_squares"] / s["segments"],
                "avg_seqlen_sq_per_row": s["segment_length"]["sum_of_squares"] / s["rows"]}
        compat.check(D.AVG_SEQLEN, ours == {k: theirs[k] for k in ours}, detail=f"{pack['name']}: {ours} vs {theirs}")
        if pack in bridge_packs:
            written = json.loads(open(pack["metadata"]).read())
            compat.check(D.PREPARE, s["bridge_metadata"] == written[-1],
                         detail=f"{pack['name']}: inspect {s['bridge_metadata']} vs Bridge's metadata {written[-1]}")
            assert report.settings["from_manifest"] is False


def test_legacy_template_packs_collate_like_seqpacks(upstream, compat, all_packs):
    """The documented legacy-template mask difference (offline-legacy-template-mask) leaves the training
    batches unchanged: Bridge's collate of its legacy pack equals its collate of seqpack's pack of the same
    rows (same seed and options)."""
    tok = wordlevel(upstream)
    legacy = next(p for p in all_packs if p.get("legacy"))
    folder = fresh_dir(upstream, "legacy-twin")
    data = write_jsonl(folder, [json.loads(line) for line in open(legacy["data"])])
    res = seqpack_pack(data, folder / "out", tok.seqpack, pack_size=legacy["pack"], max_seq_length=legacy["pack"],
                       m=legacy["m"], algorithm="first_fit_shuffle", seed=legacy["seed"], pc=RECIPE_PC)
    rows = _lengths([legacy])[legacy["path"]]
    batches = [[i] for i in range(rows)] + [list(range(rows))]
    cases = [{"path": path, "tokenizer": tok.folder, "seq_length": legacy["pack"],
              "packed_sequence_size": legacy["pack"], "pad_seq_to_mult": legacy["m"], "metadata_path": meta,
              "pad_cu_seqlens": True, "dataset_kwargs": {"pad_to_max_length": True}, "batches": batches}
             for path, meta in ((legacy["path"], legacy["metadata"]), (str(res.files["training"]),
                                                                       str(res.metadata_path)))]
    theirs, ours = upstream.call("readers.collate", cases=cases)
    assert len(theirs["batches"]) == len(ours["batches"]) == rows + 1
    assert any(a != b for a, b in zip(read_rows(legacy["path"]), read_rows(res.files["training"])))  # masks differ
    for a, b in zip(theirs["batches"], ours["batches"]):
        assert a == b

"""Offline packing against the released Megatron-Bridge (0.6.2), running in the upstream lane.

Bridge's ``prepare_gpt_sft_packed_data`` runs with its own dataset builder (``build_gpt_sft_split``)
and a real Hugging Face tokenizer it loads itself; ``seqpack pack --bridge-compat`` (the library
call, and the CLI for the recipe-shaped cases) packs the same JSONL with the tokenizer loaded from
the same files. Compared per case: whether each side refuses, the stored rows (``input_ids``,
``loss_mask``, ``seq_start_id``) and the metadata file after the append. Bridge's bin-packing
functions are compared with ``seqpack.packing.offline.bridge_compat`` on the same lengths.

Cases are batched: one worker request per hypothesis example (several configurations each) and one
for the fixed cases. Every case is reported to ``compat``; a difference that
``lanes/upstream/seqpack_lane/differences.py`` does not document fails.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from offline_lane_data import (
    RECIPE_PC,
    bundle,
    english_rows,
    first_difference,
    fresh_dir,
    numeral_rows,
    read_rows,
    seqpack_pack,
    wordlevel,
    write_jsonl,
)
from stable_strategies import booleans, integers, lists, sampled_from

from seqpack.core.errors import SeqpackError
from seqpack.packing.offline.bridge_compat import (
    bridge_assign,
    bridge_pack_items,
    bridge_pack_samples,
    bridge_packing_strategy,
)
from seqpack_lane import differences as D

pytestmark = pytest.mark.slow

LANE = dict(derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
OLD_ENTRIES = [{"dataset_max_seqlen": 100, "max_samples_per_bin": 3, "packing_factor": 2.5, "packing_efficiency": 90.1,
                "pack_size": 128, "min_packed_seqlen": 64},
               {"dataset_max_seqlen": 7, "max_samples_per_bin": 9, "packing_factor": 4.0, "packing_efficiency": 50.0,
                "pack_size": 8, "min_packed_seqlen": 1}]


# ------------------------------------------------------------------------------------------------
# running one batch of preparation cases on both sides


def _bridge_case(folder, tok, spec: dict) -> dict:
    """Bridge's arguments for ``spec``; writes its input and the metadata file it appends to."""
    data = write_jsonl(folder, spec["rows"])
    case = {
        "input_path": str(data), "output_path": str(folder / "bridge.idx.parquet"),
        "output_metadata_path": str(folder / "bridge_metadata.json"), "packed_sequence_size": spec["pack"],
        "tokenizer": tok.folder, "eod": spec.get("eod"), "max_seq_length": spec["seq"], "seed": spec["seed"],
        "packing_algorithm": spec["algorithm"], "pad_seq_to_mult": spec["m"],
        "dataset_kwargs": dict(spec.get("dataset_kwargs") or {}),
    }
    if spec.get("pc") is not None:
        case["dataset_kwargs"]["prompt_completion_config"] = spec["pc"]
    if spec.get("override") is not None:
        case["dataset_kwargs"]["pad_seq_length_to_mult"] = spec["override"]
    for name in ("bridge_metadata.json", "seqpack_metadata.json"):
        if spec.get("existing") is not None:
            (folder / name).write_text(json.dumps(spec["existing"]))
    return case


def _seqpack_side(folder, case: dict, tok, spec: dict) -> dict:
    """seqpack's packs for the same input: ``{"raises"}`` or the rows and the appended metadata file."""
    seqpack_tok = spec.get("seqpack_tokenizer") or tok.seqpack
    pc = spec["pc"] if spec.get("pc") is not None else dict(RECIPE_PC)  # legacy rows are read as input/output
    try:
        res = seqpack_pack(folder / "data.jsonl", folder / "seqpack", seqpack_tok, pack_size=spec["pack"],
                           max_seq_length=spec["seq"], m=spec["m"], algorithm=spec["algorithm"], seed=spec["seed"],
                           pc=pc, override=spec.get("override"), metadata_path=folder / "seqpack_metadata.json")
    except SeqpackError as err:
        return {"raises": True, "type": type(err).__name__, "message": err.message, "rule_id": err.rule_id}
    return {"raises": False, "rows": read_rows(res.files["training"]), "result": res,
            "metadata": json.loads((folder / "seqpack_metadata.json").read_text())}


def run_prepare_cases(upstream, tok, specs: list[dict]) -> list[tuple[dict, dict, dict]]:
    """(spec, Bridge's answer with its rows, seqpack's answer) per spec, with one worker request."""
    folders = [fresh_dir(upstream, "prep") for _ in specs]
    cases = [_bridge_case(f, tok, s) for f, s in zip(folders, specs)]
    answers = upstream.call("offline.prepare", cases=cases)
    out = []
    for folder, case, spec, theirs in zip(folders, cases, specs, answers):
        if not theirs["raises"]:
            theirs["rows"] = read_rows(case["output_path"])
        out.append((spec, theirs, _seqpack_side(folder, case, tok, spec)))
    return out


def outcome(theirs: dict, ours: dict) -> tuple[bool, str]:
    """Equal when both refuse, or both pack the same rows and leave the same metadata file."""
    if theirs["raises"] or ours["raises"]:
        same = theirs["raises"] and ours["raises"]
        return same, f"Bridge raises: {theirs.get('type')} {theirs.get('message', '')[:200]}; seqpack raises: " \
                     f"{ours.get('type')} {ours.get('message', '')[:200]}"
    if ours["rows"] != theirs["rows"]:
        return False, first_difference(ours["rows"], theirs["rows"])
    if ours["metadata"] != theirs["metadata"]:
        return False, f"metadata: seqpack {ours['metadata']} vs Bridge {theirs['metadata']}"
    return True, "equal"


def report(compat, results, function=D.PREPARE) -> None:
    """One case per spec: equal, or the difference the spec names (which must then be what happens)."""
    for spec, theirs, ours in results:
        equal, detail = outcome(theirs, ours)
        expected = spec.get("difference")
        if expected is None:
            compat.check(function, equal, detail=f"{spec.get('name', spec)}: {detail}")
            continue
        assert not equal, f"{spec['name']}: expected difference {expected} but both sides agree"
        spec["check"](theirs, ours)
        compat.by_design(function, expected)


# ------------------------------------------------------------------------------------------------
# property-based: every option of the preparation on generated data


@st.composite
def prepare_specs(draw) -> dict:
    pack = draw(sampled_from([32, 48, 64, 96, 128]))
    m = draw(sampled_from([k for k in (1, 2, 4, 8) if pack % k == 0]))
    seq = pack if draw(booleans()) else draw(integers(max(m, 12), pack))
    pc = {
        "prompt_column": "input", "completion_column": "output",
        "prompt_template": draw(sampled_from(["{prompt}", "Q: {prompt} A:", "Question: {prompt}"])),
        "separator": draw(sampled_from([" ", ""])),
        "loss_mode": draw(sampled_from(["completion", "completion", "full"])),
        "strip_whitespace": draw(booleans()),
        "add_bos": draw(booleans()),
        "add_eos": draw(sampled_from([True, True, True, False])),
        "truncation_method": draw(sampled_from(["right", "right", "left"])),
    }
    specials = int(pc["add_bos"]) + int(pc["add_eos"])
    rows = numeral_rows(
        draw(integers(0, 10**6)), draw(integers(3, 36)),
        prompt_max=draw(sampled_from([0, 4, pack // 2, pack, 2 * pack])),
        completion_max=draw(integers(1, pack // 2)), completion_min=1 if specials else 2,
        long_every=draw(sampled_from([0, 0, 5])), long_len=2 * pack, eos_every=draw(sampled_from([0, 0, 3])),
    )
    return {
        "pack": pack, "m": m, "seq": seq, "pc": pc, "rows": rows,
        "algorithm": draw(sampled_from(["first_fit_shuffle", "first_fit_shuffle", "first_fit_decreasing"])),
        "seed": draw(integers(0, 2**32 - 1)),
        "override": None if m == 1 else draw(sampled_from([None, None, 2 * m, 4 * m])),
        "existing": draw(sampled_from([None, [], OLD_ENTRIES[:1], OLD_ENTRIES])),
    }


@settings(max_examples=18, **LANE)
@given(lists(prepare_specs(), 6, 6))
def test_prepare_equals_bridge_over_every_option(upstream, compat, specs):
    """Algorithm, seed, pad_seq_to_mult, per-sample cap and truncation (samples longer than the pack),
    EOD pre-padding, the pad_seq_length_to_mult override, prompt template, separator, loss mode, BOS/EOS,
    whitespace stripping and the metadata append, on the tiny WordLevel tokenizer."""
    tok = wordlevel(upstream)
    report(compat, run_prepare_cases(upstream, tok, specs))


# ------------------------------------------------------------------------------------------------
# fixed cases: a real tokenizer bundle, the documented differences, refusals


def _legacy_mask_check(tok):
    def check(theirs, ours):
        assert len(theirs["rows"]) == len(ours["rows"])
        for t, o in zip(theirs["rows"], ours["rows"]):
            assert t["input_ids"] == o["input_ids"] and t["seq_start_id"] == o["seq_start_id"]
            ends = {s - 1 for s in t["seq_start_id"][1:]} | {len(t["input_ids"]) - 1}
            starts = set(t["seq_start_id"])
            for i, (a, b) in enumerate(zip(t["loss_mask"], o["loss_mask"])):
                # Bridge's derived mask is 1 on every segment's last token (no label) and on the
                # pre-padding after the EOS (also EOS-valued ids); seqpack's explicit mask is 0 there
                pad = t["input_ids"][i] == tok.eos_id and i not in starts
                assert a == b or (a == 1 and b == 0 and (i in ends or pad)), i
        assert theirs["metadata"] == ours["metadata"]
    return check


def _refused_by(rule_id=None):
    """seqpack refuses the configuration; Bridge packs."""
    def check(theirs, ours):
        assert ours["raises"] and not theirs["raises"], (theirs, ours)
        if rule_id is not None:
            assert ours["rule_id"] == rule_id, ours
    return check


def _skipped(reason: str):
    def check(theirs, ours):
        assert not ours["raises"], ours
        accounting = ours["result"].splits["training"]["accounting"]
        assert accounting["skipped"][reason]["count"] >= 1, accounting
        if theirs["raises"]:
            assert theirs["type"] == "ValueError", theirs
        else:
            assert len(theirs["rows"]) >= len(ours["rows"])
    return check


def _special_token_check(special_id: int):
    def check(theirs, ours):
        for t, o in zip(theirs["rows"], ours["rows"]):
            assert t["input_ids"] == o["input_ids"]
            for i, (a, b) in enumerate(zip(t["loss_mask"], o["loss_mask"])):
                # the rolled mask at i supervises token i + 1
                assert a == b or (a == 0 and b == 1 and t["input_ids"][i + 1] == special_id), i
    return check


def fixed_specs(tok, qwen) -> list[dict]:
    base = {"pack": 64, "m": 4, "seq": 64, "algorithm": "first_fit_shuffle", "seed": 7, "pc": dict(RECIPE_PC)}
    rows = numeral_rows(11, 40, prompt_max=80, completion_max=20)
    specs = [
        dict(base, name="recipe defaults, samples longer than the pack", rows=rows),
        dict(base, name="first_fit_decreasing, m=8", m=8, algorithm="first_fit_decreasing", rows=rows),
        dict(base, name="pad_seq_to_mult=1, budget S-1", m=1, rows=rows),
        dict(base, name="cap not a multiple of m (head cut)", seq=50, rows=rows),
        dict(base, name="override 16", override=16, rows=rows, existing=OLD_ENTRIES),
        dict(base, name="EOD distinct from EOS", rows=rows, eod=tok.bridge["pad_id"],
             seqpack_tokenizer=_with_eod(tok.seqpack, tok.bridge["pad_id"])),
        dict(base, name="legacy template", pc=None, rows=rows, difference="offline-legacy-template-mask",
             check=_legacy_mask_check(tok)),
        dict(base, name="legacy template, m=1", pc=None, m=1, rows=rows, difference="offline-legacy-template-mask",
             check=_legacy_mask_check(tok)),
        dict(base, name="override with m=1", m=1, override=8, rows=rows, difference="offline-override-without-multiple",
             check=_refused_by()),
        dict(base, name="override not a multiple of m", override=6, rows=rows,
             difference="offline-override-not-multiple", check=_refused_by("PACK-OFFLINE-PAD-MULT-TOPOLOGY")),
        dict(base, name="max_seq_length above the pack, no long sample", seq=96,
             rows=numeral_rows(3, 20, prompt_max=20, completion_max=10), difference="offline-seq-length-above-pack",
             check=_refused_by("PACK-OFFLINE-MAX-SINGLE-LE-PACK")),
        dict(base, name="max_seq_length above the pack, long samples: both refuse", seq=96, rows=rows),
        dict(base, name="one-token sample", pc=dict(RECIPE_PC, add_eos=False),
             rows=numeral_rows(5, 12, prompt_max=6, completion_max=4) + [{"input": "", "output": "7"}],
             difference="offline-short-sample", check=_skipped("too_short")),
        dict(base, name="unsupervised sample", pc=dict(RECIPE_PC, add_eos=False),
             rows=numeral_rows(5, 12, prompt_max=6, completion_max=4) + [{"input": "1 2 3", "output": ""}],
             difference="offline-unsupervised-sample", check=_skipped("no_supervised_tokens")),
        dict(base, name="metadata file that is not a list: both refuse", rows=rows, existing={"not": "a list"}),
    ]
    if qwen is not None:
        english = english_rows(5, 30, max_words=60)
        qbase = dict(base, pack=128, seq=128, rows=english)
        im_start = qwen.seqpack.backend.token_to_id("<|im_start|>")
        specs += [
            dict(qbase, name="qwen3, m=4", tokenizer=qwen),
            dict(qbase, name="qwen3, m=1, first_fit_decreasing", m=1, algorithm="first_fit_decreasing",
                 tokenizer=qwen),
            dict(qbase, name="qwen3, m=8, override 32, cap 100", m=8, seq=100, override=32, tokenizer=qwen),
            dict(qbase, name="qwen3, legacy template", pc=None, tokenizer=qwen,
                 difference="offline-legacy-template-mask", check=_legacy_mask_check(qwen)),
            dict(qbase, name="qwen3, special token in a completion", tokenizer=qwen,
                 rows=english[:10] + [{"input": "say it", "output": "the <|im_start|> cat"}],
                 difference="offline-special-token-loss", check=_special_token_check(im_start)),
        ]
    return specs


def _with_eod(tokenizer, eod: int):
    """seqpack's tokenizer object with a distinct end-of-document id (pre-padding uses ``eod_id``)."""
    import copy

    out = copy.copy(tokenizer)
    object.__setattr__(out, "eod_id", eod)
    return out


def test_fixed_cases_real_bundle_and_documented_differences(upstream, compat):
    tok = wordlevel(upstream)
    try:
        qwen = bundle(upstream, "qwen3")
    except pytest.skip.Exception:
        qwen = None
    specs = fixed_specs(tok, qwen)
    by_tok: dict[str, list[dict]] = {}
    for spec in specs:
        by_tok.setdefault(spec.get("tokenizer", tok).folder, []).append(spec)
    results = {}
    for group in by_tok.values():
        done = run_prepare_cases(upstream, group[0].get("tokenizer", tok), group)
        report(compat, done)
        results.update({spec["name"]: (theirs, ours) for spec, theirs, ours in done})
    # the distinct EOD pre-pads (and the manifest records it); Bridge fills the packs' ends with EOS
    theirs, ours = results["EOD distinct from EOS"]
    eod = tok.bridge["pad_id"]
    assert eod != tok.eos_id and any(eod in row["input_ids"] for row in theirs["rows"])
    assert ours["result"].manifest["tokenizer"]["eod_id"] == eod
    # why seqpack refuses the override with pad_seq_to_mult=1: Bridge's packs are those without it
    assert results["override with m=1"][0]["rows"] == results["pad_seq_to_mult=1, budget S-1"][0]["rows"]
    if qwen is None:
        pytest.skip("qwen3 bundle absent: the real-tokenizer cases did not run (run scripts/fetch_tokenizers.py)")


# ------------------------------------------------------------------------------------------------
# the CLI and the recipe-shaped builder


def test_cli_and_builder_with_validation_split_equal_bridge(upstream, compat, capsys):
    """``seqpack pack --bridge-compat --validation`` against ``GPTSFTDatasetBuilder.prepare_data`` of a
    recipe-shaped ``GPTSFTDatasetConfig`` (input/output columns, separator " ", PackedSequenceSpecs):
    both splits' rows and the metadata file with its two entries."""
    from seqpack.faces.cli import main

    tok = wordlevel(upstream)
    cases, expected = [], []
    for k, (pack, m, seq, seed) in enumerate([(64, 4, None, 5678), (96, 8, 90, 1), (64, 1, None, 42), (128, 2, 100, 3)]):
        root = fresh_dir(upstream, "builder")
        train = numeral_rows(100 + k, 40, prompt_max=pack, completion_max=pack // 3, long_every=7, long_len=2 * pack)
        valid = numeral_rows(200 + k, 12, prompt_max=pack // 2, completion_max=pack // 4)
        write_jsonl(root, train, "training.jsonl")
        write_jsonl(root, valid, "validation.jsonl")
        specs = {"packed_sequence_size": pack, "pad_seq_to_mult": m}
        if seq is not None:
            specs["max_single_sequence_length"] = seq
        cases.append({"dataset_root": str(root), "tokenizer": tok.folder, "seq_length": pack, "seed": seed,
                      "preprocessing": dict(RECIPE_PC), "specs": specs})
        expected.append((root, pack, m, seq, seed))
    answers = upstream.call("offline.builder_prepare", cases=cases)
    for (root, pack, m, seq, seed), theirs in zip(expected, answers):
        assert not theirs["raises"], theirs
        meta = root / "seqpack_metadata.json"
        argv = ["pack", str(root / "training.jsonl"), "--validation", str(root / "validation.jsonl"),
                "--out", str(root / "seqpack"), "--pack-size", str(pack), "--pad-seq-to-mult", str(m),
                "--tokenizer", tok.folder, "--prompt-column", "input", "--completion-column", "output",
                "--algorithm", "first_fit_shuffle", "--seed", str(seed), "--bridge-compat",
                "--metadata-path", str(meta), "--json", "--no-progress"]
        if seq is not None:
            argv += ["--max-seq-length", str(seq)]
        capsys.readouterr()
        assert main(argv) == 0
        files = json.loads(capsys.readouterr().out)["files"]
        ours = {split: read_rows(files[split]) for split in ("training", "validation")}
        same = all(ours[s] == read_rows(theirs[s]) for s in ours)
        detail = "; ".join(f"{s}: {first_difference(ours[s], read_rows(theirs[s]))}" for s in ours)
        compat.check(D.BUILDER_PREPARE, same, detail=detail)
        compat.check(D.BUILDER_PREPARE, json.loads(meta.read_text()) == theirs["metadata"],
                     detail=f"metadata: {json.loads(meta.read_text())} vs {theirs['metadata']}")
        assert len(theirs["metadata"]) == 2
    # Bridge's pack cache key leaves out the input's content: an edited training.jsonl reuses the stale pack
    root, first = expected[0][0], answers[0]
    before = read_rows(first["training"])
    write_jsonl(root, numeral_rows(999, 40, prompt_max=20, completion_max=5), "training.jsonl")
    again = upstream.call("offline.builder_prepare", cases=cases[:1])[0]
    assert again["training"] == first["training"] and read_rows(again["training"]) == before


# ------------------------------------------------------------------------------------------------
# the bin-packing functions


length_lists = lists(integers(0, 90), 0, 60)


@settings(max_examples=40, **LANE)
@given(lists(st.tuples(length_lists, sampled_from([0, 1, 7, 32, 64]), integers(0, 2**32 - 1)),
                min_size=8, max_size=8))
def test_first_fit_family_equals_bridge(upstream, compat, cases):
    """first_fit / first_fit_decreasing (zero lengths, items over the pack size, pack size 0) and
    first_fit_shuffle (its seed), as bins of lengths; bridge_pack_items on payloads."""
    requests, ours = [], []
    for lengths, pack, seed in cases:
        for fn in ("first_fit", "first_fit_decreasing"):
            requests.append({"fn": fn, "seqlens": lengths, "pack_size": pack})
            ours.append((D.FIRST_FIT if fn == "first_fit" else D.FIRST_FIT_DECREASING,
                         [[lengths[i] for i in b] for b in bridge_assign(lengths, pack, fn)]))
        if pack > 0:
            requests.append({"fn": "first_fit_shuffle", "seqlens": lengths, "pack_size": pack, "seed": seed})
            ours.append((D.FIRST_FIT_SHUFFLE,
                         [[lengths[i] for i in b] for b in bridge_assign(lengths, pack, "first_fit_shuffle", rng=seed)]))
    answers = upstream.call("offline.algorithms", cases=requests)
    for request, (function, bins), theirs in zip(requests, ours, answers):
        assert not theirs["raises"], theirs
        compat.check(function, bins == theirs["bins"], detail=f"{request}: {bins} vs {theirs['bins']}")
        if function != D.FIRST_FIT_SHUFFLE:  # payload form: the items are their own lengths
            assert bridge_pack_items(request["seqlens"], request["pack_size"], request["fn"]) == theirs["bins"]


@settings(max_examples=25, **LANE)
@given(lists(st.tuples(lists(integers(0, 12), 1, 50), sampled_from([16, 40, 64]),
                          sampled_from([None, "first_fit", "first_fit_decreasing", "first_fit_shuffle"]),
                          integers(0, 2**32 - 1)),
                min_size=4, max_size=4))
def test_packing_strategy_equals_bridge(upstream, compat, cases):
    """create_packing_strategy from a histogram (Bridge's default algorithm when none is given; its
    metadata and rounding), and an empty histogram or pack size 0, which both sides refuse."""
    requests = []
    for hist, pack, algorithm, seed in cases:
        requests.append({"fn": "create_packing_strategy", "histogram": hist, "pack_size": pack, "algorithm": algorithm,
                         "seed": seed})
    requests.append({"fn": "create_packing_strategy", "histogram": [0, 2, 1], "pack_size": 0})
    requests.append({"fn": "create_packing_strategy", "histogram": [0, 0], "pack_size": 8})
    answers = upstream.call("offline.algorithms", cases=requests)
    for request, theirs in zip(requests, answers):
        args = {} if request.get("algorithm") is None else {"algorithm": request["algorithm"]}
        try:
            bins, metadata = bridge_packing_strategy(request["histogram"], request["pack_size"],
                                                     rng=request.get("seed", 0), **args)
        except SeqpackError as err:
            compat.check(D.PACKING_STRATEGY, theirs["raises"], detail=f"{request}: seqpack refuses ({err.message}), "
                         f"Bridge gives {theirs}")
            continue
        assert not theirs["raises"], (request, theirs)
        compat.check(D.PACKING_STRATEGY, (bins, metadata) == (theirs["bins"], theirs["metadata"]),
                     detail=f"{request}: {bins, metadata} vs {theirs}")


@settings(max_examples=25, **LANE)
@given(lists(st.tuples(lists(integers(0, 40), 1, 120), sampled_from([40, 64]),
                          sampled_from(["first_fit_shuffle", "first_fit_decreasing"]), integers(0, 2**32 - 1)),
                min_size=4, max_size=4))
def test_histogram_strategy_and_fill_equal_bridge(upstream, compat, cases):
    """create_hist + create_packing_strategy + fill_packing_strategy on one seeded stream, as the
    preparation runs them: which sample lands in which row, in which order, and the metadata."""
    requests = [{"fn": "pack_and_fill", "lengths": lengths, "pack_size": pack, "algorithm": algorithm, "seed": seed}
                for lengths, pack, algorithm, seed in cases]
    answers = upstream.call("offline.algorithms", cases=requests)
    for request, theirs in zip(requests, answers):
        assert not theirs["raises"], theirs
        ours = bridge_pack_samples(request["lengths"], request["pack_size"], seed=request["seed"],
                                   algorithm=request["algorithm"])
        compat.check(D.FILL_STRATEGY, (ours.sample_bins, ours.metadata) == (theirs["rows"], theirs["metadata"]),
                     detail=f"{request}: {ours.sample_bins[:3]} vs {theirs['rows'][:3]}")


def test_long_sample_within_the_cut_off_crashes_bridges_fill_and_seqpack_refuses_it(upstream, compat):
    """A kept sample longer than the pack (max_seq_length above the pack size): Bridge's fill step raises
    KeyError; seqpack's bridge_pack_samples refuses it with the sample named."""
    lengths = [5, 70, 9, 12]
    theirs = upstream.call("offline.algorithms", cases=[{"fn": "pack_and_fill", "lengths": lengths, "pack_size": 64,
                                                         "max_seq_length": 80, "algorithm": "first_fit_shuffle",
                                                         "seed": 1}])[0]
    assert theirs["raises"] and theirs["type"] == "KeyError", theirs
    with pytest.raises(SeqpackError, match="longer than the pack size") as info:
        bridge_pack_samples(lengths, 64, seed=1, max_seq_length=80)
    assert info.value.row == 1
    compat.equal(D.FILL_STRATEGY)  # both refuse

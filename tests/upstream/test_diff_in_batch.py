"""seqpack's THD builder and in-batch collator against Megatron-Bridge 0.6.2's, running in the lane.

Compared functions: ``build_mcore_thd_sequence_batch_from_rows`` and
``pack_right_padded_sequence_batch_to_mcore_thd`` (``megatron.bridge.data.packing.in_batch``) vs
``packing.thd.build_thd_batch`` and ``packing.thd_collate.right_padded_to_thd``, over every option
they share (alignment multiple, per-row length cap, pad token and label, extra per-token keys with
their pad values, given position ids, attention masks, error inputs); and
``text_prompt_completion_collate_fn(..., enable_in_batch_packing=True)`` vs seqpack's
prompt/completion tokenization and ``InBatchPackingCollator`` on the same examples and tokenizer.

Representation, not difference: Bridge's ``max_seqlen_*`` are 0-d int32 tensors (ints here), its
token key may be ``input_ids`` (``tokens`` here), it adds ``total_tokens`` (compared with the
width) and ``attention_mask=None``; seqpack adds ``padding_mask`` (compared with the mask the
boundaries imply, Megatron-Core's rule: a position is padding when it lies past its sequence's
real tokens).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.core.errors import SeqpackError
from seqpack.packing.in_batch import InBatchPackingCollator
from seqpack.packing.thd import build_thd_batch, padding_mask_from_lengths
from seqpack.packing.thd_collate import right_padded_to_thd
from seqpack_lane.differences import BRIDGE_PC_COLLATE, BRIDGE_RIGHT_PADDED, BRIDGE_ROWS
from tests.upstream.thd_lane import as_int, ask, same_tensor, upstream_raised

pytestmark = pytest.mark.slow

SETTINGS = dict(derandomize=True, database=None, deadline=None)
EXTRA_KEYS = ("token_type_ids", "vision_token_mask")


# ------------------------------------------------------------------------------------------------
# comparison of a Bridge THD batch with seqpack's canonical batch


def _boundaries(batch: dict, key: str) -> torch.Tensor | None:
    value = batch.get(key)
    return None if value is None else value.reshape(-1)


def compare_thd(bridge: dict, ours: dict, *, token_key: str, extras: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """(differences, padded pair written by Bridge only because pad_to_multiple_of > 1)."""
    diffs = []
    for theirs, mine in ((token_key, "tokens"), ("labels", "labels"), ("loss_mask", "loss_mask"),
                         ("position_ids", "position_ids"), *((k, k) for k in extras)):
        why = same_tensor(bridge.get(theirs), ours.get(mine))
        if why:
            diffs.append(f"{mine}: {why}")
    for key in ("cu_seqlens_q", "cu_seqlens_kv"):
        why = same_tensor(bridge.get(key), ours.get(key))
        if why:
            diffs.append(f"{key}: {why}")
    padded_only_upstream = False
    for key, real in (("cu_seqlens_q_padded", "cu_seqlens_q"), ("cu_seqlens_kv_padded", "cu_seqlens_kv")):
        if key in ours:
            why = same_tensor(bridge.get(key), ours[key])
            if why:
                diffs.append(f"{key}: {why}")
        elif bridge.get(key) is not None:
            if torch.equal(bridge[key], bridge[real]):
                padded_only_upstream = True
            else:
                diffs.append(f"{key}: Bridge has padded boundaries {bridge[key].tolist()}, seqpack none")
    for key in ("max_seqlen_q", "max_seqlen_kv"):
        if as_int(bridge.get(key)) != ours[key]:
            diffs.append(f"{key}: {bridge.get(key)} != {ours[key]}")
    width = int(ours["tokens"].shape[1])
    if bridge.get("total_tokens") != width:
        diffs.append(f"total_tokens {bridge.get('total_tokens')} != width {width}")
    if bridge.get("attention_mask") is not None:
        diffs.append("Bridge attention_mask is not None")
    cu = _boundaries(bridge, "cu_seqlens_q")
    padded = _boundaries(bridge, "cu_seqlens_q_padded")
    padded = cu if padded is None else padded
    if cu is not None:
        implied = padding_mask_from_lengths(padded[:-1].numpy(), np.diff(cu.numpy()), width)
        if not np.array_equal(implied, ours["padding_mask"][0].numpy()):
            diffs.append("padding_mask differs from the mask Bridge's boundaries imply")
    return diffs, padded_only_upstream


def record(compat, function: str, bridge_answer: dict, ours, *, token_key: str, extras=(),
           ours_error: SeqpackError | None = None, known_error: str | None = None, suffix: str = "") -> None:
    """One case: both raise (equal), or the batches compare equal or by the documented differences."""
    if upstream_raised(bridge_answer) or ours_error is not None:
        both = upstream_raised(bridge_answer) and ours_error is not None
        compat.check(function, both, difference=known_error,
                     detail=f"Bridge: {bridge_answer.get('type')}: {bridge_answer.get('message')}; seqpack: {ours_error!r}")
        return
    diffs, padded_only_upstream = compare_thd(bridge_answer["batch"], ours, token_key=token_key, extras=extras)
    if diffs:
        compat.check(function, False, detail="; ".join(diffs))
    elif padded_only_upstream:
        compat.by_design(function, f"thd-padded-keys-only-when-different{suffix}")
    else:
        compat.equal(function)


# ------------------------------------------------------------------------------------------------
# build_mcore_thd_sequence_batch_from_rows vs build_thd_batch


@st.composite
def row_cases(draw) -> dict:
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    m = draw(st.sampled_from([1, 1, 2, 3, 4, 8, 16]))
    extras = draw(st.lists(st.sampled_from(EXTRA_KEYS), max_size=2, unique=True))
    positions = draw(st.sampled_from(["arange", "offset", "random"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))  # values from a seed: little entropy per case
    rows = []
    for u in lengths:
        row = {
            "input_ids": rng.integers(0, 61, u).tolist(),
            "labels": rng.integers(-100, 61, u).tolist(),
            "loss_mask": rng.choice([0.0, 1.0, 1.0, 0.5], u).tolist(),
        }
        if positions == "arange":
            row["position_ids"] = list(range(u))
        elif positions == "offset":
            start = int(rng.integers(0, 101))
            row["position_ids"] = list(range(start, start + u))
        else:
            row["position_ids"] = rng.integers(0, 501, u).tolist()
        for key in extras:
            row[key] = rng.integers(0, 4, u).tolist()
        rows.append(row)
    cap = draw(st.sampled_from([None, None, max(lengths), max(lengths) + 3, max(1, max(lengths) - 1)]))
    return {
        "rows": rows, "extras": {k: draw(st.integers(-1, 9)) for k in extras},
        "sequence_length": cap, "pad_to_multiple_of": m,
        "pad_token_id": draw(st.integers(0, 5)), "ignore_index": draw(st.sampled_from([-100, -1])),
        "attention_mask": draw(st.booleans()),
    }


def _tensor_rows(case: dict) -> list[dict]:
    dtypes = {"input_ids": torch.int64, "labels": torch.int64, "loss_mask": torch.float32, "position_ids": torch.int64}
    out = []
    for row in case["rows"]:
        t = {k: torch.tensor(v, dtype=dtypes.get(k, torch.int64)) for k, v in row.items()}
        if case.get("attention_mask"):
            t["attention_mask"] = torch.ones(len(row["input_ids"]), dtype=torch.int64)
        out.append(t)
    return out


def _bridge_row_case(case: dict, rows: list[dict]) -> dict:
    kwargs = {"token_key": "input_ids", "sequence_length": case["sequence_length"],
              "pad_token_id": case["pad_token_id"], "ignore_index": case["ignore_index"],
              "pad_to_multiple_of": case["pad_to_multiple_of"], "sequence_tensor_pad_values": case["extras"] or None}
    return {"rows": rows, "kwargs": kwargs}


def _ours_rows(case: dict, rows: list[dict]):
    mine = [{("tokens" if k == "input_ids" else k): v for k, v in r.items()} for r in rows]
    try:
        return build_thd_batch(mine, pad_seq_to_mult=case["pad_to_multiple_of"], max_row_length=case["sequence_length"],
                               pad_token_id=case["pad_token_id"], label_pad_id=case["ignore_index"],
                               extra_pad_values=case["extras"] or None), None
    except SeqpackError as err:
        return None, err


@settings(max_examples=12, **SETTINGS)
@given(st.lists(row_cases(), min_size=20, max_size=20))
def test_row_builder_equals_bridges(upstream, compat, cases):
    tensor_rows = [_tensor_rows(c) for c in cases]
    answers = ask(upstream, "in_batch.rows", [_bridge_row_case(c, r) for c, r in zip(cases, tensor_rows)])
    for case, rows, answer in zip(cases, tensor_rows, answers):
        ours, err = _ours_rows(case, rows)
        record(compat, BRIDGE_ROWS, answer, ours, token_key="input_ids", extras=tuple(case["extras"]), ours_error=err)


def _fixed_row_cases() -> list[tuple[str, dict, list[dict], str | None]]:
    """(name, case, rows, documented difference or None) for inputs the property cases do not draw."""
    base = {"extras": {}, "sequence_length": None, "pad_to_multiple_of": 4, "pad_token_id": 0, "ignore_index": -100}

    def rows(*lengths, **over):
        out = []
        for u in lengths:
            r = {"input_ids": torch.arange(1, u + 1), "labels": torch.arange(2, u + 2),
                 "loss_mask": torch.ones(u), "position_ids": torch.arange(u)}
            r.update({k: (v(u) if callable(v) else v) for k, v in over.items()})
            out.append({k: v for k, v in r.items() if v is not None})
        return out

    return [
        ("empty row list", base, [], None),
        ("an empty row", base, rows(3, 0), None),
        ("row over sequence_length", {**base, "sequence_length": 4}, rows(3, 5), None),
        ("row exactly sequence_length", {**base, "sequence_length": 5}, rows(3, 5), None),
        ("labels of another length", base, rows(3, 4, labels=lambda u: torch.arange(u + 1)), None),
        ("position_ids of another length", base, rows(3, position_ids=lambda u: torch.arange(u - 1)), None),
        ("2-D tokens", base, rows(3, input_ids=lambda u: torch.arange(u).reshape(1, u)), None),
        ("attention mask with a zero", base, rows(3, attention_mask=torch.tensor([1, 0, 1])), None),
        ("attention mask all ones", base, rows(3, attention_mask=torch.tensor([1, 1, 1])), None),
        ("bool attention mask", base, rows(3, attention_mask=torch.tensor([True, True, True])), None),
        ("pad_to_multiple_of 0", {**base, "pad_to_multiple_of": 0}, rows(3), None),
        ("sequence_length 0", {**base, "sequence_length": 0}, rows(3), None),
        ("extra key named like a core key", {**base, "extras": {"labels": 0}}, rows(3), None),
        ("extra key missing from a row", {**base, "extras": {"token_type_ids": 0}},
         [rows(3, token_type_ids=lambda u: torch.zeros(u, dtype=torch.int64))[0], rows(2)[0]], None),
        ("one row, aligned, m 4", base, rows(8), "thd-padded-keys-only-when-different"),
        ("m 1 one row", {**base, "pad_to_multiple_of": 1}, rows(5), None),
        ("no position_ids", base, rows(3, 4, position_ids=None), "thd-rows-without-position-ids"),
        ("no labels", base, rows(3, 4, labels=None), "thd-labels-and-loss-mask-required"),
        ("no loss_mask", base, rows(3, 4, loss_mask=None), "thd-labels-and-loss-mask-required"),
        ("bool loss mask", base, rows(3, 4, loss_mask=lambda u: torch.ones(u, dtype=torch.bool)),
         "thd-canonical-dtypes"),
        ("int32 tokens", base, rows(3, 4, input_ids=lambda u: torch.arange(u, dtype=torch.int32)),
         "thd-canonical-dtypes"),
    ]


def test_row_builder_fixed_cases(upstream, compat):
    fixed = _fixed_row_cases()
    answers = ask(upstream, "in_batch.rows", [_bridge_row_case(c, r) for _, c, r, _ in fixed])
    for (name, case, rows, known), answer in zip(fixed, answers):
        ours, err = _ours_rows(case, rows)
        if known in ("thd-rows-without-position-ids", "thd-labels-and-loss-mask-required"):
            assert upstream_raised(answer) != (err is not None), name  # exactly one side accepts
            compat.by_design(BRIDGE_ROWS, known)
            continue
        if known == "thd-canonical-dtypes":
            assert not upstream_raised(answer) and err is None, name
            bridge = answer["batch"]
            key = "loss_mask" if "loss" in name else "input_ids"
            mine = "loss_mask" if "loss" in name else "tokens"
            assert bridge[key].dtype != ours[mine].dtype, name
            assert same_tensor(bridge[key], ours[mine], dtype=False) == "", name
            compat.by_design(BRIDGE_ROWS, known)
            continue
        before = dict(compat.counts[BRIDGE_ROWS])
        record(compat, BRIDGE_ROWS, answer, ours, token_key="input_ids", extras=tuple(case["extras"]), ours_error=err)
        if known is not None:  # the documented difference is the one this input shows
            assert compat.counts[BRIDGE_ROWS][known] == before.get(known, 0) + 1, name


# ------------------------------------------------------------------------------------------------
# pack_right_padded_sequence_batch_to_mcore_thd vs right_padded_to_thd


@st.composite
def right_padded_cases(draw) -> dict:
    b = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.integers(1, 30), min_size=b, max_size=b))
    if draw(st.integers(0, 11)) == 0:  # now and then an empty row
        lengths[draw(st.integers(0, b - 1))] = 0
    width = max(max(lengths), 1) + draw(st.integers(0, 6))
    pad = draw(st.integers(0, 3))
    use_mask = draw(st.booleans())
    holes = draw(st.integers(0, 9)) == 0  # a row that is not right-padded
    token_key = draw(st.sampled_from(["input_ids", "tokens"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tokens, mask = [], []
    for u in lengths:
        low = 0 if use_mask else pad + 1  # without a mask a real token equal to the pad id would end the row
        tokens.append(rng.integers(low, 61, u).tolist() + [pad] * (width - u))
        mask.append([1] * u + [0] * (width - u))
    if holes and lengths[0] >= 2:
        if use_mask:
            mask[0][0] = 0
        else:
            tokens[0][0] = pad
    extras = draw(st.lists(st.sampled_from(EXTRA_KEYS), max_size=2, unique=True))
    case = {
        "token_key": token_key, "explicit_key": draw(st.booleans()), "tokens": tokens,
        "attention_mask": mask if use_mask else None,
        "labels": rng.integers(-100, 61, (b, width)).tolist(),
        "loss_mask": rng.choice([0.0, 1.0], (b, width)).tolist(),
        "positions": draw(st.sampled_from(["arange", "offset"])),
        "extras": {k: draw(st.integers(-1, 9)) for k in extras},
        "extra_values": {k: rng.integers(0, 4, (b, width)).tolist() for k in extras},
        "sequence_length": draw(st.sampled_from([None, None, width, max(1, max(lengths) - 1)])),
        "pad_to_multiple_of": draw(st.sampled_from([1, 2, 4, 8])), "pad_token_id": pad,
        "ignore_index": draw(st.sampled_from([-100, -1])),
    }
    return case


def _right_padded_batch(case: dict) -> dict:
    tokens = torch.tensor(case["tokens"], dtype=torch.int64)
    b, s = tokens.shape
    start = 0 if case["positions"] == "arange" else 7
    batch = {case["token_key"]: tokens,
             "labels": torch.tensor(case["labels"], dtype=torch.int64),
             "loss_mask": torch.tensor(case["loss_mask"], dtype=torch.float32),
             "position_ids": (torch.arange(s) + start).expand(b, s).clone()}
    if case["attention_mask"] is not None:
        batch["attention_mask"] = torch.tensor(case["attention_mask"], dtype=torch.int64)
    for key, values in case["extra_values"].items():
        batch[key] = torch.tensor(values, dtype=torch.int64)
    return batch


def _bridge_right_padded_case(case: dict, batch: dict) -> dict:
    return {"batch": batch, "kwargs": {
        "token_key": case["token_key"] if case["explicit_key"] else None, "sequence_length": case["sequence_length"],
        "pad_token_id": case["pad_token_id"], "ignore_index": case["ignore_index"],
        "pad_to_multiple_of": case["pad_to_multiple_of"], "sequence_tensor_pad_values": case["extras"] or None}}


def _ours_right_padded(case: dict, batch: dict):
    try:
        return right_padded_to_thd(
            batch, token_key=case["token_key"] if case["explicit_key"] else None, pad_token_id=case["pad_token_id"],
            label_pad_id=case["ignore_index"], pad_seq_to_mult=case["pad_to_multiple_of"],
            max_row_length=case["sequence_length"], extra_pad_values=case["extras"] or None), None
    except SeqpackError as err:
        return None, err


@settings(max_examples=10, **SETTINGS)
@given(st.lists(right_padded_cases(), min_size=20, max_size=20))
def test_right_padded_packer_equals_bridges(upstream, compat, cases):
    batches = [_right_padded_batch(c) for c in cases]
    answers = ask(upstream, "in_batch.right_padded", [_bridge_right_padded_case(c, b) for c, b in zip(cases, batches)])
    for case, batch, answer in zip(cases, batches, answers):
        ours, err = _ours_right_padded(case, batch)
        record(compat, BRIDGE_RIGHT_PADDED, answer, ours, token_key=case["token_key"],
               extras=tuple(case["extras"]), ours_error=err, suffix="-right-padded")


def test_right_padded_packer_fixed_cases(upstream, compat):
    base = {"token_key": "input_ids", "explicit_key": False, "tokens": [[5, 6, 7, 0], [8, 9, 0, 0]],
            "attention_mask": None, "labels": [[6, 7, -100, -100], [9, -100, -100, -100]],
            "loss_mask": [[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], "positions": "arange", "extras": {},
            "extra_values": {}, "sequence_length": None, "pad_to_multiple_of": 2, "pad_token_id": 0,
            "ignore_index": -100}
    batches, names = [], []

    def add(name, case, edit=None):
        batch = _right_padded_batch(case)
        if edit:
            edit(batch)
        batches.append((case, batch))
        names.append(name)

    add("aligned rows, m 2 (padded keys)", {**base, "tokens": [[5, 6, 7, 8], [8, 9, 0, 0]]})
    add("unaligned rows", base)
    add("no position_ids", base, lambda b: b.pop("position_ids"))
    add("no labels", base, lambda b: b.pop("labels"))
    add("no loss_mask", base, lambda b: b.pop("loss_mask"))
    add("1-D tokens", base, lambda b: b.update(input_ids=b["input_ids"][0]))
    add("labels of another shape", base, lambda b: b.update(labels=b["labels"][:, :3]))
    add("attention mask of another shape", base, lambda b: b.update(attention_mask=torch.ones(2, 3, dtype=torch.int64)))
    add("no token key", base, lambda b: b.update(ids=b.pop("input_ids")))
    add("all-pad row", {**base, "tokens": [[5, 6, 7, 0], [0, 0, 0, 0]]})
    add("bool loss mask", base, lambda b: b.update(loss_mask=b["loss_mask"].bool()))
    expected = [None, None, "thd-rows-without-position-ids-right-padded", "thd-labels-and-loss-mask-required-right-padded",
                "thd-labels-and-loss-mask-required-right-padded", None, None, None, None, None,
                "thd-canonical-dtypes-right-padded"]
    answers = ask(upstream, "in_batch.right_padded", [_bridge_right_padded_case(c, b) for c, b in batches])
    for name, (case, batch), answer, known in zip(names, batches, answers, expected):
        ours, err = _ours_right_padded(case, batch)
        if known and "dtypes" in known:
            assert not upstream_raised(answer) and err is None, name
            assert answer["batch"]["loss_mask"].dtype == torch.bool and ours["loss_mask"].dtype == torch.float32
            assert same_tensor(answer["batch"]["loss_mask"], ours["loss_mask"], dtype=False) == "", name
            compat.by_design(BRIDGE_RIGHT_PADDED, known)
        elif known:
            assert upstream_raised(answer) != (err is not None), name
            compat.by_design(BRIDGE_RIGHT_PADDED, known)
        else:
            record(compat, BRIDGE_RIGHT_PADDED, answer, ours, token_key="input_ids", ours_error=err,
                   suffix="-right-padded")
    assert compat.counts[BRIDGE_RIGHT_PADDED]["thd-padded-keys-only-when-different-right-padded"] >= 1


# ------------------------------------------------------------------------------------------------
# text_prompt_completion_collate_fn(enable_in_batch_packing=True) vs seqpack's in-batch collator

WORDS = [f"w{i}" for i in range(30)]
MARKER = "<image>"  # one of Bridge's skipped marker tokens (token_utils.PAD_TOKENS)


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory):
    """A word-level Hugging Face tokenizer folder (tokenizer.json + tokenizer_config.json) both sides load."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["[PAD]", "[BOS]", "[EOS]", "[UNK]", MARKER]
    vocab = {t: i for i, t in enumerate(specials + WORDS + ["Q:", "A:"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(specials)
    folder = tmp_path_factory.mktemp("word-tokenizer")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "[BOS]", "eos_token": "[EOS]",
        "pad_token": "[PAD]", "unk_token": "[UNK]"}), encoding="utf-8")
    return folder


@st.composite
def collate_cases(draw) -> dict:
    mbs = draw(st.integers(2, 5))
    marker = draw(st.integers(0, 7)) == 0

    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def text(lo, hi):
        return " ".join(rng.choice(WORDS, int(rng.integers(lo, hi + 1))).tolist())

    examples = []
    for i in range(mbs):
        completion = text(1, 12)
        if marker and i == 0:
            completion = f"{completion} {MARKER} {text(1, 3)}"
        examples.append({"prompt": text(0, 20), "completion": completion, "id": i})
    return {
        "examples": examples,
        "prompt_template": draw(st.sampled_from(["{prompt}", "Q: {prompt}"])),
        "separator": draw(st.sampled_from(["", " ", " A:"])),
        "loss_mode": draw(st.sampled_from(["completion", "full"])),
        "add_bos": draw(st.booleans()), "add_eos": draw(st.booleans()) or not marker,
        "truncation": draw(st.sampled_from(["right", "left"])),
        "max_length": draw(st.sampled_from([16, 24, 32, 40, 64])),
        "m": draw(st.sampled_from([1, 2, 4, 8])),
        "pad_to_max_length": draw(st.integers(0, 5)) == 0,
        "pad_to_multiple_of": draw(st.sampled_from([1, 8])),
    }


def _bridge_collate_case(case: dict) -> dict:
    return {"examples": case["examples"],
            "preprocessing": {"prompt_template": case["prompt_template"], "separator": case["separator"],
                              "loss_mode": case["loss_mode"], "add_bos": case["add_bos"], "add_eos": case["add_eos"],
                              "truncation_method": case["truncation"]},
            "kwargs": {"max_length": case["max_length"], "pad_to_max_length": case["pad_to_max_length"],
                       "pad_to_multiple_of": case["pad_to_multiple_of"],
                       "in_batch_packing_pad_to_multiple_of": case["m"]}}


def _ours_collate(case: dict, tokenizer):
    from seqpack.data import PromptCompletionSchema
    from seqpack.data.tokenize import to_training_example, tokenize_prompt_completion

    schema = PromptCompletionSchema(prompt_template=case["prompt_template"], separator=case["separator"],
                                    loss_mode=case["loss_mode"], add_bos=case["add_bos"], add_eos=case["add_eos"])
    try:
        items = []
        for i, row in enumerate(case["examples"]):
            sample = tokenize_prompt_completion(row, schema, tokenizer, max_length=case["max_length"],
                                                truncation=case["truncation"])
            items.append({**to_training_example(sample).arrays(), "row_index": i})
        collate = InBatchPackingCollator(pad_seq_to_mult=case["m"], seq_length=case["max_length"],
                                         pad_to_max_length=case["pad_to_max_length"], pad_token_id=tokenizer.pad_id)
        return collate(items), None
    except SeqpackError as err:
        return None, err


def compare_collate(bridge: dict, ours: dict, m: int, skipped: set[int]) -> tuple[list[str], bool]:
    """(differences beyond the documented row layout, some difference is a skipped marker target)."""
    diffs: list[str] = []
    marker_seen = False
    b_cu = bridge["cu_seqlens_q"].tolist()
    b_phys = (bridge.get("cu_seqlens_q_padded") if bridge.get("cu_seqlens_q_padded") is not None
              else bridge["cu_seqlens_q"]).tolist()
    s_cu = ours["cu_seqlens_q"].tolist()
    s_phys = ours.get("cu_seqlens_q_padded", ours["cu_seqlens_q"]).tolist()
    if len(b_cu) != len(s_cu):
        return [f"{len(b_cu) - 1} sequences in Bridge's batch, {len(s_cu) - 1} in seqpack's"], False
    tb, lb, mb, pb = (bridge[k][0] for k in ("input_ids", "labels", "loss_mask", "position_ids"))
    ts, ls, ms, ps = (ours[k][0] for k in ("tokens", "labels", "loss_mask", "position_ids"))
    if not torch.equal(bridge["tokens"], bridge["input_ids"]):
        diffs.append("Bridge's tokens and input_ids differ")
    for i in range(len(b_cu) - 1):
        bl, sl = b_cu[i + 1] - b_cu[i], s_cu[i + 1] - s_cu[i]
        b0, s0 = b_phys[i], s_phys[i]
        if sl != bl - 1:
            diffs.append(f"sequence {i}: {bl} tokens in Bridge's batch, {sl} in seqpack's (expected {bl - 1})")
            continue
        seg = slice(b0, b0 + sl)
        if not torch.equal(ts[s0:s0 + sl], tb[seg]):
            diffs.append(f"sequence {i}: input tokens differ")
        if not torch.equal(ls[s0:s0 + sl], tb[b0 + 1:b0 + bl]):
            diffs.append(f"sequence {i}: seqpack's labels are not the next input tokens")
        trained_b = mb[b0 + bl - 1].item() == 0 and lb[b0 + bl - 1].item() == -100
        if not trained_b:
            diffs.append(f"sequence {i}: Bridge trains its last position")
        mask_b, mask_s = mb[seg], ms[s0:s0 + sl]
        if not torch.equal(mask_b, mask_s):
            bad = torch.nonzero(mask_b != mask_s).reshape(-1)
            targets = {int(tb[b0 + 1 + j]) for j in bad.tolist()}
            if targets <= skipped and bool((mask_b[bad] == 0).all()):
                marker_seen = True
            else:
                diffs.append(f"sequence {i}: loss masks differ at {bad.tolist()[:5]}")
        masked_b = lb[seg][mask_b == 0]
        if masked_b.numel() and bool((masked_b != -100).any()):
            diffs.append(f"sequence {i}: Bridge has a masked label that is not ignore_index")
        if not torch.equal(lb[seg][mask_b == 1], ls[s0:s0 + sl][mask_b == 1]):
            diffs.append(f"sequence {i}: trained targets differ")
        if not torch.equal(pb[seg], torch.arange(sl)) or not torch.equal(ps[s0:s0 + sl], torch.arange(sl)):
            diffs.append(f"sequence {i}: position ids do not restart at 0")
        if (s_phys[i + 1] - s0) % m or (b_phys[i + 1] - b0) % m:
            diffs.append(f"sequence {i}: physical length not a multiple of {m}")
    if bridge["token_count"] != [n - n0 for n0, n in zip(b_cu, b_cu[1:])]:
        diffs.append(f"Bridge's token_count {bridge['token_count']} is not its row lengths")
    if ours["token_count"] != [n - n0 for n0, n in zip(s_cu, s_cu[1:])]:
        diffs.append(f"seqpack's token_count {ours['token_count']} is not its row lengths")
    return diffs, marker_seen


@settings(max_examples=6, **SETTINGS)
@given(st.lists(collate_cases(), min_size=10, max_size=10))
def test_prompt_completion_collate_matches_bridges(upstream, compat, word_tokenizer, cases):
    from seqpack.data import load_tokenizer

    tokenizer = load_tokenizer(str(word_tokenizer))
    skipped = {tokenizer.encode(MARKER)[0]}
    answers = ask(upstream, "in_batch.prompt_completion", [_bridge_collate_case(c) for c in cases],
                  tokenizer_dir=str(word_tokenizer))
    for case, answer in zip(cases, answers):
        ours, err = _ours_collate(case, tokenizer)
        if upstream_raised(answer) or (err is not None and not case["pad_to_max_length"]):
            compat.check(BRIDGE_PC_COLLATE, upstream_raised(answer) and err is not None,
                         detail=f"Bridge: {answer.get('type')}: {answer.get('message')}; seqpack: {err!r}")
            continue
        if case["pad_to_max_length"] and err is not None:
            # seqpack's fixed width is max_length: the aligned rows must fit it, and it must be aligned
            assert err.field == "width", err
            compat.by_design(BRIDGE_PC_COLLATE, "collate-fixed-width")
            continue
        diffs, marker = compare_collate(answer["batch"], ours, case["m"], skipped)
        if case["pad_to_max_length"] and int(ours["tokens"].shape[1]) != case["max_length"]:
            diffs.append(f"seqpack's fixed width {ours['tokens'].shape[1]} is not max_length {case['max_length']}")
        if diffs:
            compat.check(BRIDGE_PC_COLLATE, False, detail="; ".join(diffs))
        compat.by_design(BRIDGE_PC_COLLATE, "collate-fixed-width" if case["pad_to_max_length"] else
                         "collate-skipped-tokens" if marker else "collate-row-layout")


def test_comparisons_catch_a_difference(upstream, word_tokenizer):
    """Negative controls: the comparisons above report a changed token, boundary, length or mask."""
    case = {"rows": [{"input_ids": [5, 6, 7], "labels": [6, 7, -100], "loss_mask": [1.0, 1.0, 0.0],
                      "position_ids": [0, 1, 2]},
                     {"input_ids": [8, 9], "labels": [9, -100], "loss_mask": [1.0, 0.0], "position_ids": [0, 1]}],
            "extras": {}, "sequence_length": None, "pad_to_multiple_of": 4, "pad_token_id": 0, "ignore_index": -100}
    rows = _tensor_rows(case)
    (answer,) = ask(upstream, "in_batch.rows", [_bridge_row_case(case, rows)])
    ours, err = _ours_rows(case, rows)
    assert err is None and compare_thd(answer["batch"], ours, token_key="input_ids") == ([], False)
    for key, change in (("tokens", lambda t: t.index_fill_(1, torch.tensor([1]), 59)),
                        ("cu_seqlens_q_padded", lambda t: t.copy_(torch.tensor([0, 4, 9], dtype=torch.int32))),
                        ("position_ids", lambda t: t.add_(1)), ("padding_mask", lambda t: t.logical_not_())):
        bad = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in ours.items()}
        change(bad[key])
        assert compare_thd(answer["batch"], bad, token_key="input_ids")[0], key
    assert compare_thd(answer["batch"], {**ours, "max_seqlen_q": 3}, token_key="input_ids")[0]

    from seqpack.data import load_tokenizer

    tokenizer = load_tokenizer(str(word_tokenizer))
    collate = {"examples": [{"prompt": "w1 w2", "completion": "w3 w4"}, {"prompt": "w5", "completion": "w6"}],
               "prompt_template": "{prompt}", "separator": " ", "loss_mode": "completion", "add_bos": False,
               "add_eos": True, "truncation": "right", "max_length": 16, "m": 2, "pad_to_max_length": False,
               "pad_to_multiple_of": 1}
    (answer,) = ask(upstream, "in_batch.prompt_completion", [_bridge_collate_case(collate)],
                    tokenizer_dir=str(word_tokenizer))
    ours, err = _ours_collate(collate, tokenizer)
    assert err is None and compare_collate(answer["batch"], ours, 2, set()) == ([], False)
    bad = dict(ours, loss_mask=ours["loss_mask"].clone())
    bad["loss_mask"][0, 0] = 1.0  # a prompt token trained
    assert compare_collate(answer["batch"], bad, 2, set())[0]
    bad = dict(ours, labels=ours["labels"].clone())
    bad["labels"][0, 2] = 3
    assert compare_collate(answer["batch"], bad, 2, set())[0]

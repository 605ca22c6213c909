"""Energon online packing end to end on CPU: exactly-once epochs, val flush, constraints, errors."""

import json

import numpy as np
import pytest
import torch

from seqpack.config import load_config
from seqpack.config.rules import RULES_BY_ID
from seqpack.data import ByteTokenizer, demo_path, tokenize_row
from seqpack.data.schemas import PromptCompletionSchema
from seqpack.data.vlm.vision import VISION_PRESETS
from seqpack.data.vlm.sample import tokenize_vlm_row
from seqpack.core.errors import ConfigViolationError, InputError, PackingError, UsageError
from seqpack.packing.algorithms import pack_lengths
from seqpack.packing.energon.loader import (
    ENERGON_RULE_IDS,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    iter_energon_batches,
)
from seqpack.packing.energon.prepare import prepare_energon_dataset, write_synthetic_vlm_jsonl
from seqpack.packing.thd import validate_thd_batch

torch.utils.data._utils.worker.MP_STATUS_CHECK_INTERVAL = 0.1
torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL = 0.1

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument:UserWarning")

TOK = ByteTokenizer()


def energon_cfg(seq_length, buffer, *overrides):
    base = {
        "model": {"seq_length": seq_length, "calculate_per_token_loss": True},
        "dataset": {"kind": "energon", "packing_buffer_size": buffer, "micro_batch_size": 1, "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
        "ddp": {"average_in_collective": False},
    }
    return load_config(base, list(overrides))


class Truth:
    """Per-sample expectations computed from the JSONL rows with the data layer alone (the VLM
    sample contract straight from the row, never through the shards)."""

    def __init__(self, jsonl, prepared, vision=None):
        self.rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
        self.prepared = prepared
        self.vision = vision
        self.length, self.supervised, self.patches = {}, {}, {}
        for r, row in enumerate(self.rows):
            key = f"row{r:08d}"
            if vision is None:
                tok = tokenize_row(row, PromptCompletionSchema(), TOK, max_length=1 << 20)
                self.length[key], self.supervised[key] = tok.num_tokens - 1, tok.num_supervised
                continue
            ex = tokenize_vlm_row(row, PromptCompletionSchema(), TOK, vision=VISION_PRESETS[vision],
                                  max_length=1 << 20, base_dir=jsonl.parent)
            self.length[key], self.supervised[key] = len(ex.tokens), int(ex.loss_mask.sum())
            self.patches[key] = ex.pixels("image", VISION_PRESETS[vision].patch_dim)

    def keys(self, split):
        val = {f"row{r:08d}" for r in self._val_rows()}
        every = [f"row{r:08d}" for r in range(len(self.rows))]
        return [k for k in every if (k in val) == (split == "val")]

    def _val_rows(self):
        n = len(self.rows)
        fraction = self.prepared.manifest["options"]["val_fraction"]
        if not fraction:
            return []
        seed = self.prepared.manifest["options"]["split_seed"]
        return np.random.default_rng(seed).choice(n, size=max(1, round(n * fraction)), replace=False).tolist()

    def check_batch(self, b, seq_length, m):
        """The batch is canonical and holds exactly its samples' tokens, masks and images."""
        validate_thd_batch(b, pad_seq_to_mult=m)
        keys = b["sample_keys"]
        assert b["tokens"].shape[1] <= seq_length
        lengths = np.diff(b["cu_seqlens_q"].numpy())
        assert lengths.tolist() == [self.length[k] for k in keys]
        starts = (b["cu_seqlens_q_padded"] if "cu_seqlens_q_padded" in b else b["cu_seqlens_q"]).tolist()
        for k, s, n in zip(keys, starts, lengths):
            assert b["loss_mask"][0, s:s + n].sum().item() == self.supervised[k]
            assert b["position_ids"][0, s].item() == 0
        if self.vision is not None:
            assert b["num_patches"].tolist() == [len(self.patches[k]) for k in keys]
            assert np.array_equal(b["pixel_values"].numpy(), np.concatenate([self.patches[k] for k in keys]))
            owners = np.repeat(np.arange(len(keys)), [len(self.patches[k]) for k in keys])
            assert b["pixel_sequence_index"].tolist() == owners.tolist()
            merged = VISION_PRESETS[self.vision].merge_size ** 2
            assert int((b["vision_index"] >= 0).sum()) == len(b["pixel_values"]) // merged
            for s in starts[:-1]:
                assert b["mrope_position_ids"][:, 0, s].tolist() == [0, 0, 0]
        else:
            assert "pixel_values" not in b


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vlm")
    src = write_synthetic_vlm_jsonl(tmp / "vlm.jsonl", 120, seed=3)
    prepared = prepare_energon_dataset(src, tmp / "ds", shard_size=25, val_fraction=0.1)
    return Truth(src, prepared, vision="tiny")


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text")
    src = tmp / "pc.jsonl"
    src.write_text("".join(demo_path("prompt_completion").read_text().splitlines(keepends=True)[:160]))
    prepared = prepare_energon_dataset(src, tmp / "ds", shard_size=40, val_fraction=0.1)
    return Truth(src, prepared)


def _epoch(truth, cfg, m, **kw):
    if truth.vision is not None:
        kw.setdefault("vision", truth.vision)
    packed = get_train_dataset(cfg, truth.prepared.root, repeat=False, **kw)
    batches = list(get_savable_loader(packed))
    for b in batches:
        truth.check_batch(b, cfg.seq_length, m)
    return packed, batches


@pytest.mark.slow  # 2.4 s of CPU in process; with workers, processes
@pytest.mark.parametrize("num_workers", [0, 2])
def test_media_epoch_has_every_sample_once(vlm, num_workers):
    cfg = energon_cfg(128, 8, "model.context_parallel_size=2", "dist.world_size=2")
    packed, batches = _epoch(vlm, cfg, 4, num_workers=num_workers)
    keys = [k for b in batches for k in b["sample_keys"]]
    assert sorted(keys) == vlm.keys("train") and len(keys) == 108
    assert packed.worker_samples == ([108] if num_workers == 0 else [54, 54])
    assert sum(b["loss_mask"].sum().item() for b in batches) == sum(vlm.supervised[k] for k in keys)
    assert sum(b["num_patches"].sum().item() for b in batches) == sum(len(vlm.patches[k]) for k in keys)
    assert any(len(vlm.patches[k]) for k in keys) and not all(len(vlm.patches[k]) for k in keys)
    assert len(batches) < 108  # packing happened


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])  # workers: processes
def test_text_epoch_has_every_sample_once(text, num_workers):
    cfg = energon_cfg(4096, 16, f"dataset.num_workers={num_workers}")
    _, batches = _epoch(text, cfg, 1)
    keys = [k for b in batches for k in b["sample_keys"]]
    assert sorted(keys) == text.keys("train") and len(keys) == 144
    assert all("pixel_values" not in b for b in batches)


@pytest.mark.slow
def test_two_ranks_two_workers_split_the_data(vlm):
    cfg = energon_cfg(128, 8, "dist.world_size=2")
    seen = []
    for rank in (0, 1):
        packed, batches = _epoch(vlm, cfg, 1, dp_rank=rank, num_workers=2)
        assert sum(packed.worker_samples) == 54
        seen.append([k for b in batches for k in b["sample_keys"]])
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == vlm.keys("train")


@pytest.mark.slow
def test_val_flushes_its_partial_buffer_exactly(vlm):
    cfg = energon_cfg(128, 16)
    val_keys = vlm.keys("val")
    assert len(val_keys) == 12 < 16  # one partial buffer, flushed at the end
    batches = list(get_savable_loader(get_val_dataset(cfg, vlm.prepared.root, vision="tiny")))
    expected = pack_lengths([vlm.length[k] for k in val_keys], 128, "first_fit_decreasing").bins()
    assert [b["sample_keys"] for b in batches] == [[val_keys[i] for i in g] for g in expected]
    two = list(get_savable_loader(get_val_dataset(cfg, vlm.prepared.root, num_workers=2, vision="tiny")))
    assert sorted(k for b in two for k in b["sample_keys"]) == val_keys
    for b in batches + two:
        vlm.check_batch(b, 128, 1)


CONSTRAINTS = [
    "PACK-ENERGON-MBS1",
    "PACK-ENERGON-PER-TOKEN-LOSS",
    "PACK-ENERGON-AVG-COLLECTIVE",
    "PACK-ENERGON-NO-CUDA-GRAPHS",
    "PACK-ENERGON-NO-PP",
    "PACK-EXCLUSIVE-ENERGON-IN-BATCH",
    "PACK-ENERGON-DATASET-KIND",
]


@pytest.mark.parametrize("rule_id", CONSTRAINTS)
def test_constraint_violations_carry_the_registry_rule_id(tmp_path, rule_id):
    rule = RULES_BY_ID[rule_id]
    assert rule_id in ENERGON_RULE_IDS
    overrides = [f"{k}={json.dumps(v)}" for k, v in rule.trigger.items()]
    if rule_id == "PACK-ENERGON-DATASET-KIND":  # its trigger needs a non-Energon dataset
        overrides.insert(0, "dataset.kind=gpt_sft")
    cfg = energon_cfg(128, 8, *overrides)
    with pytest.raises(ConfigViolationError) as err:
        get_train_dataset(cfg, tmp_path)  # rules run before the data is touched
    assert f"[{rule_id}]" in str(err.value)
    fixed = energon_cfg(128, 8, *overrides, *[f"{k}={json.dumps(v)}" for k, v in rule.fixed.items()])
    with pytest.raises(Exception) as later:
        get_train_dataset(fixed, tmp_path)
    assert rule_id not in str(later.value)  # the fixed config passes this rule (then lacks data)


def test_mtp_is_a_warning_since_bridge_pr_5990(tmp_path):
    # Bridge main at 067f987 refused MTP with Energon native packing; PR #5990 accepts it, and seqpack's
    # Energon path rolls MTP per packed sequence: the loader logs the warning and goes on (then lacks data)
    rule = RULES_BY_ID["PACK-ENERGON-NO-MTP"]
    assert rule.severity == "warning" and "PACK-ENERGON-NO-MTP" in ENERGON_RULE_IDS
    cfg = energon_cfg(128, 8, *[f"{k}={json.dumps(v)}" for k, v in rule.trigger.items()])
    with pytest.raises(Exception) as later:
        get_train_dataset(cfg, tmp_path)
    assert not isinstance(later.value, ConfigViolationError)


def test_registry_ids_exist_and_off_configs_are_refused(tmp_path):
    assert set(ENERGON_RULE_IDS) <= set(RULES_BY_ID)
    with pytest.raises(UsageError, match="packing_buffer_size"):
        get_train_dataset(load_config({"dataset": {"kind": "energon"}}), tmp_path)


def test_bad_arguments(vlm, tmp_path):
    cfg = energon_cfg(128, 8)
    with pytest.raises(UsageError, match="dp_rank"):
        get_train_dataset(cfg, vlm.prepared.root, dp_rank=1)
    with pytest.raises(UsageError, match="split 'test'"):
        get_train_dataset(cfg, vlm.prepared.root, split_part="test")
    from seqpack.data.schemas import ChatSchema

    with pytest.raises(UsageError, match="schema is chat"):
        get_train_dataset(cfg, vlm.prepared.root, schema=ChatSchema())


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("broken")
    rows = [{"prompt": f"question {i}", "completion": f"answer {i}"} for i in range(12)]
    rows[5]["completion"] = ""  # rejected: empty completion
    src = tmp / "b.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # energon-prepare skips such rows (test_prepare_skips_rejected_rows); a dataset prepared without
    # that check (an older seqpack, or by hand) must still make the loader stop, not skip
    from unittest import mock

    with mock.patch("seqpack.data.tokenize.check_row", lambda *args, **kwargs: None):
        return prepare_energon_dataset(src, tmp / "ds")


def test_prepare_skips_rejected_rows(tmp_path):
    rows = [{"prompt": f"question {i}", "completion": "" if i == 5 else f"answer {i}"} for i in range(12)]
    src = tmp_path / "b.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = prepare_energon_dataset(src, tmp_path / "ds")
    assert ds.skipped == {"empty_completion": 1} and ds.samples == {"train": 11}
    acc = ds.manifest["accounting"]
    assert acc["rows_in"] == acc["written"] + acc["skipped_total"] == 12
    assert acc["skipped"]["empty_completion"]["examples"] == [{"file": str(src), "line": 6, "row": 5}]


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])  # workers: processes
def test_failing_samples_raise_instead_of_being_skipped(broken, num_workers):
    cfg = energon_cfg(64, 4)
    with pytest.raises(InputError, match=r"row00000005.*empty_completion"):
        list(get_savable_loader(get_train_dataset(cfg, broken.root, repeat=False, num_workers=num_workers)))


def test_oversize_sample_is_rejected_through_the_loader(tmp_path):
    rows = [{"prompt": "q", "completion": "a" * n} for n in (10, 100, 10)]
    src = tmp_path / "o.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = prepare_energon_dataset(src, tmp_path / "ds")
    with pytest.raises(PackingError, match=r"row00000001.*aligned sequence length 104 .*exceeds seq_length=64"):
        list(get_savable_loader(get_train_dataset(energon_cfg(64, 4, "model.context_parallel_size=2",
                                                              "dist.world_size=2"), ds.root, repeat=False)))


def test_restore_sample_rebuilds_a_batch(vlm):
    loader = get_savable_loader(get_train_dataset(energon_cfg(128, 8), vlm.prepared.root, num_workers=2, vision="tiny"))
    it = iter(loader)
    batches = [next(it) for _ in range(3)]
    again = loader.restore_sample(batches[2]["__restore_key__"])
    assert again["sample_keys"] == batches[2]["sample_keys"]
    for key in ("tokens", "labels", "loss_mask", "position_ids", "cu_seqlens_q", "pixel_values", "num_patches",
                "vision_index", "mrope_position_ids"):
        assert torch.equal(again[key], batches[2][key])


@pytest.mark.slow  # prepares an Energon dataset end to end
def test_iter_energon_batches_from_a_jsonl_file(tmp_path):
    src = tmp_path / "pc.jsonl"
    src.write_text("".join(demo_path("prompt_completion").read_text().splitlines(keepends=True)[:40]))
    cfg = energon_cfg(4096, 8)
    got = list(iter_energon_batches(cfg, src))
    keys = [k for mb in got for k in mb.sample_keys]
    assert sorted(keys) == [f"row{r:08d}" for r in range(40)]
    assert sorted(r for mb in got for r in mb.source_rows) == list(range(40))
    for mb in got:
        assert not {"sample_keys", "__key__", "__restore_key__"} & set(mb.batch)
        validate_thd_batch(mb.batch)
        assert mb.to_dict()["sample_keys"] == mb.sample_keys
    assert len(list(iter_energon_batches(cfg, src, max_batches=2))) == 2
    assert not any(p.name.startswith("seqpack-energon-") for p in tmp_path.iterdir())

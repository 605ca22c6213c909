"""Saving and restoring Energon packing loaders: exact continuation, hazards, settings, safe loading."""

import json
import os
import pickle

import pytest
import torch

from seqpack.config import load_config
from seqpack.core.errors import ArtifactError, PackingError, UsageError
from seqpack.packing.energon.checkpoint import (
    LoaderCheckpoint,
    check_resume_settings,
    check_save_window,
    load_checkpoint,
    save_checkpoint,
)
from seqpack.packing.energon.loader import get_savable_loader, get_train_dataset, get_val_dataset
from seqpack.packing.energon.prepare import prepare_energon_dataset, write_synthetic_vlm_jsonl

torch.utils.data._utils.worker.MP_STATUS_CHECK_INTERVAL = 0.1
torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL = 0.1
pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument:UserWarning")

SEQ, BUFFER = 128, 8


def energon_cfg(*overrides):
    base = {
        "model": {"seq_length": SEQ, "calculate_per_token_loss": True},
        "dataset": {"kind": "energon", "packing_buffer_size": BUFFER, "micro_batch_size": 1, "num_workers": 0},
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
        "ddp": {"average_in_collective": False},
    }
    return load_config(base, list(overrides))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    src = write_synthetic_vlm_jsonl(tmp / "vlm.jsonl", 120, seed=3)
    return prepare_energon_dataset(src, tmp / "ds", shard_size=25, val_fraction=0.1).root


def make(root, *, cfg=None, aggressive=True, **kw):
    kw.setdefault("repeat", False)
    packed = get_train_dataset(cfg or energon_cfg(), root, **kw)
    extra = dict(checkpoint_every_sec=0, checkpoint_every_min_n_samples=1) if aggressive else {}
    return get_savable_loader(packed, **extra)


def same(a, b):
    """Batches are equal (restore keys compared as nested lists)."""
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        elif k == "__restore_key__":
            assert json.dumps(a[k]) == json.dumps(b[k])
        else:
            assert a[k] == b[k], k
    return True


def keys_of(batches):
    return [k for b in batches for k in b["sample_keys"]]


@pytest.mark.parametrize(
    "num_workers,aggressive",
    [pytest.param(0, True, marks=pytest.mark.slow), pytest.param(2, True, marks=pytest.mark.slow),
     pytest.param(2, False, marks=pytest.mark.slow)],  # 2.5 s of CPU even in process
)
def test_mid_epoch_restore_continues_identically(root, tmp_path, num_workers, aggressive):
    a = make(root, num_workers=num_workers, aggressive=aggressive)
    it = iter(a)
    head = [next(it) for _ in range(12)]
    ckpt = a.save_state()
    tail = list(it)
    path = save_checkpoint(ckpt, tmp_path / "state.pt")
    loaded = load_checkpoint(path)
    assert loaded.progress["packs"] == 12 and loaded.progress["samples"] == len(keys_of(head))
    assert sum(loaded.progress["consumed_per_worker"]) == len(keys_of(head))
    b = make(root, num_workers=num_workers, aggressive=aggressive)
    b.restore_state(loaded)
    rest = list(b)
    assert len(rest) == len(tail) and all(same(x, y) for x, y in zip(tail, rest))
    assert sorted(keys_of(head + rest)) == sorted(keys_of(head + tail)) and len(set(keys_of(head + rest))) == 108
    # the plain torch.save / torch.load round trip of the checkpoint object works too
    torch.save(ckpt, tmp_path / "plain.pt")
    plain = torch.load(tmp_path / "plain.pt", weights_only=False)
    assert load_checkpoint(tmp_path / "plain.pt").to_dict() == ckpt.to_dict()  # the dataclass is allow-listed
    c = make(root, num_workers=num_workers, aggressive=aggressive)
    c.restore_state(plain)
    assert [x["sample_keys"] for x in c] == [x["sample_keys"] for x in tail]
    assert json.loads(json.dumps(loaded.to_dict()))["settings"]["num_workers"] == num_workers


@pytest.mark.slow
def test_infinite_stream_restores_identically(root, tmp_path):
    a = make(root, num_workers=2, repeat=True, shuffle_buffer_size=16)
    it = iter(a)
    for _ in range(70):  # past the end of the first epoch (about 65 packs)
        next(it)
    ckpt = a.save_state()
    cont = [next(it) for _ in range(20)]
    b = make(root, num_workers=2, repeat=True, shuffle_buffer_size=16)
    b.restore_state(load_checkpoint(save_checkpoint(ckpt, tmp_path / "s.pt")))
    itb = iter(b)
    assert all(same(x, next(itb)) for x in cont)


@pytest.mark.slow
def test_saving_right_after_iter_returns_the_start_state(root):
    a = make(root, num_workers=2)
    it = iter(a)  # energon has not started yet: no deadlock
    ckpt = a.save_state()
    assert ckpt.energon_state is None and ckpt.progress["packs"] == 0
    first = [next(it) for _ in range(3)]
    b = make(root, num_workers=2)
    b.restore_state(ckpt)
    itb = iter(b)
    assert all(same(x, next(itb)) for x in first)
    # a restored loader saved again before its first batch hands back the state it started from
    mid = make(root, num_workers=2)
    itm = iter(mid)
    [next(itm) for _ in range(5)]
    state = mid.save_state()
    c = make(root, num_workers=2)
    c.restore_state(state)
    iter(c)
    again = c.save_state()
    assert again.energon_state is state.energon_state and again.progress == state.progress
    with pytest.raises(UsageError, match="before iterating"):
        b.restore_state(ckpt)


@pytest.mark.slow
def test_save_in_the_final_flush_window_is_refused(root):
    a = make(root, num_workers=2)
    batches = []
    for b in a:  # stop once fewer than a buffer per worker (2 x 8 samples) is left
        batches.append(b)
        if len(keys_of(batches)) > 108 - 2 * BUFFER:
            break
    with pytest.raises(PackingError, match=r"worker \d has \d+ of its 54 samples left .* packing_buffer_size=8"):
        a.save_state()
    list(a)  # finish the epoch
    with pytest.raises(PackingError, match="epoch is complete"):
        a.save_state()


@pytest.mark.slow
def test_duplicates_from_an_end_of_epoch_state_are_detected(root):
    a = make(root, num_workers=2)
    seen = list(a)[:-1]  # everything but the last pack: inside the final-flush window
    state = a.loader.save_state_rank()  # bypass the guard: the raw energon state
    consumed = [0, 0]
    for b in seen:
        consumed[int(b["__restore_key__"][1])] += len(b["sample_keys"])
    forged = LoaderCheckpoint(settings=a.settings.to_dict(), energon_state=state, progress={
        "finite": True, "consumed_per_worker": consumed, "packs": len(seen), "samples": sum(consumed)})
    b = make(root, num_workers=2)
    b.restore_state(forged)
    with pytest.raises(PackingError, match="owns only 54: samples are repeated"):
        list(b)


def test_save_window_rule():
    check_save_window([0, 4], [10, 20], 16)  # worker 0 has not started; worker 1 has 16 left
    with pytest.raises(PackingError, match="worker 1 has 15 of its 20 samples left"):
        check_save_window([0, 5], [10, 20], 16)
    check_save_window([0], [3], 16)  # a worker smaller than the buffer is safe before its first pack


@pytest.mark.parametrize(
    "change,field",
    [
        ({"num_workers": 0}, "num_workers"),
        ({"cfg": ("dataset.packing_buffer_size=4",)}, "packing_buffer_size"),
        ({"cfg": ("model.seq_length=256",)}, "seq_length"),
        ({"cfg": ("dataset.seed=7",)}, "seed"),
        ({"shuffle_buffer_size": 4}, "shuffle_buffer_size"),
        ({"repeat": True}, "stream"),
        ({"cfg": ("model.context_parallel_size=2", "dist.world_size=2")}, "context_parallel_size"),
    ],
)
def test_restore_with_different_settings_is_refused(root, change, field):
    ckpt = make(root, num_workers=2).save_state()
    kw = {"num_workers": 2, **{k: v for k, v in change.items() if k != "cfg"}}
    other = make(root, cfg=energon_cfg(*change.get("cfg", ())), **kw)
    with pytest.raises(ArtifactError) as err:
        other.restore_state(ckpt)
    assert err.value.field == field and f"'{field}' was" in str(err.value)


def test_resume_settings_rule():
    check_resume_settings({"a": [1, 2], "b": {"c": (3,)}}, {"a": (1, 2), "b": {"c": [3]}})
    with pytest.raises(ArtifactError, match="'b' was 1 when the state was saved but is 2 now"):
        check_resume_settings({"a": 1, "b": 1}, {"a": 1, "b": 2})
    with pytest.raises(ArtifactError, match="'z' is missing from the checkpoint"):
        check_resume_settings({"a": 1}, {"a": 1, "z": 0})


class _Evil:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_malicious_state_files_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    payload = LoaderCheckpoint(settings={}, progress={}, energon_state=_Evil(marker)).to_payload()
    torch.save(payload, tmp_path / "evil.pt")
    with pytest.raises(ArtifactError, match=r"refusing to load global '(posix|os|nt)\.system'"):
        load_checkpoint(tmp_path / "evil.pt")
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(payload))  # legacy, non-zip pickle
    with pytest.raises(ArtifactError, match="refusing to load global"):
        load_checkpoint(tmp_path / "evil.pkl")
    assert not marker.exists()
    torch.save({"format": "something-else"}, tmp_path / "foreign.pt")
    with pytest.raises(ArtifactError, match="checkpoint format"):
        load_checkpoint(tmp_path / "foreign.pt")
    with pytest.raises(ArtifactError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


@pytest.mark.slow
def test_val_stream_can_be_saved_before_its_window(root):
    cfg = energon_cfg()
    loader = get_savable_loader(get_val_dataset(cfg, root))
    ckpt = loader.save_state()  # before any batch: the start of the stream
    everything = list(loader)
    again = get_savable_loader(get_val_dataset(cfg, root))
    again.restore_state(ckpt)
    assert [b["sample_keys"] for b in again] == [b["sample_keys"] for b in everything]

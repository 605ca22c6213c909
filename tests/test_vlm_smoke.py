"""The smoke test with images: the in-batch and Energon paths pack the VLM demo by default and every
check holds with the vision stem and M-RoPE; the two VLM negative controls fail it."""

from __future__ import annotations

import pytest
import torch

from seqpack.data import ByteTokenizer
from seqpack.data.vlm.demo import vlm_demo_path
from seqpack.packing.sft_dataset import SFTJsonlDataset, scan_rows
from seqpack.packing.in_batch import build_in_batch_loader
from seqpack.core.packing_paths import get_path
from seqpack.smoke.run import run_packing_smoke_test
from seqpack.smoke.vlm import mrope_section_for

MROPE_SECTION = mrope_section_for(8)  # the default TinyGPTConfig: head size 8
from seqpack.training.model import TinyGPT, TinyGPTConfig
from seqpack.training.step import packed_forward, reference_step
from seqpack.training.vision import VisionStemConfig

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument:UserWarning")


@pytest.fixture(scope="module")
def vlm_batch():
    ds = SFTJsonlDataset(vlm_demo_path(), seq_length=256, vision="tiny")
    cfg = get_path("in_batch").smoke_config
    loader = build_in_batch_loader(cfg, ds, row_scan=scan_rows(ds), num_workers=0, drop_last=False)
    batch = next(iter(loader))
    model = TinyGPT(TinyGPTConfig(vocab_size=ds.vlm.tokens.vocab_size,
                                  vision=VisionStemConfig(patch_dim=ds.vlm.vision.patch_dim), mrope_section=MROPE_SECTION),
                    seed=3)
    return ds, batch, model


def _view(batch):
    return {k: v for k, v in batch.items() if k not in ("pack_info", "row_indices", "token_count")}


def test_vision_stem_gets_gradients_and_text_model_is_unchanged(vlm_batch):
    _, batch, model = vlm_batch
    res = reference_step(model, _view(batch))
    assert res.grads["vision.patch_proj"].abs().sum() > 0 and res.grads["vision.merge_proj"].abs().sum() > 0
    text = TinyGPT(TinyGPTConfig(vocab_size=model.config.vocab_size), seed=3)
    assert torch.equal(text.embedding, model.embedding)  # the option does not move the LM weights


def test_perturbing_one_image_moves_no_other_sequence(vlm_batch):
    _, batch, model = vlm_batch
    view = _view(batch)
    owners = view["pixel_sequence_index"]
    target = int(owners.min())
    cu = view["cu_seqlens_q_padded"]
    start, end = int(cu[target]), int(cu[target + 1])
    with torch.no_grad():
        base = packed_forward(model, view)
        poked = dict(view, pixel_values=view["pixel_values"] + 0.5 * (owners == target)[:, None])
        moved = packed_forward(model, poked)
    other = torch.ones(base.shape[0], dtype=torch.bool)
    other[start:end] = False
    assert float((moved[other] - base[other]).abs().max()) == 0.0
    assert float((moved[~other] - base[~other]).abs().max()) > 1e-3


def test_model_refuses_images_without_a_stem(vlm_batch):
    from seqpack.core.errors import UsageError

    ds, batch, _ = vlm_batch
    plain = TinyGPT(TinyGPTConfig(vocab_size=ds.vlm.tokens.vocab_size, mrope_section=MROPE_SECTION), seed=3)
    with pytest.raises(UsageError, match="no vision stem"):
        packed_forward(plain, _view(batch))


@pytest.mark.slow
@pytest.mark.parametrize("path", ["in_batch", "energon"])
def test_vlm_paths_pass_every_check_with_images(path):
    report = run_packing_smoke_test(path, size="tiny")
    assert report.result == "pass", [c.to_dict() for c in report.checks if c.status != "passed"]
    assert report.data["vision"] == "tiny"
    pos = report.check("position_ids_restart").value
    assert pos["mrope_sequences"] == report.data["samples"] and pos["mrope_bad_sequences"] == 0
    assert report.check("cp_matches_cp1").value["cp"] == 2


@pytest.mark.slow
def test_vlm_negative_controls_fail():
    misaligned = run_packing_smoke_test("in_batch", size="tiny", faults=["misaligned_image_tokens"], cp_check=False)
    assert misaligned.check("packed_equals_unpacked").status == "failed"
    assert misaligned.check("no_cross_sequence_leakage").status == "failed"
    assert misaligned.result == "fail"
    no_restart = run_packing_smoke_test("in_batch", size="tiny", faults=["mrope_no_restart"], cp_check=False)
    check = no_restart.check("position_ids_restart")
    assert check.status == "failed" and check.value["mrope_bad_sequences"] > 0 and check.value["bad_sequences"] == 0
    # rotary attention sees position differences only: the loss alone cannot catch a missing restart
    assert no_restart.check("packed_equals_unpacked").status == "passed"


@pytest.mark.slow
def test_text_data_keeps_the_text_model(tmp_path):
    from seqpack.data import demo_path

    report = run_packing_smoke_test("in_batch", size="tiny", data=demo_path("chat"), cp_check=False)
    assert report.result == "incomplete" and "vision" not in report.data
    assert "mrope_sequences" not in report.check("position_ids_restart").value
    assert ByteTokenizer().vocab_size == 264


@pytest.mark.slow
def test_energon_smoke_on_synthetic_media_rows(tmp_path):
    """The rows `energon-prepare --with-media` style data makes (inline pictures) used to fail the Energon smoke
    test with "token ids must lie in [0, 264)": the images now reach the model."""
    from seqpack.packing.energon.prepare import write_synthetic_vlm_jsonl

    data = write_synthetic_vlm_jsonl(tmp_path / "media.jsonl", 24, seed=4)
    report = run_packing_smoke_test("energon", data=data, size="tiny", cp_check=False)
    failed = [c.name for c in report.checks if c.status == "failed"]
    assert not failed and report.skipped == ["cp_matches_cp1"] and report.data["vision"] == "tiny"

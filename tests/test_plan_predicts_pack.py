"""plan's per-cap outcome is pack's: the same tokenization, truncation and skip rules, row for row
(``seqpack.packing.offline.lengths.lengths_by_cap``), on chat rows with a real template and on
prompt/completion rows, under every truncation mode."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.tokenizer_bundles import require_tokenizer_dir
from seqpack.core.errors import ArtifactError
from seqpack.data.schemas import ChatSchema
from seqpack.packing.offline.bins import aligned_lengths
from seqpack.packing.offline.lengths import lengths_by_cap
from seqpack.packing.offline.options import OfflinePackOptions
from seqpack.packing.offline.prepare import prepare_packed_dataset
from seqpack.packing.parquet import pack_folders, resolve_parquet_paths

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from gen_chat_jsonl import write_rows  # noqa: E402


def _counts(account: dict) -> dict:
    return {"packed": account["packed"], "truncated": account["truncated"],
            "skipped": {k: v["count"] for k, v in account["skipped"].items()}}


def _same_as_pack(data: Path, out: Path, pack_size: int, m: int, truncation: str, **kw) -> None:
    options = OfflinePackOptions(pack_size=pack_size, pad_seq_to_mult=m, truncation=truncation)
    _, per = lengths_by_cap(data, [options.cap], truncation=truncation, **kw)
    predicted = per[options.cap]
    packs = prepare_packed_dataset(data, out, pack_size=pack_size, pad_seq_to_mult=m, truncation=truncation, **kw)
    split = packs.manifest["splits"]["training"]
    assert _counts(predicted.account) == _counts(split["accounting"]), truncation
    assert int(predicted.lengths.sum()) == split["real_tokens"]
    assert int(aligned_lengths(predicted.lengths, options).sum()) == split["aligned_tokens"]


@pytest.mark.slow
@pytest.mark.parametrize("truncation", ["right", "reject", "oldest_turns"])
def test_chat_with_qwen3s_template(truncation, tmp_path):
    qwen3 = require_tokenizer_dir("qwen3")
    data = tmp_path / "chat.jsonl"
    write_rows(data, 150, seed=3, long_rows=4)
    _same_as_pack(data, tmp_path / "packs", 2048, 8, truncation, tokenizer=str(qwen3))


@pytest.mark.parametrize("truncation", ["right", "left", "reject"])
def test_prompt_completion_rows(truncation, tmp_path):
    data = tmp_path / "pc.jsonl"
    rows = [{"prompt": "p " * (5 + 37 * i % 300), "completion": "c " * (3 + 53 * i % 200)} for i in range(60)]
    rows += [{"prompt": "p " * 900, "completion": "done"}]  # the cut removes the whole prompt and more
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _same_as_pack(data, tmp_path / "packs", 512, 4, truncation)


@pytest.mark.slow
def test_byte_chat_rows_with_the_demo_data(tmp_path):
    from seqpack.data import demo_path

    for truncation in ("right", "oldest_turns"):
        _same_as_pack(demo_path("chat"), tmp_path / truncation, 256, 4, truncation, schema=ChatSchema())


def test_an_output_root_leads_to_its_pack_folder_or_lists_them(tmp_path):
    from seqpack.data import demo_path

    first = prepare_packed_dataset(demo_path("prompt_completion"), tmp_path / "out", pack_size=512)
    assert resolve_parquet_paths(tmp_path / "out") == resolve_parquet_paths(first.pack_dir)
    second = prepare_packed_dataset(demo_path("prompt_completion"), tmp_path / "out", pack_size=1024)
    assert pack_folders(tmp_path / "out") == sorted([first.pack_dir, second.pack_dir])
    with pytest.raises(ArtifactError) as err:
        resolve_parquet_paths(tmp_path / "out")
    assert "2 pack folders" in err.value.message and first.pack_dir.name in err.value.message
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="no pack folder"):
        resolve_parquet_paths(tmp_path / "empty")


@pytest.mark.slow
@pytest.mark.parametrize("truncation", ["right", "oldest_turns"])
def test_the_plan_verb_predicts_the_pack_verbs_packs_and_accounting(truncation, tmp_path):
    from seqpack.verbs import PackOptions, PlanOptions, pack, plan

    qwen3 = str(require_tokenizer_dir("qwen3"))
    data = tmp_path / "chat.jsonl"
    write_rows(data, 300, seed=5, long_rows=3)
    topo = dict(tp=4, cp=2, sp=True, tokenizer=qwen3, truncation=truncation)
    predicted = plan(PlanOptions(jsonl=str(data), candidates=(2048, 4096), token_slots=65536, dp=2, **topo))
    for row in predicted.rows:
        made = pack(PackOptions(input=str(data), out=str(tmp_path / "out"), pack_size=row.pack_size, **topo))
        split = made.splits["training"]
        assert row.packs == split["packs"], (truncation, row.pack_size)
        assert _counts(row.accounting) == _counts(split["accounting"])
        assert row.truncated == split["accounting"]["truncated"]
    assert predicted.tokenizer == qwen3 and made.tokenizer == qwen3 and not predicted.warnings


def test_plan_suggests_token_slots_that_fit_the_dp():
    from seqpack.verbs import PlanOptions, plan

    result = plan(PlanOptions(lengths=[300, 900, 1500, 2500] * 20, dp=3))
    assert result.recommended_pack_size is None and result.suggestions
    for s in result.suggestions:
        assert s["token_slots"] == s["pack_size"] * s["global_batch_size"] and s["global_batch_size"] % 3 == 0
    assert "--token-slots 49152 (GBS 6 at 8192)" in result.recommendation
    fixed = plan(PlanOptions(lengths=[300, 900, 1500, 2500] * 20, dp=3, token_slots=49152))
    assert fixed.recommended_pack_size is not None and fixed.suggestions == []

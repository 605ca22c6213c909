"""The eval dataset: regenerated from the code it must equal the committed files; schema and coverage."""

import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import pytest

from seqpack.core.alignment import derive_alignment
from seqpack.config.rules import FAMILIES, RULES_BY_ID
from seqpack_evals.answers import forbidden_hits, grade_answer
from seqpack_evals.builder import wrong_value
from seqpack_evals.capture import capture_cli
from seqpack_evals.dataset import diff_dataset
from seqpack_evals.fields import answer_block
from seqpack_evals.tasks import BUCKETS, PATHS, SKILL_NAME, load_tasks

ROOT = Path(__file__).resolve().parents[1]
EVALS = ROOT / "evals"
MIN_PER_BUCKET = {"explicit": 20, "implicit": 20, "contextual": 20, "near_miss": 12}
RULE_ID_TOKEN = re.compile(r"\b[A-Z][A-Z0-9]+(?:-[A-Z0-9]+){1,5}\b")


@pytest.fixture(scope="module")
def dataset():
    return load_tasks(EVALS / "tasks.json")


def _texts(task):
    out = {}
    for rel in task.files:
        path = EVALS / rel
        try:
            out[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return out


@pytest.mark.slow  # a full build: about 3 s of CPU (the outcome tasks materialise their inputs)
def test_committed_dataset_equals_a_fresh_build():
    stale = diff_dataset(EVALS)
    assert stale == [], f"evals/ is stale, rebuild with `seqpack eval build`: {stale}"


def test_size_buckets_and_unique_ids(dataset):
    ids = [t.id for t in dataset.tasks]
    assert len(ids) >= 150
    assert len(set(ids)) == len(ids)
    counts = Counter(t.bucket for t in dataset.tasks)
    assert set(counts) == set(BUCKETS)
    for bucket, minimum in MIN_PER_BUCKET.items():
        assert counts[bucket] >= minimum, (bucket, counts[bucket])


def test_agentskills_shape(dataset):
    for t in dataset.tasks:
        d = t.to_dict()
        for key in ("id", "prompt", "expected_output", "assertions", "expected_skill", "expected_script", "files"):
            assert key in d
        assert d["assertions"], t.id
        if t.bucket == "near_miss":
            assert d["expected_skill"] is None and d["expected_script"] is None, t.id
        else:
            assert d["expected_skill"] == SKILL_NAME, t.id


def test_every_rule_family_path_and_topic_is_covered(dataset):
    families = {f for t in dataset.tasks for f in t.families}
    assert families == set(FAMILIES)
    paths = {p for t in dataset.tasks for p in t.paths}
    assert paths == set(PATHS)
    topics = {p for t in dataset.tasks for p in t.topics}
    assert {"alignment", "token_slots", "inspection", "diagnosis", "rules", "model_support", "packing"} <= topics


def test_families_match_the_rule_registry(dataset):
    for t in dataset.tasks:
        assert t.families == list(dict.fromkeys(RULES_BY_ID[r].family for r in t.rule_ids)), t.id


def test_every_named_rule_id_exists(dataset):
    for t in dataset.tasks:
        for rid in t.rule_ids:
            assert rid in RULES_BY_ID, (t.id, rid)
        texts = [t.prompt, t.expected_output, *t.assertions, *_texts(t).values()]
        for text in texts:
            for token in RULE_ID_TOKEN.findall(text):
                if token.startswith(("PACK-", "CP-", "TOPO-", "BATCH-", "SEQ-", "ALIGN-", "CUDA-", "MODEL-",
                                     "DATASET-", "DATALOADER-", "HF-", "PAD-")):
                    assert token in RULES_BY_ID, (t.id, token)


def test_files_exist_and_none_are_orphans(dataset):
    referenced = set()
    for t in dataset.tasks:
        for rel in t.files:
            assert (EVALS / rel).is_file(), (t.id, rel)
            assert rel.startswith(f"files/{t.id}/"), (t.id, rel)
            referenced.add(rel)
    on_disk = {p.relative_to(EVALS).as_posix() for p in (EVALS / "files").rglob("*") if p.is_file()}
    assert on_disk == referenced


def test_contextual_tasks_ship_files(dataset):
    for t in dataset.tasks:
        if t.bucket == "contextual":
            assert t.files, t.id


def test_reference_answers_grade_right_and_trip_no_forbidden_claim(dataset):
    for t in dataset.tasks:
        wrong = [r for r in grade_answer(t.answer_fields, t.expected_output) if not r.correct]
        assert wrong == [], (t.id, wrong)
        assert forbidden_hits([f.check for f in t.forbidden], t.expected_output) == {}, t.id


def test_every_field_can_fail_and_every_forbidden_claim_can_fire(dataset):
    """Negative controls: a wrong value of each field grades wrong; each forbidden example trips its check."""
    for t in dataset.tasks:
        assert t.forbidden or t.outcome, t.id  # an outcome task's negative control is its wrong artifact
        for f in t.answer_fields:
            (result,) = grade_answer([f], answer_block([f], {f.name: wrong_value(f)}))
            assert not result.correct, (t.id, f.name)
        for fb in t.forbidden:
            assert fb.check in forbidden_hits([fb.check], fb.example), (t.id, fb.example)


def test_forbidden_checks_do_not_fire_on_the_task_input(dataset):
    for t in dataset.tasks:
        for text in [t.prompt, *_texts(t).values()]:
            assert forbidden_hits([f.check for f in t.forbidden], text) == {}, t.id


def test_prompts_ask_for_every_answer_field(dataset):
    for t in dataset.tasks:
        if not t.answer_fields:
            assert t.outcome and f"`{t.outcome['artifact']}" in t.prompt, t.id  # it asks for an artifact instead
            continue
        block = t.prompt.rsplit("```answer\n", 1)[1]
        assert [line.split(":")[0] for line in block.strip("`\n").splitlines()] == [f.name for f in t.answer_fields]


def test_negatives_and_ground_truth_sources(dataset):
    counts = Counter(t.bucket for t in dataset.tasks)
    assert counts["near_miss"] / len(dataset.tasks) >= 0.15
    sources = Counter(t.source["kind"] for t in dataset.tasks)
    assert sources["upstream"] + sources["seed"] >= 30, sources
    for t in dataset.tasks:
        if t.source["kind"] == "upstream" and "package" in t.source:  # checked by running the release
            assert t.source["package"] == "megatron-bridge==0.6.2", t.id
        elif t.source["kind"] == "upstream":
            assert {"repo", "commit", "path", "anchor"} <= set(t.source), t.id
        if t.positive:
            assert t.reference_command and t.reference_command[0] == "seqpack", t.id


def test_implicit_prompts_do_not_name_the_topic(dataset):
    named = re.compile(r"(?<![\w])pack(?:s|ed|ing)?\b|seqpack|\bskill\b|sequence packing", re.I)
    for t in (t for t in dataset.tasks if t.bucket == "implicit"):
        prose = t.prompt.split("```")[0]  # the YAML snippet may hold field names
        assert not named.search(prose), (t.id, named.search(prose).group(0))


def test_explicit_prompts_name_the_skill_or_tool(dataset):
    for t in (t for t in dataset.tasks if t.bucket == "explicit"):
        assert re.search(r"seqpack|sequence packing skill|packing skill", t.prompt, re.I), t.id


def test_near_misses_forbid_packing_advice(dataset):
    for t in (t for t in dataset.tasks if t.bucket == "near_miss" and not t.outcome):
        hits = forbidden_hits([f.check for f in t.forbidden], "Set pad_seq_to_mult = 8 and enable_offline_packing.")
        assert len(hits) == 2, t.id
        assert t.source["kind"] == "general", t.id


def test_hand_checked_ground_truth(dataset):
    tasks = dataset.by_id()
    # lcm(2*CP, CP*TP) = lcm(4, 8) = 8 for TP4/CP2/SP
    assert tasks["explicit-align-tp4-cp2-sp"].ground_truth["pad_seq_to_mult"] == 8
    # eval CP4 adds 2*4 = 8 and 4*2 = 8 to the train multiples 4 and 4
    assert tasks["explicit-align-tp2-cp2-sp-evalcp4"].ground_truth["pad_seq_to_mult"] == 8
    assert tasks["implicit-align-tp2-cp3-sp"].ground_truth["pad_seq_to_mult"] == 6
    rows = tasks["explicit-slots-65536-dp16"].ground_truth["candidates"]
    assert [(r["pack_size"], r["global_batch_size"], r["valid"]) for r in rows] == [
        (2048, 32, True), (4096, 16, True), (8192, 8, False)]
    broken = tasks["ctx-broken-offline-cp2"].ground_truth
    assert sorted(broken["violations"]) == sorted(
        ["CP-FT-PER-TOKEN-LOSS", "CP-FT-AVG-COLLECTIVE", "PACK-OFFLINE-MBS1", "PACK-OFFLINE-PAD-MULT-TOPOLOGY"])
    assert broken["resolved"]["pad_seq_to_mult"] == derive_alignment(cp=2).pad_seq_to_mult == 4
    launch = tasks["ctx-offline-8k-launch"].ground_truth["resolved"]
    assert (launch["data_parallel_size"], launch["token_slots_per_step"]) == (2, 8192 * 8)
    topo = tasks["ctx-packs-topologies"].ground_truth["verdicts"]
    # packs built with pad_seq_to_mult=4 fit CP2 and TP2/CP2/SP (both need 4), not CP4 (8) or TP4/CP2/SP (8)
    assert {k: v["usable"] for k, v in topo.items()} == {"A": True, "B": True, "C": False, "D": False}


def _replayable_logs(dataset):
    for t in dataset.tasks:
        for rel in t.files:
            if not rel.endswith(".log"):
                continue
            text = (EVALS / rel).read_text(encoding="utf-8")
            first = text.splitlines()[0]
            if first.startswith("$ seqpack ") and len(t.files) > 1:
                yield t, rel, text, shlex.split(first[len("$ seqpack "):])


def test_error_logs_are_what_seqpack_prints_for_the_shipped_inputs(dataset, tmp_path):
    replayed = 0
    for t, rel, text, argv in _replayable_logs(dataset):
        work = tmp_path / t.id
        for f in t.files:
            dest = work / f.split("/", 2)[2]
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(EVALS / f, dest)
        (work / rel.split("/", 2)[2]).unlink()
        assert capture_cli(argv, work).log() == text, t.id
        replayed += 1
    assert replayed >= 5


def test_docs_state_the_real_counts(dataset):
    text = (ROOT / "docs" / "evals.md").read_text()
    counts = Counter(t.bucket for t in dataset.tasks)
    assert f"`evals/tasks.json` holds {len(dataset.tasks)} tasks" in text
    sources = Counter(t.source["kind"] for t in dataset.tasks)
    for kind, n in sources.items():
        assert re.search(rf"^\| `{kind}` \| {n} \|", text, re.M), kind
    for bucket in BUCKETS:
        assert re.search(rf"^\| `{bucket}` \| {counts[bucket]} \|", text, re.M), bucket

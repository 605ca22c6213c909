"""card.yaml names only tests and code that exist, and agrees with the rule registry."""

import re
from pathlib import Path

import pytest
import yaml

from seqpack.config.rules import FAMILIES, RULES

ROOT = Path(__file__).resolve().parents[1]
CARD = yaml.safe_load((ROOT / "card.yaml").read_text())
STATUSES = {"code_verified", "functional_verified", "recipe_verified", "doc_only", "unclear"}
FEATURES = CARD["features"]


def _test_exists(node: str) -> bool:
    path, _, name = node.partition("::")
    file = ROOT / path
    if not file.is_file() or not name:
        return False
    return re.search(rf"^(async )?def {re.escape(name)}\(", file.read_text(), re.M) is not None


def test_card_shape():
    assert set(CARD["feature_meaning"]) == STATUSES
    for name, feature in FEATURES.items():
        assert feature["status"] in STATUSES, name
        for key in ("code", "evidence", "rule_families", "limitations", "follow_ups"):
            assert isinstance(feature[key], list), (name, key)


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_verified_claims_name_existing_tests_and_code(name):
    feature = FEATURES[name]
    if feature["status"] in ("code_verified", "functional_verified"):
        assert feature["evidence"], f"{name} claims {feature['status']} without naming tests"
    for node in feature["evidence"]:
        assert _test_exists(node), f"{name}: test {node} does not exist"
    for path in feature["code"]:
        assert (ROOT / path).is_file(), f"{name}: code {path} does not exist"
    if feature["status"] in ("doc_only", "unclear"):
        assert feature["limitations"], f"{name} is {feature['status']}: say what is missing"


def test_every_rule_family_is_claimed_once_and_constraints_match_the_registry():
    claimed = [fam for f in FEATURES.values() for fam in f["rule_families"]]
    assert sorted(claimed) == sorted(FAMILIES), "each rule family belongs to exactly one card feature"
    for name, feature in FEATURES.items():
        ids = {r.id for r in RULES if r.family in feature["rule_families"]}
        listed = set(feature["known_constraints"])
        assert listed == ids, f"{name}: card constraints differ from the registry: {sorted(listed ^ ids)}"


def test_a_missing_test_is_detected():
    assert _test_exists("tests/test_card.py::test_a_missing_test_is_detected")
    assert not _test_exists("tests/test_card.py::test_that_does_not_exist")
    assert not _test_exists("tests/nope.py::test_x")

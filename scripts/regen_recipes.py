"""Regenerate tests/upstream/recipes from Megatron-Bridge's recipe functions run in the upstream lane.

    .venv/bin/python scripts/regen_recipes.py [--check]

Needs the lane (scripts/setup_upstream.sh). See tests/upstream/recipe_dumps.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.upstream.recipe_dumps import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())

"""Build hook: ship the agent skill inside the wheel (metadata lives in pyproject.toml).

``seqpack install-skill`` copies the skill from ``skills/megatron-sequence-packing/`` of a source
checkout, or from ``seqpack/skill_assets/megatron-sequence-packing/`` of an installed wheel.
This ``build_py`` copies the first into the second at build time, so the repository keeps one
copy and a wheel (``pip install .``) carries the bundle. Editable installs read the checkout and
need no copy.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SKILL = "megatron-sequence-packing"


class BuildPyWithSkill(build_py):
    """``build_py`` plus the skill bundle under ``seqpack/skill_assets/``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        source = Path(__file__).resolve().parent / "skills" / SKILL
        if not (source / "SKILL.md").is_file():
            raise RuntimeError(f"the skill bundle {source} is missing; build from a full source tree")
        target = Path(self.build_lib) / "seqpack" / "skill_assets" / SKILL
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithSkill})

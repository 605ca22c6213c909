"""The Ray lane: tests that need ``ray`` (and ``moto`` for the S3 server) run in the lane's own venv.

``scripts/setup_ray.sh`` builds ``.venv-ray`` (seqpack with the ``ray`` extra, moto's server, pytest) and
``scripts/test.sh`` runs ``tests/ray_lane`` with it after the main suite, with ``SEQPACK_REQUIRE_RAY=1``: there
a missing package fails the run instead of skipping it. In the main venv (no ray) these tests are
reported as skipped.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("SEQPACK_REQUIRE_RAY") == "1"


def need(module: str):
    """Import ``module``, or skip (fail in the Ray lane, where it must be installed)."""
    try:
        return __import__(module)
    except ImportError:
        if REQUIRED:
            pytest.fail(f"the Ray lane needs {module}: run scripts/setup_ray.sh", pytrace=False)
        pytest.skip(f"{module} is not installed here: the Ray lane (scripts/setup_ray.sh, .venv-ray) runs this test")


@pytest.fixture(name="need", scope="session")
def need_fixture():
    """:func:`need` for the tests (a conftest is not imported by name)."""
    return need


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster of 2 CPUs for the session (the engine connects to it instead of starting one)."""
    ray = need("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/ray_lane/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.slow)

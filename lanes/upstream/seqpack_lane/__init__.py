"""The upstream lane: the released Megatron-Bridge / Megatron-Core, run as seqpack's oracle.

A second virtual environment on Python 3.12 (built from PyPI by ``scripts/setup_upstream.sh``,
pins in :mod:`.pins`) runs ``worker.py``, which answers requests with upstream code (ops in
``ops/``). seqpack's side (:mod:`.client`) never imports the upstream packages, and the worker never
imports seqpack: they exchange JSON lines and files. Tests, benchmarks and the eval grader use it.
"""

from seqpack.core.lazy import lazy_exports

__getattr__ = lazy_exports(__name__, {"UpstreamLane": "client", "UpstreamError": "client", "LaneError": "build"})

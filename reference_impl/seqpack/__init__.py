"""seqpack: sequence packing for Megatron-style LLM/VLM fine-tuning.

Folders, bottom up: ``core`` (alignment, errors, limits, choices, results, versions), ``io`` (files),
``config`` (schema and rules), ``data``, ``packing``, ``training``, ``smoke``, ``verbs`` (one module
per verb, the Python API: ``from seqpack.verbs import plan, PlanOptions``) and ``faces`` (the CLI and
the MCP server). ``core`` and ``config`` import neither torch nor pyarrow; heavy modules are imported
where they are used.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

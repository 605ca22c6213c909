"""seqpack reference implementation: sequence packing for Megatron-style fine-tuning.

Light modules (``alignment``, ``config``) import neither torch nor pyarrow; heavy ones are
imported where they are used.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

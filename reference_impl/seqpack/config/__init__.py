"""Configuration model, loading, the packing rule registry and validation.

Light on purpose: nothing here imports torch, numpy or pyarrow.
"""

from seqpack.config.load import config_from_dict, load_config
from seqpack.config.rules import RULES, get_rule, search_rules
from seqpack.config.schema import TrainingConfig
from seqpack.config.validate import Finding, ValidationReport, validate_config

__all__ = [
    "RULES",
    "Finding",
    "TrainingConfig",
    "ValidationReport",
    "config_from_dict",
    "get_rule",
    "load_config",
    "search_rules",
    "validate_config",
]

"""Configuration model, loading, the packing rule registry and validation.

Light on purpose: nothing here imports torch, numpy or pyarrow.
"""

from reference_impl.config.load import config_from_dict, load_config
from reference_impl.config.rules import RULES, get_rule, search_rules
from reference_impl.config.schema import TrainingConfig
from reference_impl.config.validate import Finding, ValidationReport, validate_config

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

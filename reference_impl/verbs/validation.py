"""``validate``: check a training config (file, text, bundled example or mapping) against every rule."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference_impl.config.validate import ValidationReport, validate_config
from reference_impl.errors import UsageError
from reference_impl.limits import MAX_CONFIG_CHARS, MAX_OVERRIDE_CHARS, MAX_OVERRIDES
from reference_impl.verbs.common import check_path

__all__ = ["ValidateOptions", "check_overrides", "config_source", "validate"]


@dataclass(frozen=True, kw_only=True)
class ValidateOptions:
    """Where the config comes from (at most one; none: the defaults) and the dotted overrides.

    ``path``: a YAML/JSON file; ``config_text``: YAML/JSON text; ``example``: a bundled example
    config by name; ``config``: a mapping or :class:`~reference_impl.config.TrainingConfig`.
    """

    path: str | os.PathLike[str] | None = None
    config_text: str | None = None
    example: str | None = None
    config: Mapping[str, Any] | Any = None
    overrides: Sequence[str] = ()


def check_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides as a list, within the limits (count and length)."""
    items = list(overrides)
    if len(items) > MAX_OVERRIDES:
        raise UsageError(f"{len(items)} overrides given; the limit is {MAX_OVERRIDES}", field="overrides")
    for item in items:
        if not isinstance(item, str) or len(item) > MAX_OVERRIDE_CHARS:
            raise UsageError(f"an override must be a string of at most {MAX_OVERRIDE_CHARS} characters",
                             field="overrides")
    return items


def config_source(path: Any = None, config_text: str | None = None, example: str | None = None,
                  config: Any = None, *, offered: tuple[str, ...] = ("config_text", "path", "example")) -> Any:
    """The one config source a verb loads (None: the defaults); refuses two sources at once.

    ``offered`` names the caller's sources in messages (text, file, example: ``path`` may be
    called otherwise, ``example`` may be absent).
    """
    names = dict(zip(("config_text", "path", "example"), offered)) | {"config": "config"}
    given = [names.get(n, n) for n, v in (("config_text", config_text), ("path", path), ("example", example),
                                          ("config", config)) if v is not None]
    if len(given) > 1:
        raise UsageError(f"give one of {', '.join(offered[:-1])} or {offered[-1]}, not {' and '.join(given)}.")
    if config_text is not None:
        if not isinstance(config_text, str) or len(config_text) > MAX_CONFIG_CHARS:
            raise UsageError(f"config_text must be text of at most {MAX_CONFIG_CHARS} characters",
                             field="config_text")
        if ":" not in config_text and not config_text.lstrip().startswith("{"):
            raise UsageError(
                "config_text must be a YAML or JSON mapping, e.g. 'train: {micro_batch_size: 1}'",
                field="config_text", fix="to validate a file, pass it as path",
            )
        # A trailing newline makes the loader read the string as text, never as a file name.
        return config_text if config_text.endswith("\n") else config_text + "\n"
    if path is not None:
        return check_path(names["path"], path)
    if example is not None:
        from reference_impl.examples import example_path

        return example_path(example)
    return config


def validate(options: ValidateOptions) -> ValidationReport:
    """Load the config (see :class:`ValidateOptions`), apply the overrides and check every rule.

    A config that breaks rules is a normal report (``ok`` false); one that cannot be read (bad
    YAML, unknown key, wrong type) raises ``ConfigError`` naming the file, line and field.
    """
    source = config_source(options.path, options.config_text, options.example, options.config)
    return validate_config(source, check_overrides(options.overrides))

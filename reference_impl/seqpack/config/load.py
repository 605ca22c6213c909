"""Load a :class:`TrainingConfig` from YAML, JSON, a dict or dotted overrides, strictly.

* Every field of Megatron-Bridge 0.6.2's config dataclasses is accepted where Bridge puts it
  (:mod:`seqpack.config.bridge_fields`); those no rule reads are ignored (listed, not checked). A key
  neither seqpack nor Bridge knows is an error that suggests the closest name of either (also keys
  renamed upstream, e.g. ``pack_sequences_in_batch`` -> ``enable_in_batch_packing``).
* Wrong types name the field and the value.
* Errors in a file carry its path and the line of the offending key; malformed YAML/JSON carries
  the parser's line number.
* ``overrides`` are ``section.field=value`` strings; the value is parsed as a YAML scalar/flow
  value (``true``, ``8``, ``null``, ``[attn, mlp]``).
* Megatron-Bridge's own config dump (``run_config.yaml``, written by ``ConfigContainer.to_yaml``) is
  read as it is: its packing-relevant fields are mapped by :mod:`seqpack.config.bridge_dump`
  and the rest is left out (overrides then apply to the mapped config, with seqpack's keys).
"""

from __future__ import annotations

import copy
import difflib
import functools
import types
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Union, get_args, get_origin, get_type_hints

import yaml

from seqpack.config.bridge_dump import from_bridge_dump, is_bridge_dump, task_encoder_name
from seqpack.config.bridge_live import container_to_mapping, is_bridge_container
from seqpack.config.bridge_fields import HYDRA_KEYS, bridge_section, bridge_version_of_fields
from seqpack.config.schema import TrainingConfig
from seqpack.config.yaml_bounded import load_yaml, read_text
from seqpack.core.errors import ConfigError

#: Keys renamed or moved upstream; the loader points users at the current name instead of guessing.
RENAMED_KEYS: dict[str, str] = {
    "pack_sequences_in_batch": "dataset.enable_in_batch_packing",
    "packed_sequence_specs": "dataset.offline_packing_specs",
    "tensor_parallel_size": "model.tensor_model_parallel_size",
    "pipeline_parallel_size": "model.pipeline_model_parallel_size",
    "cp_size": "model.context_parallel_size",
    "tp_size": "model.tensor_model_parallel_size",
}

_Locations = dict[str, tuple[str, int | None]]


class _Ctx:
    """Where the raw data came from, for error messages."""

    def __init__(self, source: str, locations: _Locations | None = None) -> None:
        self.source = source
        self.locations = locations or {}
        self.ignored: dict[str, Any] = {}  # Bridge fields given that seqpack's model has no place for, and values

    def where(self, path: str) -> tuple[str, int | None]:
        probe = path
        while probe:
            if probe in self.locations:
                return self.locations[probe]
            probe = probe.rpartition(".")[0]
        return self.source, None

    def error(self, path: str, message: str, *, fix: str | None = None) -> ConfigError:
        file, line = self.where(path)
        return ConfigError(message, file=file, line=line, field=path or None, fix=fix)


# ----------------------------------------------------------------------------------------------
# Public entry points
# ----------------------------------------------------------------------------------------------


def load_config(
    source: str | Path | Mapping[str, Any] | TrainingConfig | None = None,
    overrides: Iterable[str | tuple[str, Any]] = (),
) -> TrainingConfig:
    """Build a validated-by-type :class:`TrainingConfig` from a path, YAML/JSON text, a dict or a config.

    A string is read as a file path unless it contains a newline or starts with ``{`` (then it is
    parsed as YAML/JSON text). ``overrides`` are applied on top, as ``"section.field=value"`` strings
    (``dataset.enable_in_batch_packing=true``) or ``(dotted_key, python_value)`` pairs.
    """
    return load_config_with_keys(source, overrides)[0]


def load_config_with_keys(
    source: str | Path | Mapping[str, Any] | TrainingConfig | None = None,
    overrides: Iterable[str | tuple[str, Any]] = (),
) -> tuple[TrainingConfig, frozenset[str] | None]:
    """:func:`load_config`, plus the dotted keys the source and overrides set to a value (see
    :func:`load_config_report`)."""
    cfg, keys, _ = load_config_report(source, overrides)
    return cfg, keys


def load_config_report(
    source: str | Path | Mapping[str, Any] | TrainingConfig | None = None,
    overrides: Iterable[str | tuple[str, Any]] = (),
) -> tuple[TrainingConfig, frozenset[str] | None, dict[str, Any]]:
    """:func:`load_config`, the dotted keys the source and overrides set to a value (not null), and the
    Megatron-Bridge fields given that no rule reads (accepted and ignored; dotted key -> value, in the order
    given; a null where Bridge allows one and seqpack takes its default is listed with None).

    The keys are None for a :class:`TrainingConfig` source (every field has a definite value); a
    verb uses them to tell a value the user gave from a default it must not assume (an unset
    ``dist.world_size`` leaves the data-parallel size unknown). A file or text that holds no
    setting at all, and no override, is refused: it would validate the defaults while looking like a
check of the file (an empty file plus ``--set`` overrides is a config the overrides describe).
    """
    if source is None:
        data: dict[str, Any] = {}
        ctx = _Ctx("<defaults>")
    elif isinstance(source, TrainingConfig):
        data, ctx = source.to_dict(), _Ctx("<config>")
    elif is_bridge_container(source):  # a live Megatron-Bridge ConfigContainer (duck-typed; no megatron import)
        data, ctx = container_to_mapping(source), _Ctx("<ConfigContainer>")
    elif isinstance(source, Mapping):
        data, ctx = copy.deepcopy(dict(source)), _Ctx("<dict>")
    elif isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and not source.lstrip().startswith("{")):
        data, ctx = _read_file(Path(source))
    elif isinstance(source, str):
        data, locations = parse_config_text(source, source_name="<text>")
        ctx = _Ctx("<text>", locations)
    else:
        raise ConfigError(f"cannot load a config from {type(source).__name__}")
    if is_bridge_dump(data):
        try:
            data = from_bridge_dump(data)[0]
        except ConfigError as err:
            file, line = ctx.where(err.field or "")
            raise ConfigError(err.message, file=file, line=line, field=err.field, fix=err.fix) from None
    overrides = list(overrides)
    if not data and not overrides and ctx.source not in ("<defaults>", "<config>", "<dict>", "<ConfigContainer>"):
        raise ConfigError("the config is empty: it sets nothing, so only the defaults would be checked",
                          file=ctx.source, fix="give a YAML/JSON mapping of sections (model, dataset, train, ...)")
    for item in overrides:
        if isinstance(item, tuple):
            key, value = item
            item = f"{key}={value!r}"
        else:
            key, value = parse_override(item)
        _apply_override(data, key, value, ctx, item)
    cfg = _build(TrainingConfig, data, "", ctx)
    return cfg, (None if isinstance(source, TrainingConfig) else frozenset(_given_keys(data))), ctx.ignored


def _given_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys of ``data`` whose value is not null (sections included, then their keys)."""
    out = []
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if value is None:
            continue
        out.append(path)
        if isinstance(value, Mapping) and path.count(".") < 2:
            out.extend(_given_keys(value, path))
    return out


def config_from_dict(data: Mapping[str, Any], *, source: str = "<dict>") -> TrainingConfig:
    """Build a config from a nested dict (the form :meth:`TrainingConfig.to_dict` returns)."""
    return _build(TrainingConfig, copy.deepcopy(dict(data)), "", _Ctx(source))


def parse_override(item: str) -> tuple[str, Any]:
    """Split ``section.field=value`` and parse the value as YAML (``"true"`` -> True, ``"8"`` -> 8)."""
    if "=" not in item:
        raise ConfigError(
            f"override {item!r} must look like section.field=value",
            fix="e.g. --set dataset.enable_in_batch_packing=true",
        )
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r} has an empty key part")
    if not raw.strip():
        raise ConfigError(f"override {item!r} has no value", file="--set", field=key,
                          fix=f"write {key}=null to unset it, or give a value")
    try:
        value, _ = load_yaml(raw, source=f"--set {item}", on_malformed=_NotYaml)
    except _NotYaml:
        value = raw
    return key, value


class _NotYaml(ConfigError):
    """An override value that is not YAML: it is taken as a plain string."""


def parse_config_text(text: str, *, source_name: str = "<text>") -> tuple[dict[str, Any], _Locations]:
    """Parse YAML (or JSON, a subset) text into a dict plus a map of dotted key -> (source, line)."""
    data, node = load_yaml(text, source=source_name)  # bounded: size, alias expansion, depth, keys
    if data is None:
        return {}, {}
    if isinstance(data, str) and "\n" not in text.strip():
        raise ConfigError(f"config file not found: {text.strip()}", file=text.strip())
    if not isinstance(data, dict):
        raise ConfigError(
            f"a config must be a mapping of sections, got {type(data).__name__}", file=source_name, line=1
        )
    locations: _Locations = {}
    _collect_lines(node, "", source_name, locations)
    return data, locations


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def _read_file(path: Path) -> tuple[dict[str, Any], _Ctx]:
    text = read_text(path, what="config file")
    data, locations = parse_config_text(text, source_name=str(path))
    return data, _Ctx(str(path), locations)


def _collect_lines(node: Any, prefix: str, source: str, out: _Locations) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = str(key_node.value)
            path = f"{prefix}.{key}" if prefix else key
            out[path] = (source, key_node.start_mark.line + 1)
            _collect_lines(value_node, path, source, out)


def _apply_override(data: dict[str, Any], key: str, value: Any, ctx: _Ctx, item: str) -> None:
    parts = key.split(".")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
            node[part] = child
        if not isinstance(child, dict):
            raise ConfigError(
                f"override {item!r}: {'.'.join(parts[: depth + 1])} is a value, not a section",
                file="--set",
                field=key,
            )
        node = child
    node[parts[-1]] = value
    ctx.locations[key] = (f"--set {item}", None)


# ----------------------------------------------------------------------------------------------
# Building typed dataclasses
# ----------------------------------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _all_paths(cls: type = TrainingConfig, prefix: str = "") -> list[str]:
    out = []
    for f in fields(cls):
        path = f"{prefix}.{f.name}" if prefix else f.name
        out.append(path)
        inner = _dataclass_in(_hints(cls)[f.name])
        if inner is not None:
            out.extend(_all_paths(inner, path))
    return out


def _dataclass_in(tp: Any) -> type | None:
    if is_dataclass(tp):
        return tp  # type: ignore[return-value]
    for arg in get_args(tp):
        if is_dataclass(arg):
            return arg  # type: ignore[return-value]
    return None


def _suggest(key: str, path: str, valid: list[str]) -> str | None:
    if key in RENAMED_KEYS:
        return f"'{key}' was renamed; use {RENAMED_KEYS[key]}"
    elsewhere = [p for p in _all_paths() if p.rpartition(".")[2] == key]
    if elsewhere:
        return f"'{key}' lives at {' or '.join(elsewhere)}"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        section = path.rpartition(".")[0]
        return f"did you mean {section + '.' if section else ''}{close[0]}?"
    return None


def _build(cls: type, data: Any, path: str, ctx: _Ctx) -> Any:
    if not isinstance(data, Mapping):
        raise ctx.error(path, f"must be a mapping, got {type(data).__name__} {data!r}")
    hints = _hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        child = f"{path}.{key}" if path else key
        if key not in by_name:
            if key in HYDRA_KEYS:
                continue
            bridge = bridge_section(path) or frozenset()
            if key in bridge:  # a real Bridge field no rule reads: accepted, ignored, its own keys checked
                ctx.ignored[child] = value
                _check_bridge_value(value, child, ctx)
                continue
            _unknown(key, child, path, sorted(by_name), bridge, ctx)
        if (value is None and not _nullable(hints[key]) and hints[key] not in (int, float)
                and key in (bridge_section(path) or ())):
            # Bridge allows null here (its default applies): seqpack's default does too, and says so; a number
            # (a batch size, a length) is never assumed: null stays an error there
            ctx.ignored[child] = None
            continue
        if isinstance(value, Mapping) and _dataclass_in(hints[key]) is None and bridge_section(child) is not None:
            value = task_encoder_name(value) if key == "task_encoder" else None
            if value is None:  # Bridge's object where seqpack keeps a name, and nothing names it: not checked
                ctx.ignored[child] = data[key]
                _check_bridge_value(data[key], child, ctx)
                continue
        kwargs[key] = _coerce(hints[key], value, child, ctx, by_name[key].metadata)
    return cls(**kwargs)


def _nullable(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp)


def _unknown(key: str, child: str, path: str, ours: list[str], bridge: frozenset[str], ctx: _Ctx) -> None:
    """Raise the error for ``key``, known neither to seqpack's section ``path`` nor to Bridge's."""
    hint = _suggest(key, child, sorted({*ours, *bridge}))
    where = f"in section '{path}'" if path else "at the top level"
    neither = f"(neither seqpack nor Megatron-Bridge {bridge_version_of_fields()} has '{key}' there)"
    if hint:
        raise ctx.error(child, f"unknown key {where}; {hint} {neither}")
    more = f"; Megatron-Bridge has {len(bridge - set(ours))} more, none close" if bridge else ""
    raise ctx.error(child, f"unknown key {where} {neither}", fix=f"seqpack's keys here: {', '.join(ours)}{more}")


def _check_bridge_value(value: Any, path: str, ctx: _Ctx) -> None:
    """The keys of a Bridge section seqpack does not model (``optimizer``, ``model.transformer``, ...)
    checked against Bridge's own field names; a Bridge field that is not a section holds anything."""
    names = bridge_section(path)
    if names is None or not isinstance(value, Mapping):
        return
    for key, inner in value.items():
        key = str(key)
        child = f"{path}.{key}"
        if key in HYDRA_KEYS:
            continue
        if key not in names:
            hint = _suggest(key, child, sorted(names))
            message = (f"unknown key in Megatron-Bridge's section '{path}' (Megatron-Bridge "
                       f"{bridge_version_of_fields()} has no such field)")
            raise ctx.error(child, f"{message}; {hint}" if hint else message,
                            fix=None if hint else f"Bridge's fields there: {', '.join(sorted(names)[:40])}"
                            + (" ..." if len(names) > 40 else ""))
        _check_bridge_value(inner, child, ctx)


_TYPE_WORDS = {int: "an integer", bool: "true or false", str: "a string", float: "a number"}


def _coerce(tp: Any, value: Any, path: str, ctx: _Ctx, meta: Mapping[str, Any]) -> Any:
    try:
        return _coerce_value(tp, value, path, ctx, meta)
    except ConfigError as err:
        help_text = _field_help().get(path)
        if help_text and err.field == path and "(what it is:" not in err.message:
            err.message = f"{err.message} (what it is: {help_text.rstrip('.')})"
            err.args = (err.message,)
        raise


def _coerce_value(tp: Any, value: Any, path: str, ctx: _Ctx, meta: Mapping[str, Any]) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(get_args(tp)):
            return None
        return _coerce(args[0] if len(args) == 1 else Union[tuple(args)], value, path, ctx, meta)
    if value is None:
        raise ctx.error(path, "may not be null")
    if is_dataclass(tp):
        return _build(tp, value, path, ctx)
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ctx.error(path, f"must be one of {', '.join(map(str, choices))}, got {value!r}{hint}")
        return value
    if origin is list:
        (item_type,) = get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ctx.error(path, f"must be a list, got {type(value).__name__} {value!r}")
        return [_coerce(item_type, v, f"{path}[{i}]", ctx, {}) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ctx.error(path, f"must be a mapping, got {type(value).__name__} {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ctx.error(path, f"must be true or false, got {value!r} ({type(value).__name__})")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(path, f"must be an integer, got {value!r} ({type(value).__name__})")
        minimum = meta.get("minimum")
        if minimum is not None and value < minimum:
            raise ctx.error(path, f"must be >= {minimum}, got {value}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ctx.error(path, f"must be a number, got {value!r} ({type(value).__name__})")
        minimum = meta.get("minimum")
        if minimum is not None and value < minimum:
            raise ctx.error(path, f"must be >= {minimum}, got {value}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ctx.error(path, f"must be a string, got {value!r} ({type(value).__name__})")
        return value
    raise ctx.error(path, f"unsupported field type {tp!r}")  # pragma: no cover - schema bug


@functools.lru_cache(maxsize=1)
def _field_help() -> dict[str, str]:
    out: dict[str, str] = {}

    def walk(cls: type, prefix: str) -> None:
        for f in fields(cls):
            path = f"{prefix}.{f.name}" if prefix else f.name
            if prefix:
                out[path] = str(f.metadata.get("help", ""))
            inner = _dataclass_in(_hints(cls)[f.name])
            if inner is not None:
                walk(inner, path)

    walk(TrainingConfig, "")
    return out


def field_help() -> dict[str, str]:
    """Dotted field path -> help text (the schema's ``metadata["help"]``).

    Load errors quote it: a value of the wrong type (or out of range, or not one of the choices)
    is reported with what the field is.
    """
    return dict(_field_help())


__all__ = [
    "RENAMED_KEYS",
    "config_from_dict",
    "field_help",
    "load_config",
    "load_config_report",
    "load_config_with_keys",
    "parse_config_text",
    "parse_override",
]

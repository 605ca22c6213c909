"""Read YAML (and JSON, a subset) from users with bounds, so a small input cannot exhaust the machine.

A few hundred bytes of YAML aliases (``b: [*a, *a, ...]`` nested a few times) expand into billions
of nodes: PyYAML builds them as shared references, but everything that walks the value afterwards
(copying, type checks, JSON output) visits every one. :func:`load_yaml` composes the node graph
once and checks, before anything is constructed:

* the text is at most :data:`MAX_YAML_CHARS` characters;
* the value, with every alias expanded, has at most :data:`MAX_YAML_NODES` nodes, and no alias
  refers to a node that contains it (a recursive structure);
* nesting is at most :data:`MAX_YAML_DEPTH` levels deep;
* no mapping repeats a key (YAML says keys are unique; PyYAML silently keeps the last one);
* no integer is longer than Python converts (``sys.get_int_max_str_digits()``).

Every refusal is a :class:`~seqpack.core.errors.ConfigError` (or the ``error`` class the caller
passes) naming the source and the line. The walk visits each distinct node once (sizes are
memoised), so checking costs time linear in the text, whatever the expansion.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from seqpack.core.errors import ConfigError, SeqpackError

__all__ = ["MAX_YAML_CHARS", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "load_yaml", "read_bytes", "read_text"]

#: Longest YAML/JSON text read (a training config is a few KB).
MAX_YAML_CHARS = 1_000_000
#: Most nodes of the value with every alias expanded.
MAX_YAML_NODES = 100_000
#: Deepest nesting of mappings and sequences.
MAX_YAML_DEPTH = 64

#: libyaml's safe loader when PyYAML was built with it (about 10x faster), else the pure-Python one.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _check_graph(root: yaml.Node, source: str, error: type[SeqpackError]) -> None:
    """Expanded size, recursion, depth, duplicate keys and long integers (iterative, memoised)."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    digits = sys.get_int_max_str_digits() or None
    # (node, depth, children_done): a node is pushed once to expand and once to total its children
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            if total > MAX_YAML_NODES:
                raise error(
                    f"the YAML expands to more than {MAX_YAML_NODES} values (aliases repeat what they point at)",
                    file=source, line=_line(node), fix="write the config out without alias chains",
                )
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise error("a YAML alias refers to a node that contains it (a recursive structure)",
                        file=source, line=_line(node))
        if depth > MAX_YAML_DEPTH:
            raise error(f"the YAML is nested deeper than {MAX_YAML_DEPTH} levels", file=source, line=_line(node))
        if isinstance(node, yaml.ScalarNode):
            if digits and node.tag == _INT_TAG and len(node.value.lstrip("+-").replace("_", "")) > digits:
                raise error(f"an integer of {len(node.value)} characters is longer than the {digits} digits "
                            "Python reads", file=source, line=_line(node))
            size[key] = 1
            continue
        if isinstance(node, yaml.MappingNode):
            _check_duplicate_keys(node, source, error)
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_duplicate_keys(node: yaml.MappingNode, source: str, error: type[SeqpackError]) -> None:
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        ident = (key_node.tag, key_node.value)
        if ident in seen:
            raise error(
                f"duplicate key {key_node.value!r} (first on line {seen[ident]}); YAML keys must be unique",
                file=source, line=_line(key_node), field=str(key_node.value),
                fix="keep one of the two entries",
            )
        seen[ident] = _line(key_node)


def read_bytes(path: Path, *, what: str, error: type[SeqpackError] = ConfigError, max_bytes: int) -> bytes:
    """The bytes of a file a user gave, refused when it holds more than ``max_bytes`` (a sparse file of
    many GB by its size, before reading; ``/dev/zero`` after ``max_bytes + 1`` bytes). Opened through the
    file-access layer: regular files only, inside the allowed roots."""
    from seqpack.io import reading
    with reading.open_regular(path, what=what, error=error) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise error(f"{what} is larger than {max_bytes:,} bytes ({size:,})", file=str(path))
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise error(f"{what} is larger than {max_bytes:,} bytes", file=str(path))
    return raw


def read_text(
    path: Path, *, what: str, error: type[SeqpackError] = ConfigError, max_bytes: int = MAX_YAML_CHARS * 4
) -> str:
    """The text of a YAML/JSON file written by a user: read to the size limit at most (:func:`read_bytes`),
    decoded as UTF-8, and for a ``.json`` file checked as JSON so a syntax error names its line.

    ``what`` names the file in messages ("config file", "blend manifest").
    """
    raw = read_bytes(path, what=what, error=error, max_bytes=max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 (byte {exc.start})", file=str(path)) from None
    if path.suffix.lower() == ".json":
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"malformed JSON: {exc.msg} (column {exc.colno})", file=str(path), line=exc.lineno) from None
        except (ValueError, RecursionError):
            pass  # a too long number or too deep nesting: load_yaml names the line
    return text


def load_yaml(
    text: str,
    *,
    source: str = "<text>",
    error: type[SeqpackError] = ConfigError,
    on_malformed: type[SeqpackError] | None = None,
) -> tuple[Any, Any]:
    """Parse ``text`` within the bounds of the module docstring; return ``(value, root node)``.

    The node (None for an empty document) carries line numbers for error messages. Malformed
    YAML raises ``on_malformed`` (default: ``error``) with the parser's line.
    """
    malformed = on_malformed or error
    if len(text) > MAX_YAML_CHARS:
        raise error(f"the text is {len(text)} characters long; the limit is {MAX_YAML_CHARS}", file=source)
    loader = LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_graph(node, source, error)
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise malformed(f"malformed YAML: {exc.problem or exc}", file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise malformed(f"malformed YAML: {exc}", file=source) from None
    except RecursionError:
        raise error(f"the YAML is nested too deeply to read (limit {MAX_YAML_DEPTH} levels)", file=source) from None
    finally:
        loader.dispose()

"""Bounds on rendering an untrusted chat template, enforced inside the render.

A chat template is code from a tokenizer directory. jinja's sandbox stops it from reaching Python
internals, but not from looping for ever, recursing, or building a string of ten gigabytes. The
environment of :func:`seqpack.data.chat_render.compile_template` adds the bounds below
(:mod:`seqpack.core.limits` holds the numbers); crossing one raises
:class:`TemplateBoundExceeded`, which the render turns into one error naming the template file.

* **steps**: every loop iteration, call and filter application takes one step of
  :data:`~seqpack.core.limits.MAX_TEMPLATE_STEPS` per render; the clock
  (:data:`~seqpack.core.limits.MAX_TEMPLATE_SECONDS`) and the caller's cooperative stop
  (:func:`seqpack.data.interrupt.checkpoint`: an MCP job's time limit or cancellation) are
  checked on every call and every 64th iteration, so a looping template stops mid-row;
* **depth**: calls (macros, ``caller()``, recursive loops) nest at most
  :data:`~seqpack.core.limits.MAX_TEMPLATE_DEPTH` deep;
* **sizes, before allocating**: ``*``, ``+``, ``%``, ``~``, ``**``, ``join``, ``replace``,
  ``indent``, ``format`` and friends estimate their result first: a string longer than
  :data:`~seqpack.core.limits.MAX_TEMPLATE_CHARS`, a container longer than
  :data:`~seqpack.core.limits.MAX_TEMPLATE_ITEMS` or an integer wider than
  :data:`~seqpack.core.limits.MAX_TEMPLATE_INT_BITS` is refused; an integer argument beyond the
  character bound (a width, a count) is refused at the call; every call's result and the rendered
  text are checked too.

Loops and ``~`` are bounded by rewriting the parsed template (:class:`_Rewrite`): each ``for``
iterates through :meth:`BoundedSandbox.seqpack_loop` and each ``~`` joins through
:meth:`BoundedSandbox.seqpack_concat`. Outside :func:`render_budget` only the size checks apply.
"""

from __future__ import annotations

import math
import re
import string
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

from jinja2 import nodes, pass_context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg
from jinja2.visitor import NodeTransformer

from seqpack.core import limits
from seqpack.data.interrupt import checkpoint

__all__ = ["BoundedSandbox", "TemplateBoundExceeded", "bounded_text", "check_value", "guarded_join", "render_budget",
           "text_limit"]


class TemplateBoundExceeded(SecurityError):
    """A render crossed one of the bounds of the module docstring (a jinja ``TemplateError``)."""


class _Budget:
    __slots__ = ("deadline", "depth", "seconds", "steps")

    def __init__(self, seconds: float, steps: int) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.steps = steps
        self.depth = 0


_local = threading.local()


@contextmanager
def render_budget(
    seconds: float = limits.MAX_TEMPLATE_SECONDS, steps: int = limits.MAX_TEMPLATE_STEPS
) -> Iterator[None]:
    """Give the renders on this thread inside the block one budget of steps and seconds."""
    previous = getattr(_local, "budget", None)
    _local.budget = _Budget(seconds, steps)
    try:
        yield
    finally:
        _local.budget = previous


def _step(clock: bool) -> None:
    budget = getattr(_local, "budget", None)
    if budget is None:
        return
    budget.steps -= 1
    if budget.steps < 0:
        raise TemplateBoundExceeded(
            f"it took more than {limits.MAX_TEMPLATE_STEPS:,} loop iterations and calls (a loop that does not end?)"
        )
    if clock or not budget.steps & 63:
        if time.monotonic() > budget.deadline:
            raise TemplateBoundExceeded(f"it rendered for more than {budget.seconds:g} s")
        checkpoint()


# ------------------------------------------------------------------------------------------------ sizes
def _too_long(n: int, what: str = "a string") -> None:
    if n > limits.MAX_TEMPLATE_CHARS:
        raise TemplateBoundExceeded(f"it builds {what} of {n:,} characters (more than {limits.MAX_TEMPLATE_CHARS:,})")


def _too_many(n: int) -> None:
    if n > limits.MAX_TEMPLATE_ITEMS:
        raise TemplateBoundExceeded(f"it builds a list of {n:,} items (more than {limits.MAX_TEMPLATE_ITEMS:,})")


def _too_wide(bits: float) -> None:
    if bits > limits.MAX_TEMPLATE_INT_BITS:
        raise TemplateBoundExceeded(
            f"it computes an integer of about {int(min(bits, 1e18)):,} bits (more than {limits.MAX_TEMPLATE_INT_BITS:,})"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_value(value: Any) -> Any:
    """``value`` unchanged when it is within the size bounds; else :class:`TemplateBoundExceeded`."""
    if isinstance(value, str):
        _too_long(len(value))
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        _too_many(len(value))
    elif _is_int(value):
        _too_wide(value.bit_length())
    return value


def _check_int_args(args: Any, kwargs: dict[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        if _is_int(value) and abs(value) > limits.MAX_TEMPLATE_CHARS:
            raise TemplateBoundExceeded(
                f"it passes {_short_int(value)} to a call (a width or count beyond {limits.MAX_TEMPLATE_CHARS:,})"
            )


def _short_int(value: int) -> str:
    bits = value.bit_length()
    return str(value) if bits < 64 else f"an integer of {bits:,} bits"


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 0


def _text_items(value: Any) -> list[Any]:
    """The items of an iterable about to be joined (at most MAX_TEMPLATE_ITEMS + 1 are taken)."""
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, (str, dict)):
        items = list(value)
    else:
        items = list(islice(iter(value), limits.MAX_TEMPLATE_ITEMS + 1))
    _too_many(len(items))
    return list(items)


def _joined(items: list[Any], separator: str) -> int:
    return sum(len(x) if isinstance(x, str) else 32 for x in items) + len(separator) * max(len(items) - 1, 0)


def _replaced(text: str, old: Any, new: Any, count: Any = -1) -> int:
    if not (isinstance(old, str) and isinstance(new, str)) or len(new) <= len(old):
        return len(text)
    hits = text.count(old) if old else len(text) + 1
    if _is_int(count) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * (len(new) - len(old))


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


def _check_format_digits(fmt: str) -> None:
    """Refuse a ``%``/``str.format`` specification whose width or precision passes the character bound."""
    for run in _DIGITS.findall(fmt):
        if len(run) > 9 or int(run) > limits.MAX_TEMPLATE_CHARS:
            raise TemplateBoundExceeded(
                f"it formats with a width or precision of {run[:20]} (beyond {limits.MAX_TEMPLATE_CHARS:,})"
            )


def _check_percent(left: str, right: Any) -> None:
    _check_format_digits("".join(m.group(0) for m in _PERCENT_SPEC.finditer(left)))
    values = right if isinstance(right, tuple) else (right,)
    _check_int_args(values, {})


def _check_brace_format(fmt: str, args: Any, kwargs: dict[str, Any]) -> None:
    nested = False
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same error itself
    for _literal, _field, spec, _conv in parsed:
        if spec:
            _check_format_digits(spec)
            nested = nested or "{" in spec
    if nested:
        _check_int_args(args, kwargs)


def _estimate_method(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Pre-allocation estimates for the ``str`` methods whose result can outgrow their inputs."""
    owner = getattr(obj, "__self__", None)
    if not isinstance(owner, str):
        return
    name = getattr(obj, "__name__", "")
    if name == "join" and args:
        _too_long(_joined(_text_items(args[0]), owner))
    elif name == "replace" and len(args) >= 2:
        _too_long(_replaced(owner, *args[:3]))
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if _is_int(size):
            _too_long(len(owner) + owner.count("\t") * max(size, 0))
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        _too_long(len(owner) * max(longest, 1))


def _estimate_filter(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Pre-allocation estimates for the filters whose result can outgrow their inputs."""
    value = args[0] if args else None
    if name == "join" and value is not None:
        sep = args[1] if len(args) > 1 else kwargs.get("d", "")
        _too_long(_joined(_text_items(value), sep if isinstance(sep, str) else ""))
    elif name == "replace" and isinstance(value, str) and len(args) >= 3:
        _too_long(_replaced(value, *args[1:4]))
    elif name == "indent" and isinstance(value, str):
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        per_line = len(width) if isinstance(width, str) else width if _is_int(width) else 0
        _too_long(len(value) + (value.count("\n") + 1) * max(per_line, 0))
    elif name == "wordwrap" and isinstance(value, str):
        width = args[1] if len(args) > 1 else kwargs.get("width", 79)
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring", "\n")
        breaks = len(value) // max(width if _is_int(width) else 1, 1) + 1
        _too_long(len(value) + breaks * (len(wrap) if isinstance(wrap, str) else 1))
    elif name == "format" and isinstance(value, str):
        _check_percent(value, tuple(args[1:]))
    elif name in {"escape", "e", "forceescape", "urlencode"} and isinstance(value, str):
        if len(value) * 6 > limits.MAX_TEMPLATE_CHARS:
            _too_long(len(value) + 5 * sum(value.count(c) for c in "&<>\"'%"))


def _guard_filter(name: str, func: Any) -> Any:
    """``func`` with a step, the pre-estimates and the result check (context-passing, so jinja never
    folds it into a constant at compile time, where no budget runs)."""
    kind = _PassArg.from_obj(func)

    @pass_context
    def guarded(context: Any, *args: Any, **kwargs: Any) -> Any:
        _step(clock=True)
        _check_int_args(args[1:], kwargs)
        _estimate_filter(name, args, kwargs)
        if kind is _PassArg.context:
            args = (context, *args)
        elif kind is _PassArg.eval_context:
            args = (context.eval_ctx, *args)
        elif kind is _PassArg.environment:
            args = (context.environment, *args)
        return check_value(func(*args, **kwargs))

    guarded.__name__ = getattr(func, "__name__", name)
    return guarded


# ------------------------------------------------------------------------------------------------ the environment
class _Rewrite(NodeTransformer):
    """Route every ``for`` through ``seqpack_loop`` and every ``~`` through ``seqpack_concat``."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("seqpack_loop"), [node.iter], [], None, None,
                               lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(nodes.EnvironmentAttribute("seqpack_concat"), list(node.nodes), [], None, None,
                          lineno=node.lineno)


class _Counted:
    """An iterable whose iteration takes a step per item (its length, when it has one, is kept)."""

    __slots__ = ("_items",)

    def __init__(self, items: Any) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        for item in self._items:
            _step(clock=False)
            yield item


def text_limit(input_chars: int) -> int:
    """Longest text a render of a conversation of ``input_chars`` characters may write: its own text
    :data:`~seqpack.core.limits.TEMPLATE_CHARS_PER_INPUT_CHAR` times over plus
    :data:`~seqpack.core.limits.TEMPLATE_MARKUP_CHARS` of markup, at most
    :data:`~seqpack.core.limits.MAX_TEMPLATE_CHARS`."""
    grown = limits.TEMPLATE_MARKUP_CHARS + limits.TEMPLATE_CHARS_PER_INPUT_CHAR * max(input_chars, 0)
    return min(limits.MAX_TEMPLATE_CHARS, grown)


def bounded_text(parts: Any, limit: int = limits.MAX_TEMPLATE_CHARS) -> Iterator[str]:
    """The pieces of a render's output, refused once together they pass ``limit`` characters."""
    total = 0
    for part in parts:
        total += len(part)
        if total > limit:
            raise TemplateBoundExceeded(
                f"it writes more than {limit:,} characters for a conversation whose own text is far shorter"
                if limit < limits.MAX_TEMPLATE_CHARS else
                f"it writes more than {limit:,} characters"
            )
        yield part


def guarded_join(parts: Any) -> str:
    """``"".join`` of a render's output pieces, refused once together they pass the character bound."""
    out: list[str] = []
    append = out.append
    total, limit = 0, limits.MAX_TEMPLATE_CHARS
    for part in parts:
        total += len(part)
        if total > limit:
            _too_long(total, "a text")
        append(part)
    return "".join(out)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja's immutable sandbox with the bounds of the module docstring."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    concat = staticmethod(guarded_join)  # joins the output of the template, its macros and set blocks

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = {name: _guard_filter(name, func) for name, func in self.filters.items()}
        lipsum = self.globals["lipsum"]

        def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
            if not all(_is_int(v) and v <= 1000 for v in (n, min, max)):
                raise TemplateBoundExceeded("it asks lipsum() for more than 1000 paragraphs or words")
            return str(lipsum(n=n, html=html, min=min, max=max))

        self.globals["lipsum"] = bounded_lipsum

    def set_filter(self, name: str, func: Any) -> None:
        """Add or replace filter ``name``, bounded like the built-in ones."""
        self.filters[name] = _guard_filter(name, func)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _Rewrite().visit(super()._parse(source, name, filename))

    def seqpack_loop(self, iterable: Any) -> _Counted:
        """What a ``for`` iterates (a step per item)."""
        return _Counted(iterable)

    def seqpack_concat(self, *parts: Any) -> str:
        """``a ~ b ~ ...``: the parts as text, refused before joining when they pass the bound."""
        texts = [str(p) for p in parts]
        _too_long(sum(map(len, texts)))
        return "".join(texts)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """``*``, ``**``, ``+`` and ``%`` with their result sizes estimated first."""
        if operator == "+":
            if type(left) is str and type(right) is str:  # the common case (templates that join with +)
                if len(left) + len(right) > limits.MAX_TEMPLATE_CHARS:
                    _too_long(len(left) + len(right))
                return left + right
            if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                _too_many(len(left) + len(right))
        elif operator == "**":
            if _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
                _too_wide(right * math.log2(abs(left)))
        elif operator == "*":
            if _is_int(left) and _is_int(right):
                _too_wide(left.bit_length() + right.bit_length())
            else:
                seq, times = (left, right) if _is_int(right) else (right, left)
                if _is_int(times) and isinstance(seq, (str, list, tuple)):
                    n = len(seq) * max(times, 0)
                    _too_long(n) if isinstance(seq, str) else _too_many(n)
        elif operator == "%" and isinstance(left, str):
            _check_percent(left, right)
        return check_value(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any) -> Any:
        """``str.format``/``format_map`` with their width and precision specifications bounded."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def bounded(*args: Any, **kwargs: Any) -> str:
            _check_brace_format(fmt, args, kwargs)
            return check_value(wrapped(*args, **kwargs))

        bounded.seqpack_format = True  # type: ignore[attr-defined]
        return bounded

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's signature
        """Every call of the template: a step, depth, argument and result checks."""
        _step(clock=True)
        if not getattr(__obj, "seqpack_format", False):  # str.format checks its own arguments
            _check_int_args(args, kwargs)
        _estimate_method(__obj, args, kwargs)
        budget = getattr(_local, "budget", None)
        if budget is None:
            return check_value(super().call(__context, __obj, *args, **kwargs))
        budget.depth += 1  # inline, not a context manager: this runs for every call of the template
        try:
            if budget.depth > limits.MAX_TEMPLATE_DEPTH:
                raise TemplateBoundExceeded(
                    f"its calls nest more than {limits.MAX_TEMPLATE_DEPTH} deep (a macro or loop that recurses?)"
                )
            return check_value(super().call(__context, __obj, *args, **kwargs))
        finally:
            budget.depth -= 1

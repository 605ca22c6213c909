"""Rendering Hugging Face chat templates with jinja2, the way ``transformers`` does, without it.

The environment matches the one ``transformers`` builds for ``apply_chat_template``: sandboxed,
``trim_blocks`` and ``lstrip_blocks`` on, the ``loopcontrols`` extension, ``raise_exception``,
``strftime_now`` and a ``tojson`` filter that writes plain JSON (no HTML escaping, non-ASCII kept,
``indent``/``separators``/``sort_keys`` accepted). Two choices differ on purpose:

* ``strftime_now`` formats a fixed date, :data:`RENDER_DATE`, not today's, so the same data packs
  to the same bytes on any day (Llama 3.x and GPT-OSS templates print the date). Pass a
  ``date_string`` template variable to choose another date where a template reads one.
* ``{% generation %}`` / ``{% endgeneration %}`` blocks render their body and record its character
  span, like the assistant-mask tracking of ``transformers``; :func:`render` returns the spans.

A template is untrusted code: every render runs under the bounds of
:mod:`seqpack.data.template_bounds` (steps, time, sizes, call depth), and a template that
crosses one, recurses, overflows or touches what the sandbox forbids is refused with a
:class:`~seqpack.core.errors.ConfigError` naming the template's file, whatever row it was
rendering. A template that fails on one conversation's shape (a ``raise_exception``, a missing
key) is that row's :class:`~seqpack.core.errors.InputError`.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Sequence
from typing import Any

from seqpack.core import limits
from seqpack.core.errors import ConfigError, InputError

RENDER_DATE = _dt.datetime(2024, 7, 26)
_PLAIN_TYPES = frozenset({str, dict, list, tuple, int, float, bool, type(None)})
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")



class TemplateRefused(InputError):
    """The chat template refused a conversation (its ``raise_exception``, or an expression that fails on this
    shape of messages): the row is well-formed, the model's template does not render it. A pipeline may skip
    and count such rows (``ChatSchema(on_template_error="skip")``)."""


def has_generation_blocks(template: str) -> bool:
    """Whether ``template`` marks trained text with ``{% generation %}`` blocks."""
    return bool(_GENERATION_RE.search(template))


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_template(source: str, name: str, file: str | None = None) -> Any:
    """Compile a chat template; :class:`ConfigError` naming ``file`` and the template line when it does not compile.

    ``file`` is where the template was read (``chat_template.jinja`` or ``tokenizer_config.json``);
    every later refusal of the template names it too.
    """
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension

    from seqpack.data.template_bounds import BoundedSandbox

    class GenerationTracker(Extension):
        """``{% generation %}...{% endgeneration %}``: renders the body and records where it landed."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_track", []), [], [], body).set_lineno(lineno)

        def _track(self, caller: Any) -> str:
            text = caller()
            sink = getattr(self.environment, "generation_sink", None)
            if sink is not None:
                done = sum(len(part) for part in sink["parts"])
                sink["spans"].append((done, done + len(text)))
            return text

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return RENDER_DATE.strftime(fmt)

    class Sandbox(BoundedSandbox):
        """The bounded immutable sandbox, with its per-access safety verdict cached for plain types.

        For ``str``/``dict``/``list``/..., jinja's loop object and namespaces the verdict depends
        only on the type and the attribute name, so caching it changes nothing but speed
        (attribute checks dominate rendering time).
        """

        _verdicts: dict[tuple[type, str], bool] = {}
        _plain = _PLAIN_TYPES | {jinja2.runtime.LoopContext, jinja2.utils.Namespace}

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            kind = type(obj)
            if kind not in self._plain:
                return bool(super().is_safe_attribute(obj, attr, value))
            key = (kind, attr)
            verdict = self._verdicts.get(key)
            if verdict is None:
                verdict = self._verdicts[key] = bool(super().is_safe_attribute(obj, attr, value))
            return verdict

    field = "chat_template" if file is None or file.endswith(".json") else None
    if len(source) > limits.MAX_TEMPLATE_SOURCE_CHARS:
        raise ConfigError(f"chat_template of {name} has {len(source):,} characters (more than "
                          f"{limits.MAX_TEMPLATE_SOURCE_CHARS:,})", file=file, field=field)
    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, "jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.set_filter("tojson", _tojson)
    env.seqpack_where = (name, file, field)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ConfigError(
            f"chat_template of {name} does not compile (template line {exc.lineno}): {exc.message}", file=file,
            field=field,
        ) from None
    except (RecursionError, MemoryError, ValueError, ArithmeticError) as exc:  # nesting, or a literal too long
        raise ConfigError(f"chat_template of {name} does not compile: {_reason(exc)}", file=file, field=field) from None


def _input_chars(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> int:
    """Characters of the conversation's own JSON text (what bounds the rendered text's length)."""
    return len(json.dumps([list(messages), list(tools or ())], ensure_ascii=False, default=str))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "it nests or recurses too deeply"
    if isinstance(exc, MemoryError):
        return "it needs more memory than there is"
    return f"{type(exc).__name__}: {exc}".split("; use sys.set_int_max_str_digits")[0]


def render(
    template: Any,
    messages: Sequence[dict[str, Any]],
    variables: dict[str, Any],
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    track: bool = False,
) -> tuple[str, list[tuple[int, int]]]:
    """Render ``messages`` (template-ready dicts); returns the text and the ``{% generation %}`` spans.

    ``variables`` holds the special-token strings and any extra template variables. A template
    error (``raise_exception`` or a failing expression) becomes :class:`InputError` on ``messages``.
    """
    import jinja2

    from seqpack.data.template_bounds import bounded_text, render_budget, text_limit

    context = {**variables, "messages": list(messages), "add_generation_prompt": add_generation_prompt}
    if tools is not None:
        context["tools"] = list(tools)
    env = template.environment
    sink: dict[str, list[Any]] = {"parts": [], "spans": []}
    limit = text_limit(_input_chars(messages, tools))
    try:
        with render_budget():
            if track:
                env.generation_sink = sink
            for part in bounded_text(template.generate(**context), limit):
                sink["parts"].append(part)
            return "".join(sink["parts"]), list(sink["spans"])
    except (jinja2.exceptions.SecurityError, RecursionError, MemoryError, ArithmeticError) as exc:
        name, file, field = env.seqpack_where
        what = str(exc) if isinstance(exc, jinja2.exceptions.SecurityError) else _reason(exc)
        raise ConfigError(
            f"the chat template of {name} was stopped on a conversation of {len(messages)} message(s): {what}",
            file=file, field=field, fix="use a chat template that renders in bounded time and size",
        ) from None
    except jinja2.exceptions.TemplateError as exc:
        raise TemplateRefused(f"chat template failed on {len(messages)} message(s): {exc}", field="messages") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, AssertionError) as exc:  # jinja filters assert
        raise TemplateRefused(
            f"chat template failed on {len(messages)} message(s) ({type(exc).__name__}: {exc}); "
            "the template may not support this message shape (tool calls, reasoning, roles)",
            field="messages",
        ) from None
    finally:
        if track:
            env.generation_sink = None

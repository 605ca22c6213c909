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
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Sequence
from typing import Any

from reference_impl.errors import ConfigError, InputError

RENDER_DATE = _dt.datetime(2024, 7, 26)
_PLAIN_TYPES = frozenset({str, dict, list, tuple, int, float, bool, type(None)})
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation_blocks(template: str) -> bool:
    """Whether ``template`` marks trained text with ``{% generation %}`` blocks."""
    return bool(_GENERATION_RE.search(template))


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_template(source: str, name: str) -> Any:
    """Compile a chat template; :class:`ConfigError` naming the template line when it does not compile."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

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

    class Sandbox(ImmutableSandboxedEnvironment):
        """The immutable sandbox, with its per-access safety verdict cached for plain types.

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

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, "jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ConfigError(
            f"chat_template of {name} does not compile (template line {exc.lineno}): {exc.message}", field="chat_template"
        ) from None


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

    context = {**variables, "messages": list(messages), "add_generation_prompt": add_generation_prompt}
    if tools is not None:
        context["tools"] = list(tools)
    env = template.environment
    sink: dict[str, list[Any]] | None = {"parts": [], "spans": []} if track else None
    try:
        if sink is None:
            return str(template.render(**context)), []
        env.generation_sink = sink
        for part in template.generate(**context):
            sink["parts"].append(part)
        return "".join(sink["parts"]), list(sink["spans"])
    except jinja2.exceptions.TemplateError as exc:
        raise InputError(f"chat template failed on {len(messages)} message(s): {exc}", field="messages") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        raise InputError(
            f"chat template failed on {len(messages)} message(s) ({type(exc).__name__}: {exc}); "
            "the template may not support this message shape (tool calls, reasoning, roles)",
            field="messages",
        ) from None
    finally:
        if sink is not None:
            env.generation_sink = None

"""The eval nonce: a value seqpack prints so an eval harness can tell a real tool run from a claimed one.

The eval harness (``seqpack eval run``) sets ``SEQPACK_EVAL_NONCE`` to a per-task secret seed in
the agent's environment. While it is set, every ``seqpack`` CLI run and every MCP tool result
carries the *printed* nonce :func:`nonce_for` ``(seed)``, a digest of the seed, never the seed:

* ``--json`` output of a dict gains the key :data:`NONCE_KEY` (``seqpack.faces.cli._output``);
* every CLI run ends with the line ``seqpack-nonce: <value>`` on stderr (``seqpack.faces.cli``);
* every MCP tool result gains a text block with that line and ``_meta["seqpack/nonce"]``
  (``seqpack.faces.mcp.stamped``).

The scorer credits a seqpack tool call only when its recorded result contains the printed
nonce, so an agent that says it ran a command, or echoes ``$SEQPACK_EVAL_NONCE``, earns nothing.
Without the variable nothing is added, so ordinary output never changes. Pure, no I/O beyond
reading the environment.
"""

from __future__ import annotations

import hashlib
import os
import re

ENV_VAR = "SEQPACK_EVAL_NONCE"
NONCE_KEY = "seqpack_nonce"
LINE_PREFIX = "seqpack-nonce: "
_SEED = re.compile(r"^[A-Za-z0-9._-]{8,128}$")
PRINTED = re.compile(r"\bsqn-[0-9a-f]{20}\b")


def nonce_for(seed: str) -> str:
    """The printed nonce for a seed (``sqn-`` and 20 hex digits of a SHA-256 of the seed)."""
    return "sqn-" + hashlib.sha256(f"seqpack-eval-nonce:{seed}".encode()).hexdigest()[:20]


def current_nonce() -> str | None:
    """The printed nonce of this process, or None when no (well-formed) seed is set."""
    seed = os.environ.get(ENV_VAR, "")
    return nonce_for(seed) if _SEED.match(seed) else None


def nonce_line() -> str | None:
    """``seqpack-nonce: <value>`` for this process, or None when no seed is set."""
    value = current_nonce()
    return None if value is None else LINE_PREFIX + value


__all__ = ["ENV_VAR", "LINE_PREFIX", "NONCE_KEY", "PRINTED", "current_nonce", "nonce_for", "nonce_line"]

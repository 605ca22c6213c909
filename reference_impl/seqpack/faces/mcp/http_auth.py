"""A bearer token for the streamable-HTTP transport (``seqpack mcp --transport http --token-file FILE``).

The MCP security best practices (2026-07-28) ask a local HTTP server for an authorization token
(or a unix socket): any process of any user on the machine can reach 127.0.0.1. With a token
file, every HTTP request must carry ``Authorization: Bearer <token>``; any other request gets
``401`` with a fixed body and a ``WWW-Authenticate: Bearer`` header, before the MCP app reads
it, so nothing of the request (or the token) is echoed. The token is compared in constant time
and never logged. The file holds the token on one line (surrounding whitespace is ignored).
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from seqpack.core.errors import UsageError

log = logging.getLogger("seqpack.mcp")

#: The shortest token accepted (characters).
MIN_TOKEN_CHARS = 16
#: The longest token file read (bytes); a token is a line, not a document.
MAX_TOKEN_FILE_BYTES = 4096
UNAUTHORIZED_BODY = b'{"error":"unauthorized","message":"missing or wrong bearer token"}'

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["BearerTokenGuard", "MIN_TOKEN_CHARS", "read_token_file"]


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in ``path``: printable ASCII without spaces, at least :data:`MIN_TOKEN_CHARS` long.

    A missing, unreadable, empty, oversized or malformed file is a :class:`UsageError` naming the
    file (never the token). A file others may read is accepted with a warning in the log.
    """
    where = str(path)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError("the token file is not a regular file", file=where, field="token-file")
        if info.st_size > MAX_TOKEN_FILE_BYTES:
            raise UsageError(f"the token file is larger than {MAX_TOKEN_FILE_BYTES} bytes; it must hold one token",
                             file=where, field="token-file")
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the token file: {exc.strerror or exc}", file=where, field="token-file",
                         fix="create it, e.g. python -c \"import secrets; print(secrets.token_urlsafe(32))\" > FILE"
                         ) from None
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UsageError("the token file must hold ASCII text", file=where, field="token-file") from None
    if len(token) < MIN_TOKEN_CHARS or any(not (33 <= ord(c) <= 126) for c in token):
        raise UsageError(f"the token must be one word of at least {MIN_TOKEN_CHARS} printable characters",
                         file=where, field="token-file",
                         fix="write a random token, e.g. "
                         "python -c \"import secrets; print(secrets.token_urlsafe(32))\"")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the token file %s can be read by other users; chmod 600 it", where)
    return token


class BearerTokenGuard:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401, unread."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode("ascii")

    def _authorized(self, scope: Scope) -> bool:
        values = [v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"]
        return len(values) == 1 and hmac.compare_digest(values[0], self._expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass lifespan events and authorized requests on; answer the rest with 401 (a websocket: closed)."""
        if scope["type"] == "lifespan" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        log.info("refused an HTTP request without the bearer token (%s %s)", scope.get("method"),
                 scope.get("path"))
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(UNAUTHORIZED_BODY)).encode()),
            (b"www-authenticate", b'Bearer realm="seqpack"')]})
        await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})

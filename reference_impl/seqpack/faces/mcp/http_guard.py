"""What the streamable-HTTP transport adds around the SDK's app: bounded accepts, one answer per request id,
DNS-rebinding protection on host and port, and no secret in the access log.

* :class:`BackoffSocket`: the listening socket. Out of file descriptors, asyncio's accept loop (CPython 3.11)
  keeps calling ``accept`` for the whole backlog on every tick and logs a traceback each time (tens of MB a
  few seconds, 80-100 % CPU). The first refused ``accept`` of a burst raises, so the event loop stops
  watching the socket and retries a second later; the next ones in the same burst say "nothing to accept".
  :func:`accept_errors_once` logs one line when accepting stops, and one more only once it has worked again
  for :data:`QUIET_S`.
* :class:`DistinctRequestIds`: ASGI middleware. Two requests in flight in one session with the same JSON-RPC
  id would share one response slot in the SDK (the others wait until the server stops); the second is
  answered at once with a JSON-RPC error naming the id.
* :func:`transport_security`: the hosts and origins a request may name: 127.0.0.1 and localhost **on this
  port** (the SDK's default accepts any port, so a page on another local port could reach the server).
* :class:`RedactQuery`: the access log's request line without query values (a token passed as ``?token=`` is
  refused by the bearer guard, and must not be written to the log in clear either).
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger("seqpack.mcp")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["BackoffSocket", "DistinctRequestIds", "RedactQuery", "accept_errors_once", "transport_security"]

#: ``accept`` errors that mean "out of a resource", not "a bad connection".
EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: Seconds during which a refused ``accept`` is not tried again (the event loop retries after one second).
BACKOFF_S = 0.5
#: Largest request body read to look at its id (the SDK's own limit is 4 MiB; a larger one passes unread).
MAX_BODY_BYTES = 4 << 20
_ACCEPT_MESSAGE = "socket.accept() out of system resource"


class BackoffSocket(socket.socket):
    """A listening socket whose ``accept`` fails once per burst when the process is out of descriptors
    (module docstring); it logs when accepting works again."""

    refused_at: float | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        """``socket.accept``; within :data:`BACKOFF_S` of a refusal for want of a resource, "nothing to accept"."""
        if self.refused_at is not None and time.monotonic() - self.refused_at < BACKOFF_S:
            raise BlockingIOError(errno.EAGAIN, "backing off: out of a resource")
        try:
            conn = super().accept()
        except OSError as exc:
            if exc.errno in EXHAUSTED:
                self.refused_at = _AcceptLog.last = time.monotonic()
                _AcceptLog.refusals += 1
            raise
        self.refused_at = None
        if _AcceptLog.reported and time.monotonic() - _AcceptLog.last >= QUIET_S:
            log.warning("accepting connections again (%d refused since the last report)", _AcceptLog.refusals)
            _AcceptLog.reported, _AcceptLog.refusals = False, 0
        return conn


#: Seconds without a refused ``accept`` after which accepting counts as working again (and is logged).
QUIET_S = 10.0


class _AcceptLog:
    reported = False
    refusals = 0
    last = 0.0


def accept_errors_once(loop: Any) -> None:
    """Make ``loop`` log "cannot accept connections" once per episode (one line, no traceback), and pass every
    other error to its default handler."""

    def handler(the_loop: Any, context: dict[str, Any]) -> None:
        if context.get("message") != _ACCEPT_MESSAGE:
            the_loop.default_exception_handler(context)
            return
        if not _AcceptLog.reported:
            _AcceptLog.reported = True
            exc = context.get("exception")
            reason = getattr(exc, "strerror", None) or str(exc)
            log.error("cannot accept connections: %s; retrying every second until it works (raise the limit with "
                      "ulimit -n, or end what holds the descriptors)", reason)

    loop.set_exception_handler(handler)


def transport_security(port: int) -> Any:
    """DNS-rebinding protection for a server on ``127.0.0.1:port``: Host and Origin must name this port."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = [f"127.0.0.1:{port}", f"localhost:{port}"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"http://{h}" for h in hosts])


class DistinctRequestIds:
    """ASGI middleware: a request whose JSON-RPC id is already in flight in its session is answered at once
    with ``-32600`` (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._in_flight: set[tuple[str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, unless it reuses an id in flight in its session."""
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        session = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"mcp-session-id"),
                       None)
        messages, complete = await _read_body(receive)
        replay = _replaying(messages, receive)
        ident = _request_id(b"".join(m.get("body", b"") for m in messages)) if complete and session else None
        if ident is None:
            await self.app(scope, replay, send)
            return
        key = (session, json.dumps(ident))
        if key in self._in_flight:
            await _refuse(send, ident)
            return
        self._in_flight.add(key)
        try:
            await self.app(scope, replay, send)
        finally:
            self._in_flight.discard(key)


async def _read_body(receive: Receive) -> tuple[list[MutableMapping[str, Any]], bool]:
    """The request's body messages, up to :data:`MAX_BODY_BYTES`; whether the body is complete."""
    messages: list[MutableMapping[str, Any]] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request":
            return messages, False
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return messages, True
        if size > MAX_BODY_BYTES:
            return messages, False


def _replaying(messages: list[MutableMapping[str, Any]], receive: Receive) -> Receive:
    queue = list(messages)

    async def replay() -> MutableMapping[str, Any]:
        return queue.pop(0) if queue else await receive()

    return replay


def _request_id(body: bytes) -> Any:
    """The id of a JSON-RPC request (a message with a method and an id), else None."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    ident = message.get("id")
    return ident if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None


async def _refuse(send: Send, ident: Any) -> None:
    from mcp_types import INVALID_REQUEST

    shown = json.dumps(ident)[:80]
    body = json.dumps({"jsonrpc": "2.0", "id": ident, "error": {
        "code": INVALID_REQUEST,
        "message": f"Invalid request: id {shown} is already used by a request in flight in this session; give "
                   "each request its own id"}}).encode()
    log.info("refused a request reusing id %s of a request in flight", shown)
    await send({"type": "http.response.start", "status": 400, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class RedactQuery(logging.Filter):
    """A filter for uvicorn's access log: the request line keeps the names of its query parameters, never
    their values (``/mcp?token=...`` is logged as ``/mcp?token=<redacted>``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the path argument of an access-log record; every record passes."""
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


def redact_query(path: str) -> str:
    """``path`` with the value of every query parameter replaced by ``<redacted>`` (a part without ``=``, such
    as ``?SECRET``, is a value too: all of it is replaced)."""
    base, _, query = path.partition("?")
    parts = [part.partition("=") for part in query.split("&") if part]
    return base + "?" + "&".join(f"{name}=<redacted>" if equals else "<redacted>" for name, equals, _ in parts)

"""Malformed JSON-RPC on stdio gets a JSON-RPC error answer, not silence.

The SDK's stdio transport drops a line it cannot validate (it hands the exception to a logger), so
a client that sent a lone surrogate escape, ``params`` that are not an object, or broken JSON
waits for ever. :func:`checked_line` classifies each line before the SDK reads it, with the
bounded JSON reader of user input (:func:`seqpack.data.jsontext.loads`): a line that is
fine passes unchanged; a bad one is replaced by a notification of the private method
:data:`MALFORMED` carrying the request id (when one can be read), the JSON-RPC error code and the
reason. :class:`AnsweringReadStream` sits between the transport and the server: it answers those
notifications with a ``JSONRPCError`` on the write stream and never passes them on.

Codes: ``-32700`` (parse error: not JSON, not UTF-8 text), ``-32600`` (invalid request: not an
object, no ``jsonrpc: "2.0"``, no method, an id that is neither a string nor an integer) and
``-32602`` (invalid params: ``params`` not an object, a lone surrogate or too deep a nesting in
them). The HTTP transport answers these itself (status 400 with a JSON-RPC error body).

stdin is read by :class:`FdLines` as it becomes readable, not by a thread blocked in ``read``: Ctrl-C stops
the server at once, even while a tool runs, and a line is bounded (:data:`MAX_LINE_BYTES`).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any

from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCNotification

from seqpack.data import jsontext

__all__ = ["MALFORMED", "AnsweringReadStream", "CheckedLines", "checked_line", "checked_stdio"]

#: Method of the notification that stands in for a malformed line (never sent by a client).
MALFORMED = "seqpack/malformed-message"


def _problem(line: str) -> tuple[Any, int, str] | None:
    """``(id, code, reason)`` for a line the server must refuse, else None."""
    if not line.strip():
        return None
    try:
        message = jsontext.loads(line.strip())
    except json.JSONDecodeError as exc:
        return None, PARSE_ERROR, f"Parse error: {exc.msg} (column {exc.colno})"
    except jsontext.JsonProblem as exc:
        ident = _id_of(line)
        where = f" in {exc.field}" if exc.field else ""
        code = INVALID_PARAMS if ident is not None else INVALID_REQUEST
        return ident, code, f"Invalid params: {exc.message}{where}"
    if not isinstance(message, dict):
        kind = "a batch (array)" if isinstance(message, list) else type(message).__name__
        return None, INVALID_REQUEST, f"Invalid request: a message must be a JSON object, got {kind}"
    ident = message.get("id")
    if "id" in message and not (isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))):
        return None, INVALID_REQUEST, "Invalid request: id must be a string or an integer"
    if message.get("jsonrpc") != "2.0":
        return ident, INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"'
    is_reply = "id" in message and ("result" in message or "error" in message)
    if not is_reply and not isinstance(message.get("method"), str):
        return ident, INVALID_REQUEST, "Invalid request: no method"
    if "params" in message and message["params"] is not None and not isinstance(message["params"], dict):
        return ident, INVALID_PARAMS, "Invalid params: params must be a JSON object"
    return None


def _id_of(line: str) -> Any:
    """The id of a message whose text is JSON but not usable (read with Python's lenient parser)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    ident = message.get("id") if isinstance(message, dict) else None
    if isinstance(ident, str):
        try:
            ident.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return ident
    return ident if isinstance(ident, int) and not isinstance(ident, bool) else None


def checked_line(line: str) -> str:
    """``line`` unchanged when it is a readable JSON-RPC message, else a :data:`MALFORMED` notification."""
    problem = _problem(line)
    if problem is None:
        return line
    ident, code, reason = problem
    stand_in = {"jsonrpc": "2.0", "method": MALFORMED, "params": {"id": ident, "code": code, "message": reason}}
    return json.dumps(stand_in) + "\n"


class CheckedLines:
    """The lines of an async text stream, each passed through :func:`checked_line`."""

    def __init__(self, source: Any) -> None:
        self._source = source

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for line in self._source:
            yield checked_line(line)


class AnsweringReadStream:
    """A transport's read stream that answers :data:`MALFORMED` notifications on ``write_stream``."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    def __getattr__(self, name: str) -> Any:  # last_context and the like
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        """The next message the server must see (malformed ones are answered here instead)."""
        from mcp.shared.message import SessionMessage

        while True:
            item = await self._inner.receive()
            message = getattr(item, "message", None)
            if isinstance(message, JSONRPCNotification) and message.method == MALFORMED:
                params = message.params or {}
                error = JSONRPCError(jsonrpc="2.0", id=params.get("id"),
                                     error=ErrorData(code=int(params.get("code", INVALID_REQUEST)),
                                                     message=str(params.get("message", "Invalid request"))))
                await self._write.send(SessionMessage(error))
                continue
            return item

    async def aclose(self) -> None:
        """Close the wrapped stream."""
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except Exception as exc:  # the end of the stream, as the wrapped stream signals it
            import anyio

            if isinstance(exc, (anyio.EndOfStream, anyio.ClosedResourceError)):
                raise StopAsyncIteration from None
            raise

    async def __aenter__(self) -> AnsweringReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


@contextmanager
def _private_stdin() -> Iterator[int]:
    """A private descriptor of the process's stdin, with fd 0 pointed at the null device meanwhile
    (what the SDK's own stdio transport does, so a child process reads EOF, not the protocol)."""
    private = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        yield private
    finally:
        os.dup2(private, 0)
        os.close(private)


#: Longest message line read on stdio (the HTTP transport's body limit is 4 MiB; an inline list of a million
#: lengths is about 8 MB of JSON): a longer line is answered with an error and skipped, never held whole.
MAX_LINE_BYTES = 64 << 20


class FdLines:
    """The lines of a file descriptor, read as it becomes readable: waiting is an ``await`` the event loop can
    cancel (Ctrl-C stops the server at once, even while a tool runs), not a thread blocked in ``read``. A line
    over ``limit`` bytes becomes a :data:`MALFORMED` stand-in (``-32600``) and the rest of it is skipped."""

    def __init__(self, fd: int, limit: int = MAX_LINE_BYTES) -> None:
        self.fd, self.limit = fd, limit

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        import stat

        import anyio
        import anyio.lowlevel

        pollable = not stat.S_ISREG(os.fstat(self.fd).st_mode)  # a file as stdin is always readable
        buf, skipping = bytearray(), False
        while True:
            if pollable:
                await anyio.wait_readable(self.fd)
            else:
                await anyio.lowlevel.checkpoint()
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                if buf and not skipping:
                    yield buf.decode("utf-8", "replace")
                return
            buf += chunk
            while (end := buf.find(b"\n")) >= 0:
                line, buf = bytes(buf[: end + 1]), buf[end + 1:]
                if skipping:
                    skipping = False
                    continue
                yield line.decode("utf-8", "replace")
            if len(buf) > self.limit:
                if not skipping:
                    yield json.dumps({"jsonrpc": "2.0", "method": MALFORMED, "params": {
                        "id": None, "code": INVALID_REQUEST,
                        "message": f"Invalid request: a message longer than {self.limit} bytes"}}) + "\n"
                buf, skipping = bytearray(), True


@asynccontextmanager
async def checked_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport reading :class:`CheckedLines` of :class:`FdLines` of stdin; yields
    ``(read_stream, write_stream)``."""
    from mcp.server.stdio import stdio_server

    with _private_stdin() as fd:
        async with stdio_server(stdin=CheckedLines(FdLines(fd))) as (read_stream, write_stream):  # type: ignore[arg-type]
            yield AnsweringReadStream(read_stream, write_stream), write_stream

"""The HTTP MCP server under a hostile or exhausted client (issue 34, families 3, 5 and 6).

Classes: out of file descriptors (``ulimit -n``), the server used to spin at 80-100 % CPU writing tens of
MB of identical tracebacks: now it logs one line, backs off, and serves again once descriptors are free;
four concurrent requests reusing one JSON-RPC id in a session left three unanswered until the server
stopped: now each gets an answer (the duplicates a ``-32600`` naming the id); a ``Host`` header naming
127.0.0.1 on another port passed the DNS-rebinding protection: now refused (so is such an ``Origin``); a
token passed as ``?token=`` was refused but written in clear to the access log: now its value is redacted.
Negative controls: distinct ids all succeed, this port's Host is served, a token in the header works.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seqpack.training.ranks import reserved_port

pytestmark = pytest.mark.slow  # a server process each

REPO = Path(__file__).resolve().parents[2]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


@contextlib.contextmanager
def http_server(tmp_path: Path, *extra: str, nofile: int | None = None) -> Iterator[tuple[int, Path]]:
    """``seqpack mcp --transport http`` on a reserved port until the block ends; yields (port, its log file)."""
    log = tmp_path / "server.log"

    def limits() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with reserved_port() as port, log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "seqpack", "mcp", "--transport", "http", "--port", str(port), "--root",
             str(tmp_path), "--lifetime", "120", *extra],
            stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, preexec_fn=limits,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            deadline = time.monotonic() + 60
            while "listening on" not in log.read_text() or not _can_connect(port):
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            yield port, log
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _can_connect(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def post(port: int, message: dict[str, Any], *, session: str | None = None, host: str | None = None,
         origin: str | None = None, path: str = "/mcp", headers: dict[str, str] | None = None,
         timeout: float = 60) -> tuple[int, dict[str, str], Any]:
    """POST one JSON-RPC message; (status, headers, the JSON answer or the body text)."""
    head = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25", **(headers or {})}
    if session:
        head["mcp-session-id"] = session
    if host:
        head["Host"] = host
    if origin:
        head["Origin"] = origin
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(message).encode(), headers=head)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, got, body = response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as err:
        status, got, body = err.code, dict(err.headers), err.read().decode()
    data = [line[5:].strip() for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]
    try:
        answer = json.loads(data[-1] if data else body)
    except ValueError:
        answer = body
    return status, {k.lower(): v for k, v in got.items()}, answer


def session_of(port: int) -> str:
    status, headers, answer = post(port, INIT)
    assert status == 200 and "result" in answer, (status, answer)
    post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=headers["mcp-session-id"])
    return headers["mcp-session-id"]


# ------------------------------------------------------------------------------------------------ request ids
def _concurrent_calls(port: int, session: str, ids: list[int]) -> list[Any]:
    """Call a tool that takes a moment, once per id, all at once; the answers (None: none within the deadline)."""
    answers: list[Any] = [None] * len(ids)

    def one(k: int) -> None:
        call = {"jsonrpc": "2.0", "id": ids[k], "method": "tools/call", "params": {
            "name": "plan_pack_length", "arguments": {"mix": "long_tail", "n": 2_000_000, "candidates": [4096]}}}
        try:
            answers[k] = post(port, call, session=session, timeout=90)
        except OSError as exc:  # no answer in time
            answers[k] = ("no answer", str(exc))

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return answers


def test_concurrent_requests_reusing_one_id_all_get_an_answer(tmp_path):
    with http_server(tmp_path) as (port, _):
        session = session_of(port)
        answers = _concurrent_calls(port, session, [7, 7, 7, 7])
        fine = _concurrent_calls(port, session, [11, 12, 13, 14])  # negative control: distinct ids
    assert all(isinstance(a, tuple) and a[0] in (200, 400) for a in answers), answers
    results = [a[2] for a in answers if isinstance(a[2], dict) and "result" in a[2]]
    refused = [a[2] for a in answers if isinstance(a[2], dict) and "error" in a[2]]
    assert len(results) >= 1 and len(results) + len(refused) == 4, answers
    assert all(r["error"]["code"] == -32600 and "id 7 is already used" in r["error"]["message"] and r["id"] == 7
               for r in refused), refused
    assert [a[2]["id"] for a in fine] == [11, 12, 13, 14] and all("result" in a[2] for a in fine), fine


# ------------------------------------------------------------------------------------------------ host and origin
def test_dns_rebinding_protection_checks_the_port(tmp_path):
    with http_server(tmp_path) as (port, _):
        other = port + 1 if port < 65535 else port - 1
        assert post(port, INIT, host=f"127.0.0.1:{other}")[0] == 421
        assert post(port, INIT, host=f"localhost:{other}")[0] == 421
        assert post(port, INIT, host="evil.example")[0] == 421
        assert post(port, INIT, host=f"127.0.0.1:{port}", origin=f"http://127.0.0.1:{other}")[0] == 403
        # negative controls: this port, by address or name, from a page of this origin
        assert post(port, INIT, host=f"127.0.0.1:{port}")[0] == 200
        assert post(port, INIT, host=f"localhost:{port}", origin=f"http://localhost:{port}")[0] == 200


# ------------------------------------------------------------------------------------------------ access log
def test_a_token_in_the_query_string_never_reaches_the_log(tmp_path):
    secret = "s3cret-token-value-0123456789"
    (tmp_path / "token").write_text(secret + "\n")
    os.chmod(tmp_path / "token", 0o600)
    with http_server(tmp_path, "--token-file", str(tmp_path / "token")) as (port, log):
        refused = post(port, INIT, path=f"/mcp?token={secret}&x=1")
        allowed = post(port, INIT, headers={"Authorization": f"Bearer {secret}"})  # negative control
        time.sleep(0.5)
        text = log.read_text()
    assert refused[0] == 401 and allowed[0] == 200
    assert secret not in text, text
    assert "/mcp?token=<redacted>&x=<redacted>" in text, text


@pytest.mark.parametrize("query, logged", [
    ("s3cret-token-value", "<redacted>"),  # a bare value (no name) was kept in clear as if it were a name
    ("a=1&s3cret-token-value&b", "a=<redacted>&<redacted>&<redacted>"),
    ("token=s3cret=token=value", "token=<redacted>"),
    ("==s3cret-token-value", "=<redacted>"),
])
def test_every_query_value_is_redacted_named_or_bare(query, logged):
    from seqpack.faces.mcp.http_guard import redact_query

    assert redact_query(f"/mcp?{query}") == f"/mcp?{logged}"
    assert redact_query("/mcp/sub?") == "/mcp/sub?"  # negative control: no value, nothing changed


# ------------------------------------------------------------------------------------------------ descriptors
def test_out_of_descriptors_the_server_logs_once_backs_off_and_recovers(tmp_path):
    with http_server(tmp_path, nofile=48) as (port, log):
        held = []
        for _ in range(80):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        time.sleep(4)
        flooded = log.read_text()
        for s in held:
            s.close()
        time.sleep(1.5)
        session = session_of(port)  # served again once descriptors are free
        status, _, answer = post(port, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "derive_alignment", "arguments": {"cp": 2}}}, session=session)
    assert flooded.count("cannot accept connections") == 1, flooded[-3000:]
    assert "Traceback" not in flooded and len(flooded) < 20_000, len(flooded)
    assert status == 200 and answer["result"]["isError"] is False, answer

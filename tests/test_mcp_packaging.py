"""What the MCP server adds for packaging and safety: the optional-extra hints (CLI and MCP, same text), the skill
as ``skill://`` resources with the Skills extension (sha256 per file), the HTTP bearer token, ``resource_link``
items for what the writing tools wrote, and ``-32602`` for an unknown prompt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult, Request, ResourceLink, TextContent
from pydantic import TypeAdapter

from seqpack.core import extras
from seqpack.faces.cli import main
from seqpack.core.errors import UsageError
from seqpack.core.extras import MissingExtraError, missing_extra_error, require_extra
from seqpack.faces.mcp.server import build_server
from seqpack.faces.mcp.http_auth import UNAUTHORIZED_BODY, BearerTokenGuard, read_token_file
from seqpack.faces.mcp.links import add_links
from seqpack.verbs.packing import pack_links
from seqpack.faces.mcp.registry import TOOLS
from seqpack.faces.mcp.roots import AllowedRoots
from seqpack.faces.mcp.skills import SKILLS_EXTENSION, GetSkillParams, SkillBundle
from seqpack.faces.install_skill import SKILL_NAME, find_skill_dir, read_frontmatter

REPO = Path(__file__).resolve().parents[1]
HINT = "the 'train' extra is not installed (torch is missing). Fix: pip install 'seqpack[train]'"
NEEDS = {"run_packing_smoke_test": "train", "inspect_in_batch": "train", "inspect_global_batch": "train",
         "inspect_offline_batches": "train", "prepare_energon_dataset": "energon"}
ANY = TypeAdapter(dict[str, Any])


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def no_torch(monkeypatch):
    """Pretend torch (and so the train and energon extras) is not installed."""
    real = extras._installed
    monkeypatch.setattr(extras, "_installed", lambda module: module != "torch" and real(module))


# ------------------------------------------------------------------------------------------------
# Extras: one line naming the extra, CLI and MCP alike
# ------------------------------------------------------------------------------------------------


def test_require_extra_names_the_extra_only_when_it_is_missing(no_torch):
    with pytest.raises(MissingExtraError) as info:
        require_extra("train")
    assert str(info.value) == HINT and isinstance(info.value, UsageError)
    require_extra("hf")  # installed here: no error
    with pytest.raises(ValueError, match="unknown extra"):
        require_extra("cuda")


def test_require_extra_passes_where_the_extra_is_installed():
    """Negative control of the hint: the test venv has every CPU extra."""
    for extra in ("train", "energon", "hf", "vlm"):
        require_extra(extra)
    assert extras.missing_modules("train") == []


@pytest.mark.parametrize("name, extra", [("torch", "train"), ("torch.distributed", "train"), ("megatron", "train"),
                                         ("megatron.core.packed_seq_params", "train"), ("megatron.energon", "energon"),
                                         ("jinja2", "hf"), ("tokenizers", "hf"), ("PIL", "vlm"),
                                         ("transformer_engine.pytorch", "gpu")])
def test_an_import_error_of_an_extra_module_becomes_the_hint(name, extra):
    error = missing_extra_error(ModuleNotFoundError(f"No module named '{name}'", name=name))
    assert error is not None and error.extra == extra and f"pip install 'seqpack[{extra}]'" in str(error)


def test_other_import_errors_are_not_hints():
    assert missing_extra_error(ModuleNotFoundError("No module named 'yaml2'", name="yaml2")) is None
    assert missing_extra_error(ImportError("cannot import name 'x'")) is None
    assert missing_extra_error(ValueError("torch")) is None


def test_cli_prints_the_hint_in_one_line_and_exits_2(no_torch, capsys):
    assert main(["smoke", "--no-cp"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"seqpack smoke: error: {HINT}\n"


def test_cli_maps_a_late_import_error_to_the_hint(monkeypatch, capsys, tmp_path):
    """A command without a declared extra that fails importing one (a chat template needs jinja2) says so too."""
    import seqpack.verbs.alignment as alignment

    def run(options):
        raise ModuleNotFoundError("No module named 'jinja2'", name="jinja2")

    monkeypatch.setattr(alignment, "align", run)
    assert main(["align", "--tp", "2"]) == 2
    assert capsys.readouterr().err == ("seqpack align: error: the 'hf' extra is not installed (jinja2 is missing). "
                                       "Fix: pip install 'seqpack[hf]'\n")


def test_cli_help_names_the_extra_of_heavy_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(needs seqpack[train])" in out and "(needs seqpack[energon])" in out


@pytest.mark.anyio
async def test_mcp_tools_answer_the_same_hint(no_torch, tmp_path):
    async with Client(build_server([tmp_path], skill_dir=None)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name, extra in NEEDS.items():
            assert tools[name].description.rstrip().endswith(
                f"Needs the optional '{extra}' extra (pip install 'seqpack[{extra}]').")
        assert not any("Needs the optional" in (t.description or "") for n, t in tools.items() if n not in NEEDS)
        result = await client.call_tool("run_packing_smoke_test", {"cp_check": False})
        assert result.is_error is True
        assert result.content[0].text == f"Error executing tool run_packing_smoke_test: {HINT}"
        assert result.meta["seqpack/error"]["error"] == "MissingExtraError"
        ok = await client.call_tool("derive_alignment", {"tp": 2, "cp": 2})
        assert ok.is_error is False


def test_every_declared_extra_is_known():
    assert {spec.extra for spec in TOOLS.values() if spec.extra} <= set(extras.EXTRAS)
    assert {name for name, spec in TOOLS.items() if spec.extra} == set(NEEDS)


# ------------------------------------------------------------------------------------------------
# The skill as skill:// resources and the Skills extension
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def bundle_dir(tmp_path) -> Path:
    skill = tmp_path / SKILL_NAME
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: {SKILL_NAME}\ndescription: Pack sequences. Use when packing.\n"
                                    "metadata:\n  version: 0.1.0\n---\n# Packing\n")
    (skill / "references" / "offline.md").write_text("# Offline\n")
    (skill / "blob.bin").write_bytes(b"\xff\x00\xfe")
    (skill / ".hidden").write_text("not served\n")
    return skill


async def _request(client: Client, method: str, params: Any = None) -> dict[str, Any]:
    return await client.session.send_request(Request(method=method, params=params), ANY)


@pytest.mark.anyio
async def test_skill_files_are_resources_with_sha256_digests(bundle_dir, tmp_path):
    async with Client(build_server([tmp_path], skill_dir=bundle_dir)) as client:
        assert client.server_capabilities.extensions == {SKILLS_EXTENSION: {}}
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        skill_uris = sorted(u for u in listed if u.startswith("skill://"))
        assert skill_uris == [f"skill://{SKILL_NAME}/{p}" for p in ("SKILL.md", "blob.bin", "references/offline.md")]
        top = listed[f"skill://{SKILL_NAME}/SKILL.md"]
        assert top.mime_type == "text/markdown" and top.name == SKILL_NAME
        assert top.description == "Pack sequences. Use when packing."
        text = await client.read_resource(f"skill://{SKILL_NAME}/SKILL.md")
        assert text.contents[0].text == (bundle_dir / "SKILL.md").read_text()
        blob = await client.read_resource(f"skill://{SKILL_NAME}/blob.bin")
        assert getattr(blob.contents[0], "blob", None)  # bytes that are not UTF-8 travel as a blob

        listing = await _request(client, "skills/list", {})
        (entry,) = listing["skills"]
        assert entry["uri"] == f"skill://{SKILL_NAME}/SKILL.md"
        assert entry["frontmatter"] == read_frontmatter(bundle_dir / "SKILL.md")
        digests = {r["uri"]: (r["digest"], r["size"]) for r in entry["resources"]}
        for rel in ("SKILL.md", "blob.bin", "references/offline.md"):
            data = (bundle_dir / rel).read_bytes()
            assert digests[f"skill://{SKILL_NAME}/{rel}"] == (f"sha256:{hashlib.sha256(data).hexdigest()}", len(data))
        assert len(digests) == 3
        # the digests describe what resources/read serves now
        (bundle_dir / "references" / "offline.md").write_text("# Offline, edited\n")
        again = await _request(client, "skills/get", GetSkillParams(uri=entry["uri"]))
        edited = {r["uri"]: r["digest"] for r in again["skill"]["resources"]}
        assert edited[f"skill://{SKILL_NAME}/references/offline.md"] == \
            f"sha256:{hashlib.sha256(b'# Offline, edited' + bytes([10])).hexdigest()}"
        with pytest.raises(MCPError) as info:
            await _request(client, "skills/get", GetSkillParams(uri="skill://other/SKILL.md"))
        assert info.value.error.code == -32602


@pytest.mark.anyio
async def test_a_bundle_that_does_not_name_its_directory_declares_no_extension(bundle_dir, tmp_path, caplog):
    renamed = bundle_dir.rename(tmp_path / "other-name")
    with caplog.at_level(logging.WARNING, logger="seqpack.mcp"):
        assert SkillBundle.load(renamed) is None
    assert "not served as skill:// resources" in caplog.text
    async with Client(build_server([tmp_path], skill_dir=renamed)) as client:
        assert not (client.server_capabilities.extensions or {})
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert not any(u.startswith("skill://") for u in uris) and "seqpack://skill/SKILL.md" in uris


def test_the_shipped_skill_is_served_whole():
    bundle = SkillBundle.load(find_skill_dir())
    assert bundle is not None and bundle.name == SKILL_NAME
    entry = bundle.entry()
    assert len(entry["resources"]) == len(bundle.files) and "SKILL.md" in bundle.files
    assert entry["frontmatter"]["metadata"]["version"]


# ------------------------------------------------------------------------------------------------
# Unknown prompts
# ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_unknown_prompt_is_invalid_params(tmp_path):
    async with Client(build_server([tmp_path], skill_dir=None)) as client:
        with pytest.raises(MCPError) as info:
            await client.get_prompt("test_simple_prompt", {})
        assert info.value.error.code == -32602 and "Unknown prompt" in str(info.value)
        assert (await client.get_prompt("configure_packing", {})).messages


# ------------------------------------------------------------------------------------------------
# resource_link items
# ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_pack_dataset_links_what_it_wrote(tmp_path):
    rows = [{"prompt": "q" * (3 + i % 40), "completion": "a" * (2 + i % 70)} for i in range(30)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    async with Client(build_server([tmp_path], skill_dir=None)) as client:
        result = await client.call_tool("pack_dataset", {"input_path": "train.jsonl", "output_dir": "out",
                                                         "pack_size": 256})
        assert result.is_error is False
        assert json.loads(result.content[0].text) == result.structured_content  # unchanged
        links = [c for c in result.content if isinstance(c, ResourceLink)]
        data = result.structured_content
        expected = [data["root"], data["manifest_path"], data["metadata_path"], data["files"]["training"]]
        assert [Path(link.uri.removeprefix("file://")) for link in links] == [Path(p) for p in expected]
        assert links[0].mime_type == "inode/directory" and links[0].size is None
        for link in links[1:]:
            assert link.size == Path(link.uri.removeprefix("file://")).stat().st_size
        assert links[-1].mime_type == "application/vnd.apache.parquet"
        plain = await client.call_tool("derive_alignment", {"tp": 2})
        assert not [c for c in plain.content if isinstance(c, ResourceLink)]


def test_links_outside_the_roots_or_gone_are_left_out(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (inside / "m.json").write_text("{}")
    (outside / "meta.json").write_text("[]")
    data = {"pack_dir": str(inside), "root": str(inside), "manifest_path": str(inside / "m.json"), "metadata_path": str(outside / "meta.json"),
            "files": {"training": str(inside / "gone.parquet")}}
    result = CallToolResult(content=[TextContent(type="text", text="{}")], structured_content=data)
    linked = add_links(result, pack_links, AllowedRoots([inside]))
    assert [c.uri for c in linked.content[1:]] == [inside.as_uri(), (inside / "m.json").as_uri()]
    failed = CallToolResult(content=[TextContent(type="text", text="x")], is_error=True)
    assert add_links(failed, pack_links, AllowedRoots([inside])) is failed


# ------------------------------------------------------------------------------------------------
# --token-file for HTTP
# ------------------------------------------------------------------------------------------------

TOKEN = "s3cr3t-token-0123456789abcdef"


def _token_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_read_token_file(tmp_path, caplog):
    assert read_token_file(_token_file(tmp_path, f"  {TOKEN}\n")) == TOKEN
    for text, message in [("short\n", "at least 16"), ("two words in here ok\n", "one word"), ("", "at least 16")]:
        with pytest.raises(UsageError, match=message) as info:
            read_token_file(_token_file(tmp_path, text))
        assert TOKEN not in str(info.value)
    with pytest.raises(UsageError, match="cannot read the token file"):
        read_token_file(tmp_path / "missing")
    with pytest.raises(UsageError, match="not a regular file"):
        read_token_file(tmp_path)
    (tmp_path / "big").write_bytes(b"x" * 5000)
    with pytest.raises(UsageError, match="larger than"):
        read_token_file(tmp_path / "big")
    (tmp_path / "latin").write_bytes("tökentökentökentöken".encode("latin-1"))
    with pytest.raises(UsageError, match="ASCII"):
        read_token_file(tmp_path / "latin")
    shared = _token_file(tmp_path, TOKEN)
    shared.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="seqpack.mcp"):
        assert read_token_file(shared) == TOKEN
    assert "can be read by other users" in caplog.text and TOKEN not in caplog.text


def _asgi(guard: BearerTokenGuard, scope: dict) -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"ECHO-ME", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    anyio.run(guard, scope, receive, send)
    return sent


def test_bearer_guard_answers_401_without_reading_the_request():
    reached: list[str] = []

    async def app(scope, receive, send):
        reached.append(scope["type"])
        await send({"type": "http.response.start", "status": 200, "headers": []})

    guard = BearerTokenGuard(app, TOKEN)
    http = {"type": "http", "method": "POST", "path": "/mcp"}
    for headers in ([], [(b"authorization", b"Bearer wrong-token")], [(b"authorization", f"bearer {TOKEN}".encode())],
                    [(b"authorization", f"Bearer {TOKEN}".encode())] * 2, [(b"x-token", TOKEN.encode())]):
        sent = _asgi(guard, {**http, "headers": headers})
        assert sent[0]["status"] == 401 and sent[1]["body"] == UNAUTHORIZED_BODY
        assert (b"www-authenticate", b'Bearer realm="seqpack"') in sent[0]["headers"]
        assert b"ECHO" not in sent[1]["body"] and TOKEN.encode() not in sent[1]["body"]
    assert reached == []
    assert _asgi(guard, {**http, "headers": [(b"Authorization", f"Bearer {TOKEN}".encode())]})[0]["status"] == 200
    assert _asgi(guard, {"type": "websocket", "headers": []}) == [{"type": "websocket.close", "code": 1008}]
    _asgi(guard, {"type": "lifespan"})
    assert reached == ["http", "lifespan"]


def test_token_file_is_for_http_only(tmp_path, capsys):
    path = _token_file(tmp_path, TOKEN)
    assert main(["mcp", "--root", str(tmp_path), "--token-file", str(path)]) == 2
    assert "--token-file applies to --transport http" in capsys.readouterr().err
    assert main(["mcp", "--transport", "http", "--root", str(tmp_path), "--token-file", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the token file" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, headers: dict[str, str]) -> tuple[int, bytes]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ECHO-ME", "version": "1"}}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.slow  # a server process
def test_http_server_with_a_token_file_refuses_requests_without_it(tmp_path):
    path = _token_file(tmp_path, TOKEN)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with (tmp_path / "err.log").open("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "seqpack", "mcp", "--transport", "http", "--port",
                                 str(port), "--root", str(tmp_path), "--token-file", str(path), "--lifetime", "60"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=str(tmp_path))
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    status, body = _post(port, {})
                    break
                except (urllib.error.URLError, ConnectionError):
                    assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.2)
            assert status == 401 and body == UNAUTHORIZED_BODY
            assert _post(port, {"Authorization": "Bearer nope-nope-nope-nope"}) == (401, UNAUTHORIZED_BODY)
            status, body = _post(port, {"Authorization": f"Bearer {TOKEN}"})
            assert status == 200 and b'"serverInfo"' in body
            assert _post(port, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"})[0] == 421  # still guarded
        finally:
            proc.terminate()
            proc.wait(timeout=20)
        err.seek(0)
        log = err.read()
    assert "bearer token required" in log and TOKEN not in log

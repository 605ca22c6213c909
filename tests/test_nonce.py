"""The eval nonce: printed by the CLI (JSON key and stderr line) and the MCP server only under the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from seqpack.faces.cli import main
from seqpack.faces.mcp.server import build_server
from seqpack.core.nonce import ENV_VAR, LINE_PREFIX, NONCE_KEY, PRINTED, current_nonce, nonce_for

ROOT = Path(__file__).resolve().parents[1]
SEED = "task-seed-0123456789"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_printed_value_is_a_digest_never_the_seed(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert current_nonce() is None
    monkeypatch.setenv(ENV_VAR, SEED)
    value = current_nonce()
    assert value == nonce_for(SEED) and PRINTED.fullmatch(value) and SEED not in value
    assert nonce_for("other-seed-000") != value
    monkeypatch.setenv(ENV_VAR, "bad seed; rm -rf /")  # malformed seeds are ignored
    assert current_nonce() is None


def test_cli_json_and_stderr_carry_the_nonce(monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, SEED)
    assert main(["align", "--tp", "4", "--cp", "2", "--sp", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)[NONCE_KEY] == nonce_for(SEED)
    assert out.err.strip().splitlines()[-1] == LINE_PREFIX + nonce_for(SEED)
    # text output and refusals carry it on stderr too
    assert main(["validate", "--example", "broken_offline_cp2"]) == 1
    assert LINE_PREFIX + nonce_for(SEED) in capsys.readouterr().err


def test_cli_output_is_unchanged_without_the_variable(monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert main(["align", "--tp", "4", "--cp", "2", "--sp", "--json"]) == 0
    out = capsys.readouterr()
    assert NONCE_KEY not in json.loads(out.out) and LINE_PREFIX not in out.err


def test_console_script_in_a_subprocess():
    env = {**os.environ, ENV_VAR: SEED, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "seqpack", "rules", "PACK-OFFLINE-MBS1", "--json"],
                          capture_output=True, text=True, env=env, check=True)
    assert json.loads(proc.stdout)[NONCE_KEY] == nonce_for(SEED)
    assert proc.stderr.strip().endswith(LINE_PREFIX + nonce_for(SEED))


@pytest.mark.anyio
async def test_mcp_results_carry_the_nonce_and_keep_their_content(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    async with Client(build_server([tmp_path], skill_dir=None)) as c:
        plain = await c.call_tool("derive_alignment", {"tp": 4, "cp": 2, "sp": True})
    assert not any(LINE_PREFIX in getattr(b, "text", "") for b in plain.content)
    monkeypatch.setenv(ENV_VAR, SEED)
    async with Client(build_server([tmp_path], skill_dir=None)) as c:
        stamped = await c.call_tool("derive_alignment", {"tp": 4, "cp": 2, "sp": True})
    assert stamped.structured_content == plain.structured_content
    assert stamped.content[:-1] == plain.content
    assert stamped.content[-1].text == LINE_PREFIX + nonce_for(SEED)
    assert stamped.meta["seqpack/nonce"] == nonce_for(SEED)

"""MCP users change on a running server (issue #19 item 9): added, replaced, removed and
expired tokens take effect at the next request, with no restart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from mcp_server.auth import HashedTokenVerifier, add_user, load_tokens, remove_user
from rightsize.cli import app
from tests.mcp_server.conftest import HttpServer

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_a_verifier_from_the_file_follows_adds_replacements_and_removals(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    old = add_user(path, "alice")
    verifier = HashedTokenVerifier.from_file(path)
    assert verifier.user_for(old) == "alice"
    bob = add_user(path, "bob")
    assert verifier.user_for(bob) == "bob"
    new = add_user(path, "alice")
    assert verifier.user_for(old) is None
    assert verifier.user_for(new) == "alice"
    assert remove_user(path, "alice") is True
    assert verifier.user_for(new) is None
    assert verifier.user_for(bob) == "bob"
    assert remove_user(path, "alice") is False


def test_an_expired_token_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token = add_user(path, "carol", expires_in=timedelta(days=1), now=NOW)
    [entry] = load_tokens(path).users
    assert entry.expires_at == NOW + timedelta(days=1)
    verifier = HashedTokenVerifier.from_file(path)
    assert verifier.user_for(token, now=NOW + timedelta(hours=23)) == "carol"
    assert verifier.user_for(token, now=NOW + timedelta(days=1)) is None


def test_a_file_broken_by_hand_keeps_the_last_good_users(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token = add_user(path, "alice")
    verifier = HashedTokenVerifier.from_file(path)
    path.write_text("{ not json")
    assert verifier.user_for(token) == "alice"


def _status(server: HttpServer, token: str) -> int:
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return httpx.post(server.url, json=body, headers=headers, timeout=10).status_code


def test_a_running_http_server_takes_user_changes_at_once(
    http_server: HttpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "tokens.json"  # the fixture's file
    monkeypatch.setenv("RIGHTSIZE_MCP_TOKENS_FILE", str(token_file))
    old = http_server.tokens["alice"]
    assert _status(http_server, old) == 200
    runner = CliRunner()
    added = runner.invoke(app, ["mcp", "add-user", "carol", "--json"])
    assert added.exit_code == 0, added.output
    assert _status(http_server, json.loads(added.stdout)["token"]) == 200
    replaced = runner.invoke(app, ["mcp", "add-user", "alice"])
    assert replaced.exit_code == 0, replaced.output
    assert _status(http_server, old) == 401
    assert _status(http_server, replaced.stdout.strip()) == 200
    removed = runner.invoke(app, ["mcp", "remove-user", "bob", "--json"])
    assert json.loads(removed.stdout) == {"user": "bob", "removed": True}
    assert _status(http_server, http_server.tokens["bob"]) == 401
    listed = runner.invoke(app, ["mcp", "list-users", "--json"])
    users = json.loads(listed.stdout)["users"]
    assert [u["user"] for u in users] == ["carol", "alice"]
    assert all("token" not in u and "token_sha256" not in u for u in users)
    assert replaced.stdout.strip() not in listed.stdout


def test_cli_refuses_bad_expiry_and_unknown_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGHTSIZE_MCP_TOKENS_FILE", str(tmp_path / "tokens.json"))
    runner = CliRunner()
    bad = runner.invoke(app, ["mcp", "add-user", "dave", "--expires-days", "0"])
    assert bad.exit_code == 2 and "--expires-days" in bad.stderr
    assert not (tmp_path / "tokens.json").exists()
    missing = runner.invoke(app, ["mcp", "remove-user", "nobody"])
    assert missing.exit_code == 2 and "nobody" in missing.stderr
    shown = runner.invoke(app, ["mcp", "add-user", "erin", "--expires-days", "2"])
    assert shown.exit_code == 0 and "expires" in shown.stderr
    listed = runner.invoke(app, ["mcp", "list-users"])
    assert "erin" in listed.stdout and "active" in listed.stdout

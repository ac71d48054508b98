"""Who is calling: bearer tokens mapped to users, stored hashed, compared in constant time.

A token file (JSON) holds one SHA-256 hex digest per user, never a token:

    {"users": [{"user": "alice", "token_sha256": "9f86d0...",
                "created_at": "2026-11-25T13:00:00Z", "expires_at": null}]}

``add_user`` makes a fresh random token (optionally expiring), stores its hash and
returns the token once; ``remove_user`` drops a user. Over HTTP the SDK's bearer
middleware asks ``HashedTokenVerifier`` and answers 401 when the token is missing,
unknown or expired; over stdio the server acts for one configured user. A verifier made
``from_file`` follows the file: each request stats it (one ``os.stat``) and re-reads it
when it changed, so a user added, replaced or removed on a running server takes effect
at the next request.
Tools learn the caller from ``current_user`` and see and change only that user's plans
and jobs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowledge_base.errors import InvalidInputError

__all__ = [
    "HashedTokenVerifier",
    "TokenEntry",
    "TokenFile",
    "add_user",
    "current_user",
    "hash_token",
    "load_tokens",
    "remove_user",
]

_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str = Field(pattern=_USER.pattern)
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: datetime | None = None
    expires_at: datetime | None = Field(default=None, description="None: never expires")

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: list[TokenEntry] = Field(default_factory=list)


def hash_token(token: str) -> str:
    """The stored form of a token. Tokens are 256 random bits, so a plain hash suffices."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_tokens(path: Path) -> TokenFile:
    """The token file; an absent file is no users (every HTTP request is then refused)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return TokenFile()
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror}", source=str(path)) from exc
    try:
        return TokenFile.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(first["msg"], source=str(path), field=where or None) from exc


def add_user(
    path: Path, user: str, *, expires_in: timedelta | None = None, now: datetime | None = None
) -> str:
    """Give ``user`` a new token (replacing any old one); returns the token, shown once."""
    if not _USER.match(user):
        raise InvalidInputError(
            "a user name is 1-64 letters, digits, '_', '.' or '-'", field="user", value=user
        )
    if expires_in is not None and expires_in <= timedelta(0):
        raise InvalidInputError("must be positive", field="expires_in", value=str(expires_in))
    created = (now or datetime.now(UTC)).replace(microsecond=0)
    token = secrets.token_urlsafe(32)
    tokens = load_tokens(path)
    kept = [e for e in tokens.users if e.user != user]
    entry = TokenEntry(
        user=user,
        token_sha256=hash_token(token),
        created_at=created,
        expires_at=None if expires_in is None else created + expires_in,
    )
    _store(path, TokenFile(users=[*kept, entry]))
    return token


def remove_user(path: Path, user: str) -> bool:
    """Drop ``user``'s token; False when the file had none for them."""
    tokens = load_tokens(path)
    kept = [e for e in tokens.users if e.user != user]
    if len(kept) == len(tokens.users):
        return False
    _store(path, TokenFile(users=kept))
    return True


def _store(path: Path, updated: TokenFile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic replace, readable by the owner only.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".mcp_tokens.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(updated.model_dump(mode="json"), indent=2) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when the file is replaced or rewritten (inode, size, mtime, ctime)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class HashedTokenVerifier:
    """The SDK's ``TokenVerifier``: a bearer token -> the user whose hash it matches.

    Made ``from_file``, it re-reads the file whenever its signature (inode, size, times)
    changes, checked on every request; a file that cannot be read or parsed then keeps
    the last good entries and logs nothing secret (the error names the file only).
    """

    def __init__(self, tokens: TokenFile, *, path: Path | None = None) -> None:
        self._entries = list(tokens.users)
        self._path = path
        self._seen = _signature(path) if path is not None else None
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path) -> HashedTokenVerifier:
        return cls(load_tokens(path), path=path)

    def _refresh(self) -> None:
        if self._path is None:
            return
        current = _signature(self._path)
        if current == self._seen:
            return
        with self._lock:
            if current == self._seen:
                return
            try:
                tokens = load_tokens(self._path)
            except InvalidInputError:
                return  # half-edited by hand: keep the last good set, retry next request
            self._entries, self._seen = list(tokens.users), current

    def user_for(self, token: str, *, now: datetime | None = None) -> str | None:
        self._refresh()
        digest = hash_token(token)
        moment = now or datetime.now(UTC)
        found: str | None = None
        # Compare against every entry, constant time each, so timing tells nothing.
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.token_sha256) and not entry.expired(moment):
                found = entry.user
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        user = self.user_for(token)
        if user is None:
            return None
        return AccessToken(token="", client_id=user, scopes=[], subject=user)


def current_user(default: str) -> str:
    """The authenticated caller over HTTP; ``default`` (the stdio user) otherwise."""
    token = get_access_token()
    if token is not None:
        return token.subject or token.client_id
    return default

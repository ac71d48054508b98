"""Who is calling: bearer tokens mapped to users, stored hashed, compared in constant time.

A token file (JSON) holds one SHA-256 hex digest per user, never a token:

    {"users": [{"user": "alice", "token_sha256": "9f86d0..."}]}

``add_user`` makes a fresh random token, stores its hash and returns the token once.
Over HTTP the SDK's bearer middleware asks ``HashedTokenVerifier`` and answers 401 when
the token is missing or unknown; over stdio the server acts for one configured user.
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
]

_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str = Field(pattern=_USER.pattern)
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


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


def add_user(path: Path, user: str) -> str:
    """Give ``user`` a new token (replacing any old one); returns the token, shown once."""
    if not _USER.match(user):
        raise InvalidInputError(
            "a user name is 1-64 letters, digits, '_', '.' or '-'", field="user", value=user
        )
    token = secrets.token_urlsafe(32)
    tokens = load_tokens(path)
    kept = [e for e in tokens.users if e.user != user]
    updated = TokenFile(users=[*kept, TokenEntry(user=user, token_sha256=hash_token(token))])
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic replace, readable by the owner only.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".mcp_tokens.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(updated.model_dump(), indent=2) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return token


class HashedTokenVerifier:
    """The SDK's ``TokenVerifier``: a bearer token -> the user whose hash it matches."""

    def __init__(self, tokens: TokenFile) -> None:
        self._entries = list(tokens.users)

    @classmethod
    def from_file(cls, path: Path) -> HashedTokenVerifier:
        return cls(load_tokens(path))

    def user_for(self, token: str) -> str | None:
        digest = hash_token(token)
        found: str | None = None
        # Compare against every entry, constant time each, so timing tells nothing.
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.token_sha256):
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

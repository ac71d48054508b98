"""Who may read the HTTP endpoints beside the MCP tools: /metrics, the status page.

A request from loopback without a token is the operator (the center's own host). A
request with a bearer token is the user the MCP token file says it is: ``staff`` users
see every user's plans, others their own. Anything else, or a token no user holds, is
refused (the caller answers 401). Behind a reverse proxy on the same host every request
comes from loopback: put the proxy's own authentication in front, or bind beyond
loopback and use tokens.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_server.auth import HashedTokenVerifier

__all__ = ["Access", "Caller", "unauthorized"]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: ``user`` None is the operator (loopback, or a staff user's token)."""

    user: str | None = None

    @property
    def operator(self) -> bool:
        return self.user is None


@dataclass(frozen=True)
class Access:
    """Loopback is the operator; beyond it, a bearer token from the MCP token file."""

    verifier: HashedTokenVerifier | None = None
    staff: frozenset[str] = frozenset()

    def caller(self, request: Request) -> Caller | None:
        """Who asks, or None: answer 401."""
        header = request.headers.get("authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip() or self.verifier is None:
                return None
            user = self.verifier.user_for(token.strip())
            if user is None:
                return None
            return Caller(user=None if user in self.staff else user)
        return Caller() if _loopback(request) else None


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client is not None else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def unauthorized() -> Response:
    return JSONResponse(
        {"error": "a bearer token is required beyond loopback (rightsize mcp add-user NAME)"},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="rightsize"'},
    )

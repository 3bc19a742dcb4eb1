"""Streamable HTTP for the MCP server, behind bearer-token authentication.

:func:`http_app` is the SDK's streamable-HTTP Starlette app of the server (endpoint
``/mcp``), with the SDK's bearer middleware in front of it: a request without a token, or
with one the verifier does not know, is answered ``401`` before it reaches the server; a
session opened with one token cannot be used with another (the SDK's session ownership).
The verifier is any ``TokenVerifier`` (:class:`~workers.mcp.tokens.TokenFileVerifier` for
``--tokens-file``); the resource a token acts for is its access token's ``subject``.
Bound to a loopback address, the SDK's DNS-rebinding protection is on (Host and Origin
must name loopback). Each refused request is logged (``mcp.refused``).

:func:`serve_http` runs it on uvicorn, which logs to stderr only (no access log).
"""

from __future__ import annotations

from typing import Any

import structlog
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.server import Server
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ("ENDPOINT", "http_app", "serve_http")

ENDPOINT = "/mcp"
log = structlog.get_logger(__name__)


class _LogRefusals:
    """Logs each request the bearer middleware refuses (``mcp.refused``: no token, or one
    the verifier does not know; never the token itself)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (401, 403):
                given = any(name.lower() == b"authorization" for name, _ in scope.get("headers", ()))
                client = scope.get("client")
                log.warning("mcp.refused", resource=None, action=f"{scope.get('method')} {scope.get('path')}",
                            status=message["status"], client=client[0] if client else None,
                            reason="a bearer token this server does not know" if given else "no bearer token")
            await send(message)

        await self.app(scope, receive, watch)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def http_app(server: Server[Any], verifier: TokenVerifier, *, host: str, port: int) -> ASGIApp:
    """The server's streamable-HTTP app, every request authenticated by ``verifier``
    (refusals logged)."""
    base = f"http://{_url_host(host)}:{port}"
    auth = AuthSettings(issuer_url=base, resource_server_url=None)
    return _LogRefusals(server.streamable_http_app(streamable_http_path=ENDPOINT, auth=auth,
                                                   token_verifier=verifier, host=host))


async def serve_http(server: Server[Any], verifier: TokenVerifier, *, host: str, port: int) -> None:
    """Serve until cancelled (or SIGINT/SIGTERM, which uvicorn handles)."""
    import uvicorn  # noqa: PLC0415 - the mcp extra brings it

    config = uvicorn.Config(http_app(server, verifier, host=host, port=port), host=host, port=port,
                            log_config=None, access_log=False, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()

"""Streamable HTTP for the MCP server, behind bearer-token authentication.

:func:`http_app` is the SDK's streamable-HTTP Starlette app of the server (endpoint
``/mcp``), with the SDK's bearer middleware in front of it: a request without a token, or
with one the verifier does not know, is answered ``401`` before it reaches the server; a
session opened with one token cannot be used with another (the SDK's session ownership).
The verifier is any ``TokenVerifier`` (:class:`~workers.mcp.tokens.TokenFileVerifier` for
``--tokens-file``); the resource a token acts for is its access token's ``subject``.
Bound to a loopback address, the SDK's DNS-rebinding protection is on (Host and Origin
must name loopback).

:func:`serve_http` runs it on uvicorn, which logs to stderr only (no access log).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.server import Server
from starlette.applications import Starlette

__all__ = ("ENDPOINT", "http_app", "serve_http")

ENDPOINT = "/mcp"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def http_app(server: Server[Any], verifier: TokenVerifier, *, host: str, port: int) -> Starlette:
    """The server's streamable-HTTP app, every request authenticated by ``verifier``."""
    base = f"http://{_url_host(host)}:{port}"
    auth = AuthSettings(issuer_url=base, resource_server_url=None)
    return server.streamable_http_app(streamable_http_path=ENDPOINT, auth=auth, token_verifier=verifier, host=host)


async def serve_http(server: Server[Any], verifier: TokenVerifier, *, host: str, port: int) -> None:
    """Serve until cancelled (or SIGINT/SIGTERM, which uvicorn handles)."""
    import uvicorn  # noqa: PLC0415 - the mcp extra brings it

    config = uvicorn.Config(http_app(server, verifier, host=host, port=port), host=host, port=port,
                            log_config=None, access_log=False, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()

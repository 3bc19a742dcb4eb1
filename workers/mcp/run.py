"""One ``wm-signals mcp`` process: the store from its settings, then stdio or HTTP until stopped.

The caller of :func:`run_mcp` opens the Redis client (the CLI's ``open_client``: TLS,
Sentinel, Cluster, the namespace check) and passes it in; this module does no argument
parsing and reads no environment.

Over stdio, standard output carries protocol frames only: logging goes to stderr (the
process configures it so before anything logs), and the SDK points file descriptor 1 at
stderr while it serves, so a stray write from anything else misses the wire too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import structlog

from signals.core.memory import WorkingMemoryConfig
from signals.core.signing import Signer
from signals.errors import InvalidInputError
from signals.streams.client import Client
from signals.streams.durability import Durability
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from workers.mcp.access import Caller
from workers.mcp.server import Options, build_server

__all__ = ("McpConfig", "run_mcp")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class McpConfig:
    """What one server process serves.

    Attributes:
        transport: ``stdio`` (one resource, ``resource``) or ``http`` (tokens name it).
        bind: the HTTP address.
        port: the HTTP port.
        resource: the resource over stdio.
        thread: over stdio, the thread the tools address by default.
        tokens_file: over HTTP, the tokens file (see :mod:`workers.mcp.tokens`).
        schema: a JSON Schema: schema mode (JSON, merged); ``None``: Markdown (template mode).
        max_bytes: the largest document accepted.
    """

    transport: Literal["stdio", "http"]
    bind: str = "127.0.0.1"
    port: int = 8808
    resource: str | None = None
    thread: str | None = None
    tokens_file: str | None = None
    schema: dict[str, Any] | None = None
    max_bytes: int | None = None

    def check(self) -> None:
        """Refuse a combination that cannot run, naming the flags."""
        if self.transport == "stdio":
            if self.resource is None:
                raise InvalidInputError("mcp --transport stdio needs --resource (the resource it serves)")
            if self.tokens_file is not None:
                raise InvalidInputError("--tokens-file is for --transport http (over stdio --resource names it)")
        else:
            if self.tokens_file is None:
                raise InvalidInputError("mcp --transport http needs --tokens-file (bearer token -> resource id)")
            if self.resource is not None or self.thread is not None:
                raise InvalidInputError("--resource and --thread are for --transport stdio (over HTTP each "
                                        "token names its resource)")
        if not 0 < self.port < 65536:
            raise InvalidInputError(f"--port {self.port} is not a TCP port (1-65535)")


async def run_mcp(redis: Client, keys: Keys, config: McpConfig, *, cluster: bool = False,
                  signer: Signer | None = None, durability: Durability | None = None, version: str = "") -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP)."""
    config.check()
    wm_config = WorkingMemoryConfig(schema=config.schema) if config.schema is not None else WorkingMemoryConfig()
    if config.max_bytes is not None:
        wm_config = WorkingMemoryConfig(schema=wm_config.schema, max_bytes=config.max_bytes)
    store = WorkingMemoryStore(redis, keys=keys, config=wm_config, durability=durability)
    options = Options(cluster=cluster, signer=signer)
    if config.transport == "stdio":
        from mcp.server.stdio import stdio_server  # noqa: PLC0415

        assert config.resource is not None
        server = build_server(store, caller=Caller(config.resource, config.thread), options=options, version=version)
        log.info("mcp.serving", transport="stdio", resource=config.resource, namespace=keys.namespace)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    from workers.mcp.http import ENDPOINT, serve_http  # noqa: PLC0415
    from workers.mcp.tokens import TokenFileVerifier  # noqa: PLC0415

    assert config.tokens_file is not None
    verifier = TokenFileVerifier(config.tokens_file)
    server = build_server(store, options=options, version=version)
    log.info("mcp.serving", transport="http", url=f"http://{config.bind}:{config.port}{ENDPOINT}",
             tokens=verifier.count, namespace=keys.namespace)
    await serve_http(server, verifier, host=config.bind, port=config.port)

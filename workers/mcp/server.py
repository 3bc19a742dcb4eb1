"""The MCP server of working memory, on the SDK's low-level ``Server``.

:func:`build_server` wires the tools (:mod:`workers.mcp.tools`), the resources
(:mod:`workers.mcp.resources`) and both subscription styles
(:mod:`workers.mcp.subscriptions`) over one store, and runs the signal watch
(:mod:`workers.mcp.fanout`) in the server's lifespan. It is the low-level ``Server``, not
``MCPServer``: ``MCPServer`` serves no ``resources/subscribe`` (the 2025 way most
deployed clients subscribe, which must also be advertised at the handshake), and its own
``subscriptions/listen`` handler takes any URI a client asks for, where each must be
checked against the caller. The same server object runs over stdio, streamable HTTP
(:mod:`workers.mcp.http`), or in-process (the SDK's ``Client(server)``, in tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)

from signals.core.signing import Signer
from signals.streams.store import WorkingMemoryStore
from workers.mcp.access import Access, Caller
from workers.mcp.fanout import SignalWatch
from workers.mcp.resources import Resources
from workers.mcp.subscriptions import Limits, Subscriptions
from workers.mcp.tools import Tools

__all__ = ("NAME", "Options", "build_server")

NAME = "wm-signals"
_SUBSCRIPTIONS = "wm_signals.subscriptions"
_INSTRUCTIONS = (
    "Working memory: what is known about the user (resource) and each conversation (thread), kept across "
    "sessions. Read wm://resource/{resourceId} (subscribe to it to be told when it changes), or call "
    "get_working_memory; call set_working_memory only for new or changed facts."
)


@dataclass(frozen=True, slots=True)
class Options:
    """How the server watches signal streams, and its subscription bounds.

    Attributes:
        cluster: the client is a Redis Cluster client (one read loop per partition).
        signer: verify signals' MACs (the workers' signing key).
        block_ms: how long one blocking read of the watched streams waits.
        limits: subscription bounds (see :class:`~workers.mcp.subscriptions.Limits`).
    """

    cluster: bool = False
    signer: Signer | None = None
    block_ms: int = 2000
    limits: Limits = field(default_factory=Limits)


class _Handlers:
    """The request handlers over one store; each run (lifespan) has its own subscriptions."""

    def __init__(self, store: WorkingMemoryStore, caller: Caller | None, options: Options) -> None:
        access = Access(store, caller)
        self.store = store
        self.options = options
        self.tools = Tools(access, options.signer)
        self.resources = Resources(access)

    @asynccontextmanager
    async def lifespan(self, _: Server[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        """One run's subscriptions and signal watch (stdio and HTTP run once per process, an
        in-process client once per client)."""
        options = self.options
        subscriptions = Subscriptions(self.resources, options.limits)
        watch = SignalWatch(self.store.redis, self.store.keys, subscriptions.notify, cluster=options.cluster,
                            signer=options.signer, block_ms=options.block_ms, max_lanes=options.limits.lanes)
        async with anyio.create_task_group() as tg:
            await tg.start(watch.run)
            subscriptions.start(tg, watch)
            try:
                yield {_SUBSCRIPTIONS: subscriptions}
            finally:
                tg.cancel_scope.cancel()

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=self.tools.definitions())

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> CallToolResult:
        return await self.tools.call(params.name, params.arguments)

    async def list_resources(self, ctx: ServerRequestContext[Any, Any],
                             params: PaginatedRequestParams | None) -> ListResourcesResult:
        return ListResourcesResult(resources=self.resources.listed())

    async def list_templates(self, ctx: ServerRequestContext[Any, Any],
                             params: PaginatedRequestParams | None) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=self.resources.templates())

    async def read_resource(self, ctx: ServerRequestContext[Any, Any],
                            params: ReadResourceRequestParams) -> ReadResourceResult:
        return await self.resources.read(params.uri)

    @staticmethod
    def _running(ctx: ServerRequestContext[Any, Any]) -> Subscriptions:
        return cast(Subscriptions, ctx.lifespan_context[_SUBSCRIPTIONS])

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        return await self._running(ctx).subscribe(ctx, params)

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        return await self._running(ctx).unsubscribe(ctx, params)

    async def listen(self, ctx: ServerRequestContext[Any, Any],
                     params: SubscriptionsListenRequestParams) -> SubscriptionsListenResult:
        return await self._running(ctx).listen(ctx, params)


def build_server(store: WorkingMemoryStore, *, caller: Caller | None = None,
                 options: Options | None = None, version: str = "") -> Server[dict[str, Any]]:
    """The MCP server over ``store``.

    Args:
        store: reads and writes (its config: template or schema mode, size limit); its
            Redis client also tails the signal streams.
        caller: the resource every request acts for (stdio, in-process); ``None``: each
            HTTP request's bearer token names it (see :mod:`workers.mcp.http`).
        options: signal watch and subscription bounds.
        version: the server version reported to clients.
    """
    h = _Handlers(store, caller, options or Options())
    return Server(
        NAME,
        version=version,
        instructions=_INSTRUCTIONS,
        lifespan=h.lifespan,
        on_list_tools=h.list_tools,
        on_call_tool=h.call_tool,
        on_list_resources=h.list_resources,
        on_list_resource_templates=h.list_templates,
        on_read_resource=h.read_resource,
        on_subscribe_resource=h.subscribe,
        on_unsubscribe_resource=h.unsubscribe,
        on_subscriptions_listen=h.listen,
    )

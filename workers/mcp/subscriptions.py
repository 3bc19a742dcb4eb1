"""Resource subscriptions, both protocol generations, fed by :class:`~workers.mcp.fanout.SignalWatch`.

* 2025 (``resources/subscribe``, ``resources/unsubscribe``): a connection's subscriptions
  live with the connection; a notification is queued to it (a set of URIs waiting, at
  most one entry per subscription) and sent by the connection's own sender task, so a
  slow client never holds up the others or grows the server's memory. The connection's
  teardown drops its subscriptions.
* 2026 (``subscriptions/listen``): the SDK's ``ListenHandler`` serves the stream (the
  acknowledgement, then ``notifications/resources/updated`` stamped with the subscription
  id), after the URIs are checked here; events reach it through the SDK's in-process
  ``SubscriptionBus``, published by the signal watch. Its buffer per stream is bounded (a
  stream whose client stops reading is ended: the client re-listens and refetches).

Every URI is checked before anything is watched: a malformed one is ``INVALID_PARAMS``
saying what is wrong, one the caller may not see is refused (:mod:`workers.mcp.access`).
Bounds: :class:`Limits`. A URI is kept in its canonical form (``wm://thread/a%2Fb``), the
form notifications carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)
from redis import exceptions as redis_exc

from signals.errors import WmSignalsError
from workers.mcp.access import Caller
from workers.mcp.fanout import SignalWatch, TooManyLanesError
from workers.mcp.resources import Resources, target_of
from workers.mcp.uris import Target, lane_uris

__all__ = ("Limits", "Subscriptions", "connection_of")

log = structlog.get_logger(__name__)
_STATE_KEY = "wm_signals.subscriptions"


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on subscriptions.

    Attributes:
        per_connection: 2025 subscriptions (URIs) of one connection.
        per_listen: URIs one ``subscriptions/listen`` request may name.
        listens_per_caller: listen streams open at once for one resource.
        listens: listen streams open at once on this server.
        buffered_events: events waiting per listen stream (past it the stream is ended).
        lanes: lanes this server watches at once.
    """

    per_connection: int = 64
    per_listen: int = 64
    listens_per_caller: int = 16
    listens: int = 1024
    buffered_events: int = 256
    lanes: int = 10_000


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The request's per-client :class:`~mcp.server.connection.Connection`.

    The SDK (2.3) gives request handlers its ``ServerSession`` but no public path to the
    connection behind it, whose ``state`` and ``exit_stack`` are meant for exactly this
    (per-connection state, cleanup at close); the session holds it as ``_connection``.
    Checked here, so that an SDK that moves it fails loudly (a test covers it).
    """
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise TypeError("this mcp SDK's ServerSession holds no Connection at _connection: workers.mcp needs "
                           "updating for it")
    return connection


@dataclass(eq=False)
class _Subscriber:
    """One 2025 connection's subscriptions and the URIs waiting to be sent to it."""

    connection: Connection
    caller: Caller
    uris: dict[str, str] = field(default_factory=dict)  # uri -> lane
    waiting: dict[str, None] = field(default_factory=dict)
    wake: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    closed: bool = False

    def push(self, uri: str) -> None:
        if uri in self.uris:
            self.waiting[uri] = None
            self.wake.set()

    async def send(self) -> None:
        """Send what is waiting, until the connection closes. A failure to send ends this
        connection's notifications (logged), never the server's other connections."""
        with self.scope:
            while True:
                await self.wake.wait()
                self.wake = anyio.Event()
                while self.waiting:
                    uri = next(iter(self.waiting))
                    del self.waiting[uri]
                    try:
                        await self.connection.send_resource_updated(uri)
                    except Exception as e:  # noqa: BLE001 - one connection's transport must not end the server
                        log.warning("mcp.notify_failed", resource=self.caller.resource_id, uri=uri, error=repr(e))
                        self.closed = True
                        return


class Subscriptions:
    """Serves both subscription styles and fans the signal watch's events out to them."""

    def __init__(self, resources: Resources, limits: Limits | None = None) -> None:
        self.resources = resources
        self.limits = limits or Limits()
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus, max_subscriptions=self.limits.listens,
                                     max_buffered_events=self.limits.buffered_events)
        self._by_uri: dict[str, set[_Subscriber]] = {}
        self._listening: dict[str, int] = {}
        self._tg: TaskGroup | None = None
        self.watch: SignalWatch | None = None

    def start(self, tg: TaskGroup, watch: SignalWatch) -> None:
        """Bind the task group the 2025 senders run in, and the signal watch."""
        self._tg, self.watch = tg, watch

    async def notify(self, lane: str, version: int) -> None:
        """A new signal of ``lane``: its document and version URIs are updated."""
        for uri in lane_uris(lane):
            await self.bus.publish(ResourceUpdated(uri=uri))
            for subscriber in self._by_uri.get(uri, ()):
                subscriber.push(uri)
        log.debug("mcp.notified", lane=lane, version=version)

    async def _checked(self, caller: Caller, uri: str, action: str) -> Target:
        target = target_of(uri)
        try:
            await self.resources.authorize(caller, target, action)
        except (WmSignalsError, redis_exc.RedisError) as e:
            raise MCPError(INTERNAL_ERROR, f"checking {target.uri}: {e}") from e
        return target

    async def _acquire(self, lane: str) -> None:
        if self.watch is None:
            raise MCPError(INTERNAL_ERROR, "subscriptions are not running on this server")
        try:
            await self.watch.acquire(lane)
        except TooManyLanesError as e:
            raise MCPError(INTERNAL_ERROR, str(e)) from e
        except (WmSignalsError, redis_exc.RedisError) as e:
            raise MCPError(INTERNAL_ERROR, f"watching {lane}: {e}") from e

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        """``resources/subscribe`` (2025): notify this connection when the URI's lane signals."""
        caller = self.resources.access.caller("resources/subscribe")
        target = await self._checked(caller, params.uri, "resources/subscribe")
        connection = connection_of(ctx)
        subscriber = self._subscriber(connection, caller)
        if target.uri in subscriber.uris:
            return EmptyResult()
        if len(subscriber.uris) >= self.limits.per_connection:
            raise MCPError(INVALID_PARAMS, f"this connection has {self.limits.per_connection} subscriptions, the "
                                           "most it may hold: unsubscribe from one first")
        await self._acquire(target.lane)
        # checked again: the connection may have closed, or subscribed concurrently, while the cursor was read
        if subscriber.closed or target.uri in subscriber.uris:
            self._release(target.lane)
            return EmptyResult()
        if len(subscriber.uris) >= self.limits.per_connection:
            self._release(target.lane)
            raise MCPError(INVALID_PARAMS, f"this connection has {self.limits.per_connection} subscriptions, the "
                                           "most it may hold: unsubscribe from one first")
        subscriber.uris[target.uri] = target.lane
        self._by_uri.setdefault(target.uri, set()).add(subscriber)
        log.info("mcp.subscribed", resource=caller.resource_id, uri=target.uri, style="resources/subscribe")
        return EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        """``resources/unsubscribe`` (2025): stop notifying this connection of the URI."""
        self.resources.access.caller("resources/unsubscribe")
        target = target_of(params.uri)
        subscriber = connection_of(ctx).state.get(_STATE_KEY)
        if isinstance(subscriber, _Subscriber) and target.uri in subscriber.uris:
            self._drop(subscriber, target.uri)
        return EmptyResult()

    def _subscriber(self, connection: Connection, caller: Caller) -> _Subscriber:
        subscriber = connection.state.get(_STATE_KEY)
        if isinstance(subscriber, _Subscriber):
            return subscriber
        if self._tg is None:
            raise MCPError(INTERNAL_ERROR, "subscriptions are not running on this server")
        subscriber = _Subscriber(connection, caller)
        connection.state[_STATE_KEY] = subscriber
        self._tg.start_soon(subscriber.send)
        connection.exit_stack.callback(self._close, subscriber)
        return subscriber

    def _close(self, subscriber: _Subscriber) -> None:
        """The connection closed: stop its sender, drop its subscriptions."""
        subscriber.closed = True
        subscriber.scope.cancel()
        count = len(subscriber.uris)
        for uri in list(subscriber.uris):
            self._drop(subscriber, uri)
        log.info("mcp.subscriptions_dropped", resource=subscriber.caller.resource_id, uris=count,
                 lanes_watched=self.watch.lanes if self.watch is not None else 0)

    def _release(self, lane: str) -> None:
        if self.watch is not None:
            self.watch.release(lane)

    def _drop(self, subscriber: _Subscriber, uri: str) -> None:
        """Forget one subscription (at unsubscribe, or when the connection closes)."""
        lane = subscriber.uris.pop(uri, None)
        subscriber.waiting.pop(uri, None)
        holders = self._by_uri.get(uri)
        if holders is not None:
            holders.discard(subscriber)
            if not holders:
                del self._by_uri[uri]
        if lane is not None:
            self._release(lane)

    async def listen(self, ctx: ServerRequestContext[Any, Any],
                     params: SubscriptionsListenRequestParams) -> SubscriptionsListenResult:
        """``subscriptions/listen`` (2026): check the URIs, watch their lanes, serve the stream."""
        caller = self.resources.access.caller("subscriptions/listen")
        uris = params.notifications.resource_subscriptions or []
        if len(uris) > self.limits.per_listen:
            raise MCPError(INVALID_PARAMS, f"subscriptions/listen names {len(uris)} URIs, more than the "
                                           f"{self.limits.per_listen} one stream may hold")
        targets = {t.uri: t for t in [await self._checked(caller, uri, "subscriptions/listen") for uri in uris]}
        if self._listening.get(caller.resource_id, 0) >= self.limits.listens_per_caller:
            raise MCPError(INVALID_PARAMS, f"resource {caller.resource_id!r} has {self.limits.listens_per_caller} "
                                           "listen streams open, the most it may hold")
        self._listening[caller.resource_id] = self._listening.get(caller.resource_id, 0) + 1
        watched: list[str] = []
        try:
            for target in targets.values():
                await self._acquire(target.lane)
                watched.append(target.lane)
            canonical = params.notifications.model_copy(update={"resource_subscriptions": list(targets) or None})
            log.info("mcp.subscribed", resource=caller.resource_id, uris=list(targets), style="subscriptions/listen")
            return await self._listen(ctx, params.model_copy(update={"notifications": canonical}))
        finally:
            for lane in watched:
                self._release(lane)
            left = self._listening.get(caller.resource_id, 1) - 1
            if left:
                self._listening[caller.resource_id] = left
            else:
                self._listening.pop(caller.resource_id, None)

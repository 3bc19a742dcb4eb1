"""Whether a worker serves a lane: the one warning a subscriber gets when none does.

A subscriber (an agent loop, ``wm-signals subscribe``) receives only what workers emit:
with no worker running, writes are stored and queued, and the subscriber gets nothing,
with nothing to say why. :class:`ServedCheck` looks once, at a subscription's first read,
at the consumer group of the lane's partition (``XINFO CONSUMERS <partition's write
stream> wm-workers``: the group and the consumers the workers read it with), and logs the
warning ``subscribe.no_worker`` naming the namespace, the lane and the reason when:

* the partition's write stream has no consumer group: no worker has run in this
  namespace (or none with this partition count);
* the group has no consumer: every worker that ran stopped (a worker leaves the group
  when it stops gracefully);
* no consumer has read for :data:`LIVE_IDLE_MS`: the workers that read it died (a live
  worker reads every ``block_ms``, at most 60 s, also when idle).

An :class:`~signals.agent.AgentWorkingMemory` (and so every framework adapter) looks
through its subscription, at ``start()`` or its first model call; with system-message
delivery it reads the document itself, needs no worker, and does not look.

The warning is logged once per process for a server and namespace; a namespace found
served is not looked at again by the same check. The check never fails a subscriber: a
Redis user whose ACL does not allow ``XINFO CONSUMERS`` on the write streams (the agent
and reader roles of ``wm-signals deploy acl`` do) skips it, logging at debug level. A
connection failure is raised, as the subscriber's own reads would raise it.
"""

from __future__ import annotations

from typing import Any

from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import acl_refused, is_wrong_type, reply_code

__all__ = ("LIVE_IDLE_MS", "ServedCheck", "unserved_reason")

log = get_logger(__name__)

#: A consumer that has not read for this long is not a live worker: a worker reads every
#: ``block_ms`` (at most 60 s) also when there is nothing to read.
LIVE_IDLE_MS = 90_000

#: (server, namespace) pairs this process has warned about.
_WARNED: set[tuple[str, str]] = set()


async def unserved_reason(redis: Client, keys: Keys, lane: str) -> str | None:
    """Why no worker serves ``lane`` (its partition's consumer group), or ``None`` when a
    live one does.

    Raises:
        redis.exceptions.ResponseError: the user may not run ``XINFO CONSUMERS`` on the
            write stream (see :func:`~signals.streams.client.acl_refused`), or another
            refusal than a missing stream or group or a key of another type.
    """
    stream = keys.writes(keys.partition(lane))
    try:
        consumers: list[dict[str, Any]] = await redis.xinfo_consumers(stream, GROUP)
    except redis_exc.ResponseError as e:
        text = str(e)
        if reply_code(e) == "NOGROUP" or "no such key" in text:
            return (f"no worker has run in namespace {keys.namespace!r}: its write stream {stream} has no "
                    f"consumer group {GROUP!r} (start one: wm-signals worker)")
        if is_wrong_type(e):
            return f"{stream} is not a stream: no worker can read the writes of this lane's partition"
        raise
    if not consumers:
        return (f"no worker is running in namespace {keys.namespace!r}: the consumer group {GROUP!r} on {stream} "
                "has no consumer (every worker stopped)")
    idle = [_idle_ms(c) for c in consumers]
    if all(ms is not None and ms > LIVE_IDLE_MS for ms in idle):
        least = min(ms for ms in idle if ms is not None)
        return (f"no live worker in namespace {keys.namespace!r}: none of the {len(consumers)} consumer(s) of "
                f"{stream} has read for {least // 1000} s (the workers stopped or died)")
    return None


def _idle_ms(consumer: dict[str, Any]) -> int | None:
    value = consumer.get("idle")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _server(redis: Client) -> str:
    """Which server a client talks to, as far as its connection settings say."""
    pool = getattr(redis, "connection_pool", None)
    settings = getattr(pool, "connection_kwargs", None)
    if isinstance(settings, dict):
        return " ".join(f"{name}={settings.get(name)}" for name in ("host", "port", "path", "db", "service_name"))
    return f"client {id(redis)}"


class ServedCheck:
    """The check of one subscription's lane (see the module), made at most until it has
    either found a worker or warned."""

    def __init__(self, redis: Client, keys: Keys, lane: str) -> None:
        self._redis, self._keys, self._lane = redis, keys, lane
        self._done = False

    async def __call__(self) -> None:
        """Look, once; log ``subscribe.no_worker`` when no worker serves the lane."""
        if self._done:
            return
        seen = (_server(self._redis), self._keys.namespace)
        if seen in _WARNED:
            self._done = True
            return
        try:
            reason = await unserved_reason(self._redis, self._keys, self._lane)
        except redis_exc.ResponseError as e:  # the ACL's refusal, mostly: the subscriber goes on
            self._done = True
            log.debug("subscribe.worker_check_skipped", namespace=self._keys.namespace, acl=acl_refused(e),
                      reason=str(e))
            return
        self._done = True
        if reason is not None:
            _WARNED.add(seen)
            log.warning("subscribe.no_worker", namespace=self._keys.namespace, lane=self._lane, reason=reason,
                        consequence="signals arrive only once a worker serves the namespace")

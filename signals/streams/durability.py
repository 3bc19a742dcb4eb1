"""Durable writes: acknowledge a write only once N replicas have it (Redis ``WAIT``).

Redis replicates asynchronously: a write the master acknowledged can be lost when a
replica that had not received it is promoted. With a :class:`Durability` setting the
store runs its write script and ``WAIT N timeout`` on the same connection (``WAIT`` counts
the replicas that acknowledged everything *that connection* wrote), in one pipeline, so a
durable write costs one round trip plus the replicas' acknowledgement. Fewer than N
replicas within the timeout is :class:`~signals.errors.DurabilityError`: the write is
stored on the master and may still reach the replicas, but nothing promises it survives
a failover.

Where the WAIT goes: on one server and through Sentinel, the pipeline holds one
connection to the master. On a Redis Cluster, redis-py would send a bare ``WAIT`` to
every primary; both commands are therefore routed explicitly to the primary of the
lane's slot (``target_nodes``), so they share that node's connection. A ``MOVED``/``ASK``
reply (the slot has a new owner: a failover) updates the slot map and the pair is sent
again to the new owner (the script did not run on the former owner); an ``ASK`` (a slot being
migrated) is :class:`~signals.errors.RedisBusyError`, to retry.

A retried write that finds its idempotency key (``dup``) wrote nothing, so a ``WAIT`` would
say nothing about the first attempt's write. :func:`confirm_key` rewrites the key with its
own value (``SET XX KEEPTTL``, which the writer role may run) and waits for that: the
replicas acknowledging it have everything the master wrote before it, the first
attempt's write included (replication is one ordered stream per master).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis import exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster

from signals.errors import DurabilityError, InvalidInputError, RedisBusyError, RedisUnavailableError
from signals.streams.client import Client
from signals.streams.scripts import ServerScript, missing

__all__ = ("Durability", "confirm_key", "require_replicas", "write_and_wait")

#: How often a durable write is sent again after a NOSCRIPT (one server) or a slot
#: redirection (cluster) before the error is raised.
_RESENDS = 3


@dataclass(frozen=True, slots=True)
class Durability:
    """How many replicas must hold a write before it is acknowledged.

    Attributes:
        replicas: the replicas that must acknowledge (``WAIT`` N), at least 1.
        timeout_ms: how long to wait for them, at least 1 (``WAIT``'s 0 would block
            forever).
    """

    replicas: int
    timeout_ms: int = 1000

    def __post_init__(self) -> None:
        for name, value in (("replicas", self.replicas), ("timeout_ms", self.timeout_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"durability {name} must be an integer >= 1, not {value!r}")


async def write_and_wait(redis: Client, script: ServerScript, keys: list[str], args: list[str | int],
                         durability: Durability) -> tuple[object, object]:
    """Run ``script`` then ``WAIT`` on one connection to the master of ``keys[0]``'s slot.

    Returns ``(script reply, WAIT reply)``, each a value or the exception Redis answered
    with (the caller raises them: the script's first). Connection failures raise.
    """
    for _ in range(_RESENDS):
        command = await script.command(keys, args)
        if isinstance(redis, RedisCluster):
            reply, acked = await _cluster_pair(redis, keys[0], command, durability)
        else:
            pipe = redis.pipeline(transaction=False)
            pipe.execute_command(*command)
            pipe.execute_command("WAIT", durability.replicas, durability.timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
        if missing(reply):  # a new master (failover) or a flushed library: the call did not run
            await script.load()
            continue
        if not isinstance(reply, redis_exc.MovedError):
            return reply, acked
    raise RedisBusyError(f"the slot of {keys[0]} kept moving ({reply}): the cluster is reconfiguring")


async def confirm_key(redis: Client, key: str, value: str, durability: Durability) -> object:
    """Rewrite ``key`` with ``value`` (``SET XX KEEPTTL``) and ``WAIT`` on the same connection.

    Returns the ``WAIT`` reply (or the exception answered). See the module docstring.
    """
    command = ("SET", key, value, "XX", "KEEPTTL")
    for _ in range(_RESENDS):
        if isinstance(redis, RedisCluster):
            reply, acked = await _cluster_pair(redis, key, command, durability)
        else:
            pipe = redis.pipeline(transaction=False)
            pipe.execute_command(*command)
            pipe.execute_command("WAIT", durability.replicas, durability.timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
        if not isinstance(reply, redis_exc.MovedError):
            return reply if isinstance(reply, Exception) else acked
    raise RedisBusyError(f"the slot of {key} kept moving ({reply}): the cluster is reconfiguring")


async def require_replicas(redis: Client, durability: Durability, lane: str, version: int, acked: object, *,
                           key: str | None = None, stored: str = "") -> None:
    """Raise :class:`~signals.errors.DurabilityError` unless ``acked`` (a ``WAIT`` reply)
    covers ``durability`` for ``lane`` at ``version``. A retry answered by its idempotency
    key (``acked`` None, the key given) first confirms the key with :func:`confirm_key`
    (rewritten with ``stored``, its value as the write script found it)."""
    if acked is None and key is not None:
        try:
            acked = await confirm_key(redis, key, stored, durability)
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"confirming {lane} version {version}: {e}") from e
    count = acked if isinstance(acked, int) and not isinstance(acked, bool) else None
    if count is not None and count >= durability.replicas:
        return
    why = (f"only {count} of {durability.replicas} replica(s) acknowledged it within {durability.timeout_ms} ms"
           if count is not None else f"waiting for its replicas failed ({acked})")
    raise DurabilityError(f"{lane} version {version} is stored on the master but not yet replicated: {why}; "
                          "it may be lost on a failover (retrying with the same idempotency key is safe)",
                          lane=lane, version=version, acked=count, required=durability.replicas)


async def _cluster_pair(redis: RedisCluster, key: str, command: tuple[Any, ...],
                        durability: Durability) -> tuple[object, object]:
    """``command`` and ``WAIT`` on one connection of the primary that owns ``key``'s slot."""
    await redis.initialize()  # no-op unless a failure reset the client
    node = redis.get_node_from_key(key)
    pipe = redis.pipeline()
    pipe.execute_command(*command, target_nodes=node)
    pipe.execute_command("WAIT", durability.replicas, durability.timeout_ms, target_nodes=node)
    reply, acked = await pipe.execute(raise_on_error=False, allow_redirections=False)
    if isinstance(reply, redis_exc.MovedError):
        await redis.nodes_manager.move_slot(reply)
    elif isinstance(reply, redis_exc.AskError):  # a slot migrating: ASKING is not worth the complexity here
        raise RedisBusyError(f"the slot of {key} is migrating ({reply}): retry")
    return reply, acked

"""Small shared helpers: timestamps, Lua script loading, Redis connections."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, cast

import hiredis
from redis import exceptions as redis_exc
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript

from signals._time import now_iso

__all__ = ("Client", "Entry", "connect", "lindex", "lua", "now_iso", "queue_script", "smembers", "xrange", "xread")

Client = Redis | RedisCluster
"""A redis.asyncio client: one server (or a replicated primary), or a Redis Cluster."""


@cache
def lua(name: str) -> str:
    """The source of a bundled Lua script."""
    return resources.files("signals").joinpath("lua", name + ".lua").read_text("utf-8")


def connect(url: str, *, cluster: bool = False, **kwargs: object) -> Client:
    """A redis.asyncio client for ``url`` speaking RESP2 with ``str`` replies.

    RESP2 is pinned: redis-py 8 defaults to RESP3 but still shapes some replies as RESP2,
    and every reply this package parses is written against RESP2. With ``cluster`` the
    URL names any node of a Redis Cluster; the client discovers the rest. Its socket
    timeout is off, as for a single server, since subscriptions block for seconds.
    """
    options: dict[str, object] = {"protocol": 2, "decode_responses": True}
    if cluster:
        options["socket_timeout"] = None
        options.update(kwargs)
        return RedisCluster.from_url(url, **options)
    options.update(kwargs)
    client = Redis.from_url(url, **options)  # type: ignore[arg-type]
    pool = client.connection_pool
    if pool.connection_kwargs.get("encoding", "utf-8") == "utf-8":
        pool.connection_class = _hiredis_packing(pool.connection_class)
    return client


class _HiredisPacking:
    """Serialise commands with hiredis's C packer.

    redis-py's synchronous client packs with hiredis when it is installed; its asyncio
    client always packs in Python, which costs about a fifth of a small command's client
    CPU (measured on the write path). Arguments are ``str`` (UTF-8), ``bytes``, ``int``
    or ``float``, as with redis-py's own packer; anything else is a ``DataError``.
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str):  # "XINFO GROUPS" and the like go out as separate words
            args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            pass
        plain: Any = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args)
        try:  # buffers other than bytes, which hiredis does not take
            return [hiredis.pack_command(plain)]
        except TypeError as e:
            raise redis_exc.DataError(f"cannot send a command argument to Redis: {e}") from e


_PACKING_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _hiredis_packing(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` (TCP, TLS or Unix socket connection) with hiredis packing; one class per base."""
    if base not in _PACKING_CLASSES:
        _PACKING_CLASSES[base] = type(base.__name__, (_HiredisPacking, base), {})
    return _PACKING_CLASSES[base]


async def queue_script(pipe: Pipeline | ClusterPipeline, script: AsyncScript, keys: list[str],
                       args: list[str | int]) -> None:
    """Queue a Lua script call in a pipeline: EVALSHA on one server, EVAL on a cluster.

    redis-py's cluster pipeline refuses EVALSHA (it cannot reload a script missing on one
    node in the middle of a pipeline); EVAL carries the source, and Redis caches it.
    """
    if isinstance(pipe, ClusterPipeline):
        pipe.eval(cast(str, script.script), len(keys), *keys, *args)
    else:
        await script(keys=keys, args=args, client=pipe)


# Typed views of the replies this package reads. The client is created with
# ``decode_responses=True`` and RESP2 (see :func:`connect`), so every reply holds ``str``;
# redis-py's annotations cover every mode, hence these casts at the boundary.
Entry = tuple[str, dict[str, str]]


async def xrange(redis: Client, key: str, *, start: str = "-", end: str = "+", count: int | None = None) -> list[Entry]:
    """XRANGE with ``str`` entries."""
    return cast(list[Entry], await redis.xrange(key, min=start, max=end, count=count))


async def xread(
    redis: Client, streams: dict[str, str], *, count: int, block: int | None
) -> list[tuple[str, list[Entry]]]:
    """XREAD with ``str`` entries (empty on timeout)."""
    reply = await redis.xread(streams, count=count, block=block)  # type: ignore[arg-type]
    return cast(list[tuple[str, list[Entry]]], reply or [])


async def smembers(redis: Client, key: str) -> list[str]:
    """SMEMBERS, sorted."""
    return sorted(cast(set[str], await redis.smembers(key)))


async def lindex(redis: Client, key: str, index: int) -> str | None:
    """LINDEX."""
    return cast(str | None, await redis.lindex(key, index))

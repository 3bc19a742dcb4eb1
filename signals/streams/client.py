"""The Redis client of this package: :func:`connect`, the bundled Lua scripts, and typed
views of the replies it reads.

:func:`connect` is where the library meets redis-py, so it is where redis-py's failure
modes become this library's: URLs and TLS are checked first (:mod:`signals.streams.urls`),
and the replies of a Redis that refuses work for a while (out of memory, loading,
read-only replica) raise errors that are both the redis-py class and
:class:`~signals.errors.RedisBusyError` (:mod:`signals.streams.redis_errors`, through the
hooks of :mod:`signals.streams.redis_compat`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster

from signals.errors import InvalidInputError
from signals.streams.redis_compat import (
    MAX_CONNECTIONS,
    RESP_OPTIONS,
    WaitsForConnections,
    wrap_connection_class,
)
from signals.streams.urls import TLSOptions, check_url, redact_url

__all__ = ("Client", "Entry", "connect", "lindex", "lua", "queue_script", "smembers", "xrange", "xread")

Client = Redis | RedisCluster
"""A redis.asyncio client: one server (or a replicated primary), or a Redis Cluster."""


@cache
def lua(name: str) -> str:
    """The source of a bundled Lua script, after the checks every script shares
    (``lua/_checks.lua``: a command the caller's ACL refuses, found before the first write)."""
    folder = resources.files("signals.streams").joinpath("lua")
    return folder.joinpath("_checks.lua").read_text("utf-8") + folder.joinpath(name + ".lua").read_text("utf-8")


def connect(url: str, *, cluster: bool = False, tls: TLSOptions | None = None, max_reply_bytes: int | None = None,
            **kwargs: object) -> Client:
    """A redis.asyncio client for ``url`` speaking RESP2 with ``str`` replies.

    RESP2 is pinned: redis-py 8 defaults to RESP3 but still shapes some replies as RESP2,
    and every reply this package parses is written against RESP2. Replies that are not
    UTF-8 decode with ``surrogateescape`` instead of raising. With ``cluster`` the
    URL names any node of a Redis Cluster; the client discovers the rest. Its socket
    timeout is off, as for a single server, since subscriptions block for seconds.

    ``rediss://`` URLs speak TLS and always verify the server (against ``tls.ca_file``,
    else the system's trust store) unless ``tls.insecure_skip_verify``; ``tls`` needs a
    ``rediss://`` URL, and TLS cannot be set through ``ssl_*`` URL options or keyword
    arguments. On one server, a reply refusing work for a while (``OOM``, ``LOADING``,
    ``READONLY``) raises an error that is both redis-py's class (``OutOfMemoryError``,
    ``BusyLoadingError``, ``ReadOnlyError``) and :class:`~signals.errors.RedisBusyError`.
    On one server the client opens up to ``max_connections`` (100) connections, and a
    command finding them all in use waits for one (:class:`WaitsForConnections`, up to
    ``pool_wait_s``) rather than failing.

    ``max_reply_bytes`` bounds what one round trip's replies (one command's, or a whole
    pipeline's together) may bring into the process on one server (and through Sentinel):
    past it, the read stops, the connection is closed and
    :class:`ReplyTooLargeError` is raised, so that what a writer put in Redis (a 100 MB
    stream entry, a document field of any size) costs this process at most that much
    memory, never a ``MemoryError``. ``None`` (the default): no bound. It needs the
    hiredis parser (a dependency); a Redis Cluster client is not bounded.

    Raises:
        InvalidInputError: a malformed URL or unknown scheme, an ``ssl_*`` URL option or
            keyword, TLS options on a URL that is not ``rediss://``, an unusable TLS file.
    """
    check_url(url, tls)
    refused = sorted(k for k in kwargs if k.startswith("ssl"))
    if refused:
        raise InvalidInputError(f"pass TLS options as tls=TLSOptions(...), not {', '.join(refused)}")
    options: dict[str, object] = dict(RESP_OPTIONS)
    if tls is not None:
        tls.check()
        options.update(tls.redis_options())
    options.update(kwargs)
    try:
        if cluster:
            options["socket_timeout"] = None
            return RedisCluster.from_url(url, **options)
        options.setdefault("max_connections", MAX_CONNECTIONS)
        pool = WaitsForConnections.from_url(url, **options)
    except ValueError as e:
        raise InvalidInputError(f"Redis URL {redact_url(url)!r}: {e}") from e
    pool.connection_class = wrap_connection_class(pool, max_reply_bytes)
    client = Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # aclose() closes the pool too, as with Redis.from_url
    return client



async def queue_script(pipe: Pipeline | ClusterPipeline, script: Any, keys: list[str],
                       args: Sequence[str | int | bytes]) -> None:
    """Queue a call of a bundled script (a :class:`~signals.streams.scripts.ServerScript`)
    in a pipeline: FCALL on Redis 7, EVALSHA on 6.2 (EVAL in a 6.2 cluster pipeline)."""
    await script.queue(pipe, keys, args)


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

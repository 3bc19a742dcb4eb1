"""Small shared helpers: timestamps, Lua script loading, Redis connections."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import cast

from redis.asyncio import Redis

from signals._time import now_iso

__all__ = ("Entry", "connect", "lindex", "lua", "now_iso", "smembers", "xrange", "xread")


@cache
def lua(name: str) -> str:
    """The source of a bundled Lua script."""
    return resources.files("signals").joinpath("lua", name + ".lua").read_text("utf-8")


def connect(url: str, **kwargs: object) -> Redis:
    """A redis.asyncio client for ``url`` speaking RESP2 with ``str`` replies.

    RESP2 is pinned: redis-py 8 defaults to RESP3 but still shapes some replies as RESP2,
    and every reply this package parses is written against RESP2.
    """
    options: dict[str, object] = {"protocol": 2, "decode_responses": True}
    options.update(kwargs)
    return Redis.from_url(url, **options)  # type: ignore[arg-type]


# Typed views of the replies this package reads. The client is created with
# ``decode_responses=True`` and RESP2 (see :func:`connect`), so every reply holds ``str``;
# redis-py's annotations cover every mode, hence these casts at the boundary.
Entry = tuple[str, dict[str, str]]


async def xrange(redis: Redis, key: str, *, start: str = "-", end: str = "+", count: int | None = None) -> list[Entry]:
    """XRANGE with ``str`` entries."""
    return cast(list[Entry], await redis.xrange(key, min=start, max=end, count=count))


async def xread(
    redis: Redis, streams: dict[str, str], *, count: int, block: int | None
) -> list[tuple[str, list[Entry]]]:
    """XREAD with ``str`` entries (empty on timeout)."""
    reply = await redis.xread(streams, count=count, block=block)  # type: ignore[arg-type]
    return cast(list[tuple[str, list[Entry]]], reply or [])


async def smembers(redis: Redis, key: str) -> list[str]:
    """SMEMBERS, sorted."""
    return sorted(cast(set[str], await redis.smembers(key)))


async def lindex(redis: Redis, key: str, index: int) -> str | None:
    """LINDEX."""
    return cast(str | None, await redis.lindex(key, index))

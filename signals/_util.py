"""Small shared helpers: timestamps, Lua script loading, Redis connections."""

from __future__ import annotations

from functools import cache
from importlib import resources

from redis.asyncio import Redis

from signals._time import now_iso

__all__ = ("connect", "lua", "now_iso")


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

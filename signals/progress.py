"""Lag: how far the workers are behind the writers, per lane (read-only)."""

from __future__ import annotations

import anyio
from redis.asyncio import Redis

from signals._util import smembers
from signals.keys import Keys

__all__ = ("lagging_lanes", "wait_caught_up")


async def lagging_lanes(redis: Redis, keys: Keys) -> dict[str, tuple[int, int]]:
    """Lanes whose processed write version is behind the document: ``lane -> (doc, processed)``."""
    behind: dict[str, tuple[int, int]] = {}
    for partition in range(keys.partitions):
        lanes = await smembers(redis, keys.lanes(partition))
        if not lanes:
            continue
        async with redis.pipeline(transaction=False) as pipe:
            for lane in lanes:
                pipe.hget(keys.doc(lane), "version")
                pipe.hget(keys.track(lane), "wv")
            replies = await pipe.execute()
        for i, lane in enumerate(lanes):
            doc, done = int(replies[2 * i] or 0), int(replies[2 * i + 1] or 0)
            if done < doc:
                behind[lane] = (doc, done)
    return behind


async def wait_caught_up(redis: Redis, keys: Keys, limit_s: float = 60.0, poll_s: float = 0.02) -> None:
    """Wait until no lane lags (every write processed); ``TimeoutError`` after ``limit_s``.

    Polling is the honest way to wait for other processes' progress here: workers do not
    publish a "caught up" event, and the check is two small reads per lane.
    """
    with anyio.fail_after(limit_s):
        while await lagging_lanes(redis, keys):  # noqa: ASYNC110 - progress of other processes
            await anyio.sleep(poll_s)

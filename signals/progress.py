"""Lag: how far the workers are behind the writers, per lane (read-only)."""

from __future__ import annotations

import anyio

from signals._util import Client, smembers
from signals.keys import Keys

__all__ = ("lagging_lanes", "lane_versions", "wait_caught_up")


async def lane_versions(redis: Client, keys: Keys, lanes: list[str]) -> list[tuple[int, int]]:
    """Per lane: (document version, write version the workers have processed)."""
    if not lanes:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.hget(keys.doc(lane), "version")
            pipe.hget(keys.track(lane), "wv")
        replies = await pipe.execute()
    return [(int(replies[2 * i] or 0), int(replies[2 * i + 1] or 0)) for i in range(len(lanes))]


async def lagging_lanes(redis: Client, keys: Keys) -> dict[str, tuple[int, int]]:
    """Lanes whose processed write version is behind the document: ``lane -> (doc, processed)``."""
    behind: dict[str, tuple[int, int]] = {}
    for partition in range(keys.partitions):
        lanes = await smembers(redis, keys.lanes(partition))
        for lane, (doc, done) in zip(lanes, await lane_versions(redis, keys, lanes), strict=True):
            if done < doc:
                behind[lane] = (doc, done)
    return behind


async def wait_caught_up(redis: Client, keys: Keys, limit_s: float = 60.0, poll_s: float = 0.02) -> None:
    """Wait until no lane lags (every write processed); ``TimeoutError`` after ``limit_s``.

    Polling is the honest way to wait for other processes' progress here: workers do not
    publish a "caught up" event, and the check is two small reads per lane.
    """
    with anyio.fail_after(limit_s):
        while await lagging_lanes(redis, keys):  # noqa: ASYNC110 - progress of other processes
            await anyio.sleep(poll_s)

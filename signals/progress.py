"""Lag: how far the workers are behind the writers, per lane (read-only)."""

from __future__ import annotations

from redis.asyncio import Redis

from signals.keys import Keys

__all__ = ("lagging_lanes",)


async def lagging_lanes(redis: Redis, keys: Keys) -> dict[str, tuple[int, int]]:
    """Lanes whose processed write version is behind the document: ``lane -> (doc, processed)``."""
    behind: dict[str, tuple[int, int]] = {}
    for partition in range(keys.partitions):
        lanes = sorted(await redis.smembers(keys.lanes(partition)))
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

"""Lag: how far the workers are behind the writers, per lane (read-only).

Versions read back are checked: a document or tracking hash whose version is not an
integer within 0..2**53 (or a key of another type) raises
:class:`~signals.errors.CorruptDataError` naming the key and the field, instead of a raw
``ValueError``.
"""

from __future__ import annotations

import anyio
from redis import exceptions as redis_exc

from signals.errors import CorruptDataError
from signals.streams.client import Client, smembers
from signals.streams.keys import Keys
from signals.streams.replay import MAX_VERSION

__all__ = ("lagging_lanes", "lane_versions", "wait_caught_up")


async def lane_versions(redis: Client, keys: Keys, lanes: list[str]) -> list[tuple[int, int]]:
    """Per lane: (document version, write version the workers have processed).

    Raises:
        CorruptDataError: a version field is not an integer within 0..2**53 (names it).
    """
    if not lanes:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.execute_command("HGET", keys.doc(lane), "version", NEVER_DECODE=True)
            pipe.execute_command("HGET", keys.track(lane), "wv", NEVER_DECODE=True)
        replies = await pipe.execute(raise_on_error=False)
    return [(_version(replies[2 * i], keys.doc(lane), "version"), _version(replies[2 * i + 1], keys.track(lane), "wv"))
            for i, lane in enumerate(lanes)]


def _version(raw: object, key: str, field: str) -> int:
    if raw is None:
        return 0
    if isinstance(raw, redis_exc.ResponseError) and str(raw).startswith("WRONGTYPE"):
        raise CorruptDataError(f"{key} is not a hash") from raw
    if isinstance(raw, Exception):
        raise raw  # whole-server conditions (OOM, loading...) are not this lane's data
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if not text.isascii() or not text.isdigit() or len(text) > 16 or int(text) > MAX_VERSION:
        raise CorruptDataError(f"{key} field {field} is {text[:40]!r}, not an integer within 0..2**53")
    return int(text)


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

"""A subscriber whose lane is trimmed under it (issue 11): it resumes with no gap, no repeat.

:class:`~signals.streams.subscribe.Subscription` promises that a version gap (the subscriber
fell behind the stream's retention) re-bootstraps from the latest snapshot, and that
the versions it delivers only increase. Two ways a lane is trimmed under a subscriber:
the worker's own retention (``retain_signals``, always at a snapshot boundary) and a
trim that cuts a chain (an operator's ``XTRIM MAXLEN``), which leaves deltas at the head.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import pytest
import structlog
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.streams.keys import Keys
from signals.streams.replay import read_signals
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(10)]


@contextmanager
def _events() -> Iterator[list[MutableMapping[str, Any]]]:
    """The library's log events, info included (the session filters below warning).

    Only the level filter changes, and back: the processors stay the session's, so
    loggers cached earlier keep being captured by other tests.
    """
    wrapper = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(wrapper_class=wrapper)


def _doc(n: int) -> str:
    return "# Notes\n" + "\n".join(LINES) + f"\n- counter {n}"


async def _write(url: str, redis: Redis, keys: Keys, numbers: range, **worker: Any) -> None:
    """Write ``_doc(n)`` for each n to lane r:u, a worker running, and wait for catch-up."""
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1, **worker):
        for n in numbers:
            await store.replace("u", _doc(n))
        await wait_caught_up(redis, keys)


async def _retained(redis: Redis, keys: Keys) -> list[tuple[int, str]]:
    """The retained signals of r:u as ``(version, mode)``."""
    return [(s.version, s.mode) for _, s in await read_signals(redis, keys, "r:u")]


async def test_a_chain_cut_under_the_subscriber_rebootstraps_from_the_latest_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """The stream is cut mid-chain while the subscriber holds v2: its next poll meets delta v9
    (a gap), re-bootstraps from the latest snapshot (v11) and delivers v11..v13 at once,
    refusing nothing; later signals follow as usual."""
    url = redis_server.url
    await _write(url, redis, keys, range(1, 3), snapshot_every=5)
    sub = Subscription(redis, keys, "r:u", count=2)  # a read of two entries holds no snapshot
    assert [m.signal.version for m in await sub.bootstrap()] == [1, 2]
    await _write(url, redis, keys, range(3, 14), snapshot_every=5)
    await redis.xtrim(keys.signals("r:u"), maxlen=5, approximate=False)
    assert await _retained(redis, keys) == [(9, "delta"), (10, "delta"), (11, "snapshot"), (12, "delta"), (13, "delta")]
    with _events() as logs:
        items = await sub.poll()
    assert [(m.signal.version, m.signal.mode) for m in items] == [(11, "snapshot"), (12, "delta"), (13, "delta")]
    assert (sub.version, sub.value) == (13, _doc(13))
    events = [(e["event"], e.get("have"), e.get("got")) for e in logs]
    assert ("subscribe.gap", 2, 9) in events
    assert not [e for e in logs if e["log_level"] == "warning"], logs
    await _write(url, redis, keys, range(14, 15), snapshot_every=5)
    assert [(m.signal.version, m.value) for m in await sub.poll()] == [(14, _doc(14))]


async def test_a_subscriber_behind_the_workers_retention_resumes_at_the_retained_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """The worker trims at snapshot boundaries (one signal kept at least: the last chain): a subscriber that held v2
    resumes at the retained snapshot v7 and its delta v8, with no warning and no repeat."""
    url = redis_server.url
    await _write(url, redis, keys, range(1, 3), snapshot_every=3, retain_signals=1)
    sub = Subscription(redis, keys, "r:u")
    assert [m.signal.version for m in await sub.bootstrap()] == [1, 2]
    await _write(url, redis, keys, range(3, 9), snapshot_every=3, retain_signals=1)
    assert await _retained(redis, keys) == [(7, "snapshot"), (8, "delta")]
    with capture_logs() as logs:
        items = await sub.poll()
    assert [(m.signal.version, m.signal.mode) for m in items] == [(7, "snapshot"), (8, "delta")]
    assert (sub.version, sub.value) == (8, _doc(8))
    assert not [e for e in logs if e["log_level"] == "warning"], logs

"""Two workers repairing one lane at once keep the lane invariant (no version twice),
against a real redis-server."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from signals.core.codec import FIELD, decode_signal
from signals.core.lane import LaneOptions
from signals.core.retention import Retention
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from workers.engine.chains import walk_chains
from workers.engine.commit import plan_lane
from workers.engine.commit_call import run_commits
from workers.engine.consumer import Consumer
from workers.engine.lane_state import Pending, load_documents, read_lanes
from workers.engine.options import ConsumerOptions
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def _pendings(consumer: Consumer, redis: Redis, keys: Keys, lane: str) -> list[Pending]:
    partition = keys.partition(lane)
    out = []
    for entry_id, fields in await redis.xrange(keys.writes(partition)):
        event, prev, _ = consumer._events.decode(fields, partition)
        if event.lane == lane:
            out.append(Pending(partition, entry_id, event, prev))
    return out


async def _plan(consumer: Consumer, redis: Redis, keys: Keys, lane: str, entries: list[Pending]):
    """One worker's read + plan of a lane, exactly as Consumer._compute_and_commit does it."""
    states = await read_lanes(redis, keys, consumer._cache, {lane: keys.partition(lane)}, {})
    known: dict[str, dict[str, str]] = {}
    await walk_chains(redis, keys, consumer._chain, states, by_lane={lane: entries}, known=known)
    plan = plan_lane(lane, states[lane], entries, options=LaneOptions(), now="2024-01-01T00:00:00Z", signer=None,
                     known=known.get(lane))
    if plan is None:  # needs the document's text
        await load_documents(redis, keys, states, [lane])
        plan = plan_lane(lane, states[lane], entries, options=LaneOptions(), now="2024-01-01T00:00:00Z",
                         signer=None, known=known.get(lane))
    assert plan is not None
    return plan[0]


async def test_two_workers_repairing_one_lane_do_not_repeat_a_version(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """Two workers repairing one corrupt tracking whose wv equals the document's version:
    the repair branch of the commit compared wv only, so both appended version 2."""
    store = WorkingMemoryStore(redis, keys=keys)
    lane = "r:rep"
    await store.replace("rep", "# Rep\n- one")
    async with running_workers(redis_server.url, keys, 1):
        await wait_caught_up(redis, keys)
    # a non-worker corrupts the tracking: a partial hash (the lane is repaired)
    await redis.hdel(keys.track(lane), "n")
    a = Consumer(redis, keys, ConsumerOptions(), "a")
    b = Consumer(redis, keys, ConsumerOptions(), "b")
    entries_a = await _pendings(a, redis, keys, lane)  # both hold the write event (one reclaimed it)
    entries_b = await _pendings(b, redis, keys, lane)
    ca = await _plan(a, redis, keys, lane, entries_a)
    cb = await _plan(b, redis, keys, lane, entries_b)
    partition = keys.partition(lane)
    [ra], _ = await run_commits(redis, keys, a._commit, [(partition, [ca])], retention=Retention())
    [rb], _ = await run_commits(redis, keys, b._commit, [(partition, [cb])], retention=Retention())
    versions = [decode_signal(f[FIELD]).version for _, f in await redis.xrange(keys.signals(lane))]
    assert versions == sorted(set(versions)), f"lane versions repeat: {versions} (statuses {ra}, {rb})"


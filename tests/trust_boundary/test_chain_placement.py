"""Genuine write events are never dead-lettered as off the lane's chain (the intermittent
failure of ``test_hostile_run.py``: "poison: version N is not on the lane's chain of writes"
for an honest write).

:func:`workers.engine.commit.event_chain` calls the chain from the worker's last processed event
to the batch's newest genuine event *whole* when it walks back from that event to the
tracked one; an event of the batch off that walk is then a forgery. The newest genuine
event was taken to be the newest batch event among the ids earlier chain walks had found
(``Consumer._known``). Those ids outlive the walk that found them: an event left there by
the walk of an older batch (the document was then at that event) is the newest *known*
event of a later batch even when the batch holds newer genuine events, whenever this
batch's own walk from the document did not reach the batch:

* it failed: the document is more than 256 writes ahead (or the stream was trimmed), so
  nothing was added (``test_far_behind_batch_is_not_taken_for_forgeries``);
* it was skipped or stopped early at an id a *concurrent* batch of the same worker had
  just walked (the maintenance task's XAUTOCLAIM runs beside the read loop and shares
  ``_known``): the walk of the newer batch covered the document down to that batch only
  (``test_reclaim_beside_the_read_loop_is_not_taken_for_forgeries``).

Both interleavings are driven deterministically here, against a real Redis.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.codec import FIELD, decode_dead_letter
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane
from workers.engine import consumer as consumer_module
from workers.engine.consumer import Consumer
from workers.engine.options import ConsumerOptions
from workers.engine.reader import RawEntry
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

LANE = "r:walked"




async def _write(store: WorkingMemoryStore, n: int) -> None:
    await store.replace("walked", f"# walked\n- write {n}")


async def _read(redis: Redis, keys: Keys, consumer: str, count: int) -> list[RawEntry]:
    stream = keys.writes(keys.partition(LANE))
    reply = await redis.xreadgroup(GROUP, consumer, {stream: ">"}, count=count)
    return [(stream, entry_id, fields) for _, entries in reply for entry_id, fields in entries]


async def _dead_letters(redis: Redis, keys: Keys) -> list[str]:
    return [decode_dead_letter(fields[FIELD]).error
            for _, fields in await redis.xrange(keys.dead_letters(keys.partition(LANE)))]


async def _reclaim(redis: Redis, keys: Keys, worker: Consumer, entries: list[RawEntry]) -> None:
    """Claim ``entries`` for ``worker`` and process them, as its XAUTOCLAIM would."""
    stream = keys.writes(keys.partition(LANE))
    claimed = await redis.xclaim(stream, GROUP, worker.name, 0, [entry_id for _, entry_id, _ in entries])
    await worker.process([(stream, entry_id, fields) for entry_id, fields in claimed])


async def _known_behind(redis: Redis, keys: Keys, worker: Consumer, store: WorkingMemoryStore) -> None:
    """Write versions 1..3 and process 1, then 2 alone while the document is at 3: the
    walk from 3 leaves event 3 among the worker's known ids, not yet processed."""
    await _write(store, 1)
    await worker.process(await _read(redis, keys, worker.name, 1))
    await _write(store, 2)
    await _write(store, 3)
    await worker.process(await _read(redis, keys, worker.name, 1))
    assert await redis.hget(keys.track(LANE), "wv") == "2"


async def test_far_behind_batch_is_not_taken_for_forgeries(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A batch holding versions 3 and 4 while the document is 300 writes ahead: the walk
    from the document gives up after 256 steps; 3 was found genuine by an older walk, and
    4 (genuine, newer) was dead-lettered as "not on the lane's chain of writes"."""
    store = WorkingMemoryStore(redis, keys=keys)
    worker = Consumer(redis, keys, ConsumerOptions(), "solo")
    await worker.ensure_groups()
    await _known_behind(redis, keys, worker, store)
    for n in range(4, 301):
        await _write(store, n)
    await worker.process(await _read(redis, keys, worker.name, 2))  # versions 3 and 4
    assert await _dead_letters(redis, keys) == []
    await worker.process(await worker.read_batch())
    assert await _dead_letters(redis, keys) == []
    assert (await check_lane(redis, keys, LANE))[-1].value == "# walked\n- write 300"


async def test_reclaim_beside_the_read_loop_is_not_taken_for_forgeries(
    redis_server: RedisServer, redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read loop's batch holds version 6 (the document at 7): its walk finds 6 and 7.
    Before it commits, the worker's reclaim processes versions 3 and 5 (pending for a
    stalled worker, which still holds 4): the walk is skipped (the document's event is
    known), 3 is the newest known event of that batch, the walk from 3 reaches the
    tracked 2, and 5 (genuine) was dead-lettered. (3 and 5 do not extend the tracked
    chain one by one, so the steady-state path does not take the batch.)"""
    store = WorkingMemoryStore(redis, keys=keys)
    worker = Consumer(redis, keys, ConsumerOptions(), "solo")
    await worker.ensure_groups()
    await _known_behind(redis, keys, worker, store)
    await _write(store, 4)
    await _write(store, 5)
    stalled = await _read(redis, keys, "stalled", 3)  # versions 3..5, read by a worker that stalls
    await _write(store, 6)
    await _write(store, 7)
    loop_batch = await _read(redis, keys, worker.name, 1)  # version 6

    real = consumer_module.run_commits
    held, go = anyio.Event(), anyio.Event()
    calls = 0

    async def gated(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # the read loop's commit waits until the reclaim has run
            held.set()
            await go.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(consumer_module, "run_commits", gated)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.process, loop_batch)
        await held.wait()
        await _reclaim(redis, keys, worker, [stalled[0], stalled[2]])  # versions 3 and 5
        go.set()
    assert await _dead_letters(redis, keys) == []
    await _reclaim(redis, keys, worker, [stalled[1]])  # version 4
    await worker.process(await worker.read_batch())
    assert await _dead_letters(redis, keys) == []
    assert (await check_lane(redis, keys, LANE))[-1].value == "# walked\n- write 7"

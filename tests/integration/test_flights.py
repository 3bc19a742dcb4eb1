"""Batches in flight (workers.flights): the read loop plans the next batch while the last
one commits, and no lane is planned while an earlier flight may still change it."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import workers.consumer as consumer_module
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane
from workers.consumer import Consumer, ConsumerOptions
from workers.flights import LaneGate, open_flights

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def test_a_lane_gate_holds_lanes_in_the_order_flights_entered() -> None:
    """A second flight waits only for the lanes the first holds, and only until the first
    leaves; a lane both released is held by nobody."""
    gate = LaneGate()
    first, leave_first = gate.enter(["r:a", "r:b"])
    second, leave_second = gate.enter(["r:b", "r:c"])
    assert first == {}
    assert set(second) == {"r:b"}
    assert not second["r:b"].is_set()
    leave_first()
    assert second["r:b"].is_set()
    third, _ = gate.enter(["r:a", "r:b"])
    assert set(third) == {"r:b"}  # r:a was released; r:b is still the second flight's
    leave_second()
    assert third["r:b"].is_set()
    assert gate.enter(["r:c"])[0] == {}


async def _flights(consumer: Consumer) -> Any:
    return open_flights(lambda raw, ahead, gate: consumer.process(raw, prefetch=ahead, gate=gate),
                        lambda streams: consumer.read_batch(streams, wait=False))


async def test_the_next_batch_is_read_and_planned_while_the_last_one_commits(
    redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first flight's commit is held: its read-ahead has already come back with the
    next batch, whose lane the first flight does not hold is planned meanwhile; its lane
    the first flight holds waits, and is planned after it, from the tracking that flight
    committed (no conflict, no recompute), so both lanes' signals are the writes in order."""
    store = WorkingMemoryStore(redis, keys=keys)
    consumer = Consumer(redis, keys, ConsumerOptions(), "flights")
    await consumer.ensure_groups()
    for lane in ("a", "b"):  # both lanes in the steady state
        await store.replace(lane, f"# {lane}\n- 1")
    await consumer.process(await consumer.read_batch())

    real_commits, real_plan = consumer_module.run_commits, consumer_module.plan_steady
    held, go = anyio.Event(), anyio.Event()
    committed: list[set[str]] = []
    planned: list[tuple[str, bool]] = []  # (lane, whether the first commit was still held)

    async def hold_the_first(*args: Any, **kwargs: Any) -> Any:
        lanes = {c.lane for _, commits in args[3] for c in commits}
        if not held.is_set():
            held.set()
            await go.wait()
        result = await real_commits(*args, **kwargs)
        committed.append(lanes)
        return result

    def record(lane: str, *args: Any, **kwargs: Any) -> Any:
        planned.append((lane, held.is_set() and not go.is_set()))
        return real_plan(lane, *args, **kwargs)

    monkeypatch.setattr(consumer_module, "run_commits", hold_the_first)
    monkeypatch.setattr(consumer_module, "plan_steady", record)
    await store.replace("a", "# a\n- 1\n- 2")  # the first batch: lane a
    first = await consumer.read_batch()
    await store.replace("a", "# a\n- 1\n- 2\n- 3")  # waiting for the read-ahead: lanes a and b
    await store.replace("b", "# b\n- 1\n- 2")
    with anyio.fail_after(20):
        async with await _flights(consumer) as flights:
            ahead = await flights.process_and_read(first, keys.all_writes())
            assert held.is_set() and not committed  # returned while the first commit is held
            assert len(ahead) == 2
            async with anyio.create_task_group() as tg:
                tg.start_soon(flights.process_and_read, ahead, None)
                while ("r:b", True) not in planned:  # lane b, held by nobody, is planned meanwhile
                    await anyio.sleep(0.01)
                await anyio.sleep(0.05)
                assert planned == [("r:a", False), ("r:b", True)]  # lane a waits for the first flight
                go.set()
            await flights.settle()
    assert planned == [("r:a", False), ("r:b", True), ("r:a", False)]
    assert committed == [{"r:a"}, {"r:a", "r:b"}]
    assert consumer.stats.conflicts == 0 and consumer.stats.unverified == 0
    for lane, last in (("a", 3), ("b", 2)):
        signals = await check_lane(redis, keys, f"r:{lane}")
        assert [s.version for s in signals] == list(range(1, last + 1))

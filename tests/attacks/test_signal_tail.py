"""The commit script's tail check: a lane's signal stream must still end at the signal its
tracking names before anything is appended. The tracking records the stream's length
(``len``), so the steady state checks length and "nothing after the tail" without reading
an entry; a stream changed by anyone but the commit script fails the check and the lane
is re-snapshotted. A tracking without the length (stored before it was kept) is checked by
reading the last entry, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis

from signals.core.codec import FIELD, decode_signal
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from workers.consumer import Consumer, ConsumerOptions

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

LANE = "r:tail"


async def _lane(redis: Redis, keys: Keys) -> tuple[WorkingMemoryStore, Consumer]:
    """A lane with three signals (a snapshot, then deltas), all processed."""
    store, consumer = WorkingMemoryStore(redis, keys=keys), Consumer(redis, keys, ConsumerOptions(), "w")
    await consumer.ensure_groups()
    for n in range(3):
        await store.replace("tail", "# Notes\n" + "".join(f"- fact {i}\n" for i in range(n + 1)))
        await consumer.process(await consumer.read_batch())
    return store, consumer


NEXT = "# Notes\n- fact 0\n- fact 1\n- fact 2\n- fact 3"


async def _next_signal(redis: Redis, keys: Keys, store: WorkingMemoryStore, consumer: Consumer,
                       text: str = NEXT) -> tuple[str, str]:
    """Write ``text`` and process: the mode and value of the lane's last signal."""
    await store.replace("tail", text)
    await consumer.process(await consumer.read_batch())
    [(_, fields)] = await redis.xrevrange(keys.signals(LANE), count=1)
    signal = decode_signal(fields[FIELD])
    return signal.mode, signal.value or ""


async def _last_id(redis: Redis, keys: Keys) -> str:
    [(entry_id, _)] = await redis.xrevrange(keys.signals(LANE), count=1)
    return str(entry_id)


async def _append_foreign(redis: Redis, keys: Keys) -> None:
    await redis.xadd(keys.signals(LANE), {FIELD: "junk"})


async def _delete_tail(redis: Redis, keys: Keys) -> None:
    await redis.xdel(keys.signals(LANE), await _last_id(redis, keys))


async def _replace_tail(redis: Redis, keys: Keys) -> None:
    """As many entries as before, the tail among them no more: only the ids tell."""
    await redis.xdel(keys.signals(LANE), await _last_id(redis, keys))
    await redis.xadd(keys.signals(LANE), {FIELD: "junk"})


async def _replace_older(redis: Redis, keys: Keys) -> None:
    """An older signal deleted and an entry appended: the length is the recorded one."""
    [(first, _), *_] = await redis.xrange(keys.signals(LANE), count=1)
    await redis.xdel(keys.signals(LANE), first)
    await redis.xadd(keys.signals(LANE), {FIELD: "junk"})


async def _trim(redis: Redis, keys: Keys) -> None:
    """Trimmed by someone else to its last entry: it still ends at the tail, but no longer
    begins with its snapshot."""
    await redis.xtrim(keys.signals(LANE), maxlen=1, approximate=False)


async def _delete_stream(redis: Redis, keys: Keys) -> None:
    await redis.delete(keys.signals(LANE))


TAMPERING: dict[str, Callable[[Redis, Keys], Awaitable[None]]] = {
    "a foreign entry after the tail": _append_foreign,
    "the tail deleted": _delete_tail,
    "the tail replaced at the same length": _replace_tail,
    "an older signal replaced at the same length": _replace_older,
    "trimmed by someone else": _trim,
    "the stream deleted": _delete_stream,
}


async def test_an_untouched_stream_takes_a_delta(redis: Redis, keys: Keys) -> None:
    """The check passes an unchanged stream (no needless snapshot), and the recorded length
    is the stream's own after every commit."""
    store, consumer = await _lane(redis, keys)
    assert await redis.hget(keys.track(LANE), "len") == str(await redis.xlen(keys.signals(LANE)))
    assert (await _next_signal(redis, keys, store, consumer))[0] == "delta"
    assert await redis.hget(keys.track(LANE), "len") == str(await redis.xlen(keys.signals(LANE)))


@pytest.mark.parametrize("legacy", [False, True], ids=["len", "no len"])
@pytest.mark.parametrize("what", list(TAMPERING))
async def test_a_stream_changed_by_someone_else_is_resnapshotted(redis: Redis, keys: Keys, what: str,
                                                                  legacy: bool) -> None:
    """Whatever changed the stream, the next signal is a snapshot of the stored document,
    with the length recorded or not (a tracking from before it was kept: the last entry is
    read; there, a trim that keeps the tail is not seen, as before the length was kept)."""
    store, consumer = await _lane(redis, keys)
    if legacy:
        await redis.hdel(keys.track(LANE), "len")
    await TAMPERING[what](redis, keys)
    mode, value = await _next_signal(redis, keys, store, consumer)
    if legacy and what == "trimmed by someone else":  # its last entry is the tail
        assert mode == "delta"
        return
    assert mode == "snapshot", what
    assert value == NEXT
    assert await redis.hget(keys.track(LANE), "len") == str(await redis.xlen(keys.signals(LANE)))


@pytest.mark.parametrize("junk", ["", "x", "-1", "3.5", "1e400", "99999999999999999999"])
async def test_a_length_not_the_streams_is_resnapshotted(redis: Redis, keys: Keys, junk: str) -> None:
    """A recorded length that is not the stream's (junk, any other number, or one left by
    a worker of an older version, which does not keep it) fails the check: the lane takes a
    snapshot, records the length again, and the next write is a delta."""
    store, consumer = await _lane(redis, keys)
    await redis.hset(keys.track(LANE), "len", junk)
    assert (await _next_signal(redis, keys, store, consumer))[0] == "snapshot"
    assert (await _next_signal(redis, keys, store, consumer, NEXT + "\n- fact 4"))[0] == "delta"

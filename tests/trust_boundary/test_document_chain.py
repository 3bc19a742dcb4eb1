"""The document's ``chain`` field: the write script keeps the lane's last event ids in it,
and a worker behind by a backlog places the batch's events from it instead of walking
the stream. Nothing in it is trusted beyond what the document itself is: a field that is
junk, stale or does not reach the batch leaves the lane to the walk on the stream.
"""

from __future__ import annotations

import itertools

import pytest
from redis.asyncio import Redis

from signals.core.codec import FIELD, decode_signal
from signals.core.retention import Retention
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane
from workers.engine import chains
from workers.engine.chains import CHAIN_IDS, chain_path, join_chain
from workers.engine.consumer import Consumer
from workers.engine.options import ConsumerOptions
from workers.engine.reader import RawEntry
from workers.runtime.embedded import RedisServer

LANE = "r:chained"
_OPTIONS = ConsumerOptions(retention=Retention(signals=1_000))  # every signal kept: the tests count them


def test_blocks_join_only_where_they_share_an_id() -> None:
    """The two blocks join at the id they share; an older block that does not end where
    the newest begins (left by a write script that kept one field, or by anyone) is left
    out, so no link is made up between ids that are not neighbours; absent, the newest
    block is the chain; anything but text is refused."""
    assert join_chain(["1-1 1-2", "1-2 1-3 1-4"]) == "1-1 1-2 1-3 1-4"
    assert join_chain(["1-1 1-2", "1-5 1-6"]) == "1-5 1-6"
    assert chain_path(join_chain(["1-1 1-2", "1-5 1-6"]), "1-6", "1-6", {"1-1"}) is None
    assert join_chain(["1-1 1-2", "1-2"]) == "1-2"
    assert join_chain([None, "1-5 1-6"]) == "1-5 1-6"
    assert join_chain(["1-1", None]) is None
    assert join_chain(None) is None


def test_chain_path_walks_from_start_to_a_stop() -> None:
    """Down the field from the start to the first stop: the stop, then the ids walked."""
    field = "1-1 1-2 1-3 1-4"
    assert chain_path(field, "1-4", "1-4", {"1-2"}) == ["1-2", "1-4", "1-3"]
    assert chain_path(field, "1-4", "1-3", {"1-1"}) == ["1-1", "1-3", "1-2"]


@pytest.mark.parametrize(("field", "why"), [
    (None, "absent"),
    ("", "empty"),
    ("1-1 1-2 1-3", "does not end at the document's event"),
    ("1-0 1-3 1-3 1-4", "an id twice on the walk"),
    ("1-0 1-3 1-4 ", "a trailing space"),
    ("1-1 1-1 1-4", "repeats an id"),
    ("1-1 x 1-4", "not a stream id"),
    ("1-1 1-2 1-4", "no stop below the start"),
    (" ".join(f"1-{n}" for n in range(1, 2 * CHAIN_IDS)) + " 1-9999", "too long"),
])
def test_chain_path_refuses_what_cannot_tell(field: str | None, why: str) -> None:
    """Anything but a well-formed chain ending at the document's event and reaching a
    stop gives ``None`` (the worker then walks the stream)."""
    assert chain_path(field, "1-4", "1-4", {"1-0"}) is None, why




async def _entries(redis: Redis, keys: Keys) -> list[tuple[str, dict[str, str]]]:
    return list(await redis.xrange(keys.writes(keys.partition(LANE))))


@pytest.mark.anyio
@pytest.mark.redis
async def test_write_script_keeps_the_last_ids_in_order(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """After more writes than the chain holds, at every count: the last event ids (between
    CHAIN_IDS / 2 and CHAIN_IDS, bounded by length), oldest first across the two blocks
    (``chain0`` then ``chain``), each named by the next one's ``p``, the newest the
    document's ``eid``; neither block longer than half the bound."""
    store = WorkingMemoryStore(redis, keys=keys)
    lengths = set()
    for n in range(3 * CHAIN_IDS):
        await store.replace("chained", f"# c\n- write {n}")
        if n < CHAIN_IDS:
            continue
        entries = await _entries(redis, keys)
        older, newest = await redis.hmget(keys.doc(LANE), ["chain0", "chain"])
        assert len(older) <= 8 * CHAIN_IDS and len(newest) <= 8 * CHAIN_IDS
        assert older.split(" ")[-1] == newest.split(" ")[0]  # the id the blocks share
        chain = str(join_chain([older, newest])).split(" ")
        lengths.add(len(chain))
        assert chain == [entry_id for entry_id, _ in entries][-len(chain):]
        assert CHAIN_IDS // 2 <= len(chain) <= CHAIN_IDS + 1
        assert chain[-1] == await redis.hget(keys.doc(LANE), "eid")
        prev = {entry_id: fields["p"] for entry_id, fields in entries}
        assert all(prev[b] == a for a, b in itertools.pairwise(chain))
    assert len(lengths) > CHAIN_IDS // 4  # the blocks moved: the chain grew and shrank


@pytest.mark.anyio
@pytest.mark.redis
async def test_a_long_chain_of_one_field_moves_down_whole(redis_server: RedisServer, redis: Redis,
                                                           keys: Keys) -> None:
    """A document written before the chain had two blocks holds up to CHAIN_IDS ids in
    ``chain`` alone: the next write keeps them all as the older block and starts the new
    one from the last of them and its own event."""
    store = WorkingMemoryStore(redis, keys=keys)
    for n in range(CHAIN_IDS):
        await store.replace("chained", f"# c\n- write {n}")
    ids = [entry_id for entry_id, _ in await _entries(redis, keys)]
    await redis.hset(keys.doc(LANE), "chain", " ".join(ids))
    await redis.hdel(keys.doc(LANE), "chain0")
    await store.replace("chained", "# c\n- one more")
    older, newest = await redis.hmget(keys.doc(LANE), ["chain0", "chain"])
    assert older == " ".join(ids)
    assert newest == f"{ids[-1]} {await redis.hget(keys.doc(LANE), 'eid')}"


@pytest.mark.anyio
@pytest.mark.redis
async def test_write_script_restarts_a_chain_that_is_not_the_documents(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A field someone else wrote (not ending at the document's event) is not extended:
    the chain starts again from the document's event."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("chained", "# c\n- one")
    eid = await redis.hget(keys.doc(LANE), "eid")
    await redis.hset(keys.doc(LANE), mapping={"chain": "1-1 1-2 999-9", "chain0": "1-0"})
    await store.replace("chained", "# c\n- two")
    assert await redis.hget(keys.doc(LANE), "chain") == f"{eid} {await redis.hget(keys.doc(LANE), 'eid')}"
    assert await redis.hget(keys.doc(LANE), "chain0") is None  # the older block went with it


async def _backlog(redis: Redis, keys: Keys, store: WorkingMemoryStore, worker: Consumer, writes: int) -> None:
    """Version 1 processed, then ``writes`` more written; the worker reads 2 of them."""
    await store.replace("chained", "# c\n- write 0")
    stream = keys.writes(keys.partition(LANE))
    reply = await redis.xreadgroup(GROUP, worker.name, {stream: ">"}, count=1)
    await worker.process([(stream, i, f) for _, entries in reply for i, f in entries])
    for n in range(1, writes + 1):
        await store.replace("chained", f"# c\n- write {n}")


async def _first_of_backlog(redis: Redis, keys: Keys, worker: Consumer) -> list[RawEntry]:
    stream = keys.writes(keys.partition(LANE))
    reply = await redis.xreadgroup(GROUP, worker.name, {stream: ">"}, count=2)
    return [(stream, i, f) for _, entries in reply for i, f in entries]


async def _no_walk(*args: object, **kwargs: object) -> None:
    raise AssertionError("the stream was walked")


async def _versions(redis: Redis, keys: Keys) -> list[int]:
    return [decode_signal(f[FIELD]).write_version for _, f in await redis.xrange(keys.signals(LANE))]


@pytest.mark.anyio
@pytest.mark.redis
async def test_backlog_is_placed_from_the_document_without_walking_the_stream(
    redis_server: RedisServer, redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of 2 events while the document is 40 writes ahead: placed from the chain
    field (the stream walk is not run), each version signalled once."""
    store = WorkingMemoryStore(redis, keys=keys)
    worker = Consumer(redis, keys, _OPTIONS, "solo")
    await worker.ensure_groups()
    await _backlog(redis, keys, store, worker, 40)

    monkeypatch.setattr(chains, "queue_script", _no_walk)
    await worker.process(await _first_of_backlog(redis, keys, worker))
    monkeypatch.undo()
    await worker.process(await worker.read_batch())
    assert await _versions(redis, keys) == list(range(1, 42))
    await check_lane(redis, keys, LANE)


@pytest.mark.anyio
@pytest.mark.redis
@pytest.mark.parametrize("block", ["chain", "chain0"])
@pytest.mark.parametrize("junk", ["1-1 2-2", "not ids", "x" * 10_000])
async def test_junk_chain_field_falls_back_to_the_stream_walk(
    redis_server: RedisServer, redis: Redis, keys: Keys, junk: str, block: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain block the worker cannot use (written by someone else): the newest one sends
    the lane to the walk on the stream, as before the field existed; an older one that
    does not share the newest one's first id is left out (the newest block still places
    these events). Either way nothing is dead-lettered and every version is signalled."""
    store = WorkingMemoryStore(redis, keys=keys)
    worker = Consumer(redis, keys, _OPTIONS, "solo")
    await worker.ensure_groups()
    await _backlog(redis, keys, store, worker, 40)
    await redis.hset(keys.doc(LANE), block, junk)
    if block == "chain0":  # left out: the newest block places the batch without the walk
        monkeypatch.setattr(chains, "queue_script", _no_walk)
    await worker.process(await _first_of_backlog(redis, keys, worker))
    monkeypatch.undo()
    await worker.process(await worker.read_batch())
    assert await _versions(redis, keys) == list(range(1, 42))
    assert await redis.xlen(keys.dead_letters(keys.partition(LANE))) == 0
    await check_lane(redis, keys, LANE)

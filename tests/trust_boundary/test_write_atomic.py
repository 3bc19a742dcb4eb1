"""A write is all or nothing, whatever the types of the keys it touches.

Redis does not roll a script back: the write script used to store the document and append
its event before writing the document index and the lanes set, so an index of another
type made the write fail (WRONGTYPE) with the document already moved on, and each retry
moved it again (found by an attack run). Now every key the script writes is checked
first: a key of another type is refused with an error naming it, and nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from signals.errors import CorruptDataError
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

LANE = "t:thread-1"
KEYS_OF: dict[str, Callable[[Keys], str]] = {
    "document": lambda k: k.doc(LANE),
    "write stream": lambda k: k.writes(k.partition(LANE)),
    "lanes set": lambda k: k.lanes(k.partition(LANE)),
    "thread record": lambda k: k.thread("thread-1"),
    "idempotency key": lambda k: k.idempotency(LANE, "once"),
}


async def _state(redis: Redis, keys: Keys) -> dict[str, object]:
    """Everything a write of the lane could change (read type-safely)."""
    out: dict[str, object] = {}
    for name, key in KEYS_OF.items():
        kind = await redis.type(key(keys))
        out[name] = (kind, await redis.dump(key(keys)))
    return out


@pytest.mark.parametrize("what", list(KEYS_OF))
async def test_a_key_of_another_type_refuses_the_write_and_writes_nothing(redis: Redis, keys: Keys,
                                                                          what: str) -> None:
    """With any one of the keys the write script touches of another type, the write raises
    CorruptDataError naming that key (the document is also read before the script), and no
    key of the lane changed (a thread's first
    write, so the owner record would be created too; thread scope)."""
    store = WorkingMemoryStore(redis, keys=keys)
    key = KEYS_OF[what](keys)
    await redis.delete(key)
    if what == "idempotency key":
        await redis.rpush(key, "junk")  # a string would be a stored version: the duplicate path
    else:
        await redis.set(key, "junk")
    before = await _state(redis, keys)
    with pytest.raises(CorruptDataError, match=re.escape(key)):
        await store.replace("ada", "# Notes\n- two", thread_id="thread-1", scope="thread",
                            idempotency_key="once")
    assert await _state(redis, keys) == before

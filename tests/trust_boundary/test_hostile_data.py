"""A hostile writer's or agent's data: huge hunk headers, versions in other digits,
documents at version 0, oversized deliveries; against a real redis-server."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.agent import AgentWorkingMemory
from signals.core.cachekey import cache_key
from signals.core.codec import FIELD, encode_json
from signals.core.diff import apply_patch
from signals.core.memory import WorkingMemoryConfig
from signals.core.models import Attributes, Delivery, Signal
from signals.errors import ConflictError, CorruptDataError, DocumentTooLargeError, PatchError
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.namespace import check_namespace
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

MARKDOWN = Attributes(format="markdown", scope="resource")
PATCH = Attributes(format="markdown", scope="resource", patch="unified-diff")
#: A hunk header whose line number has more digits than Python converts to an int (4300).
LONG_HEADER = "@@ -" + "1" * 5000 + ",1 +1,1 @@\n-# a\n+# b"


def _snapshot(lane: str, version: int, text: str) -> Signal:
    return Signal(id="working-memory", mode="snapshot", cache_key=cache_key("markdown", text),
                  tag_name="working-memory", contents=text, value=text, attributes=MARKDOWN, version=version,
                  lane=lane, resource_id=lane[2:], write_version=version)


def _delta(lane: str, version: int, patch: str, text: str) -> Signal:
    return Signal(id="working-memory", mode="delta", cache_key=cache_key("markdown", text),
                  tag_name="working-memory", contents=patch, delta=patch, attributes=PATCH, version=version,
                  lane=lane, resource_id=lane[2:], base_version=version - 1, write_version=version)


def test_a_hunk_header_with_a_huge_line_number_is_a_patch_error() -> None:
    """``int()`` of a hunk header's number past 4300 digits raised ValueError, which no
    reader of a patch catches (they catch PatchError, an InvalidInputError)."""
    with pytest.raises(PatchError):
        apply_patch("# a", LONG_HEADER)


async def test_a_forged_delivery_record_with_a_huge_hunk_header_is_corrupt_data(redis: Redis, keys: Keys) -> None:
    """Any agent user may append to any thread's delivery log. A delta record whose patch
    header holds a 5000-digit line number made ``read`` and ``view_at`` (so ``replay
    --deliveries``) raise ValueError ("unexpected error", exit 1) instead of naming the entry
    as corrupt data."""
    stream = keys.deliveries("t1")
    good = Delivery(thread_id="t1", step=1, lane="r:u", version=1, mode="snapshot", reason="bootstrap",
                    cache_key=cache_key("markdown", "# a"), contents="# a", attributes=MARKDOWN, window="w1")
    await redis.xadd(stream, {FIELD: encode_json(good)})
    forged = Delivery(thread_id="t1", step=2, lane="r:u", version=2, mode="delta", reason="new",
                      cache_key=cache_key("markdown", "# b"), contents=LONG_HEADER, attributes=PATCH, window="w1")
    entry_id = await redis.xadd(stream, {FIELD: encode_json(forged)})
    log = DeliveryLog(redis, keys)
    with pytest.raises(CorruptDataError, match=f"{entry_id}.*does not apply"):
        await log.read("t1")
    with pytest.raises(CorruptDataError, match=entry_id):
        await log.view_at("t1", 2)


async def test_a_subscription_refuses_a_delta_with_a_huge_hunk_header_and_goes_on(redis: Redis, keys: Keys) -> None:
    """A live reader never stops for a bad entry: a delta (appended where the ACL let someone
    else) whose hunk header holds a 5000-digit number raised ValueError out of ``poll``, so
    out of every ``before_model_call`` of the lane's agents. Now it is refused like any delta
    that does not apply, and the next snapshot is delivered."""
    lane = "r:u"
    stream = keys.signals(lane)
    await redis.xadd(stream, {FIELD: encode_json(_snapshot(lane, 1, "# a"))})
    sub = Subscription(redis, keys, lane)
    assert [m.value for m in await sub.bootstrap()] == ["# a"]
    await redis.xadd(stream, {FIELD: encode_json(_delta(lane, 2, LONG_HEADER, "# b"))})
    with capture_logs() as logs:
        assert await sub.poll() == []
    assert [e["event"] for e in logs] == ["subscribe.delta_refused"]
    await redis.xadd(stream, {FIELD: encode_json(_snapshot(lane, 3, "# c"))})
    assert [m.value for m in await sub.poll()] == ["# c"]


@pytest.mark.parametrize("forged", ["0.5", "1e400", "99999999999999999999", "0x1"])
async def test_a_document_version_that_is_not_an_integer_is_named_by_a_conditional_write(
    redis: Redis, keys: Keys, forged: str
) -> None:
    """A writer may ``HSET`` any document. The write script read the version with Lua's
    ``tonumber`` (which takes ``0.5``, ``1e400``, ``0x1``) and answered a conflict with
    ``tostring`` of it (``0.5``, ``inf``, ``1e+20``); a write with ``if_version`` turned that
    into ``int()``: ValueError, not the library's error (and ``0x1`` passed the compare-and-set
    as version 1). Now the script refuses a version that is not a decimal integer as every
    reader does: CorruptDataError naming the field, nothing written; the tool answers the model."""
    store = WorkingMemoryStore(redis, keys=keys)
    version = await store.replace("u", "# one")
    await redis.hset(keys.doc("r:u"), "version", forged)
    length = await redis.xlen(keys.writes(keys.partition("r:u")))
    with pytest.raises(CorruptDataError, match=f"{keys.doc('r:u')} field version"):
        await store.replace("u", "# two", if_version=version)
    assert await redis.hget(keys.doc("r:u"), "data") == "# one"
    assert await redis.xlen(keys.writes(keys.partition("r:u"))) == length
    agent = AgentWorkingMemory(redis, keys, resource_id="u", config=WorkingMemoryConfig())
    assert (await agent.call_tool({"memory": "# three"}))["success"] is False


@pytest.mark.parametrize("stored", ["²", "٤"])
async def test_a_partition_count_in_other_digits_is_corrupt_data(redis: Redis, keys: Keys, stored: str) -> None:
    """A writer may ``HSETNX`` the namespace's settings before any process has. The check
    took ``str.isdigit`` for a number: ``'²'`` passed it and ``int()`` raised ValueError in
    every writer, worker and agent of the namespace; ``'٤'`` (Arabic-Indic four) was taken
    for 4. Now anything but ASCII digits is CorruptDataError naming the key."""
    await redis.hset(keys.config(), "partitions", stored)
    with pytest.raises(CorruptDataError, match=f"{keys.config()} field partitions"):
        await check_namespace(redis, keys)


async def test_the_system_message_delivery_never_carries_an_oversized_document(redis: Redis, keys: Keys) -> None:
    """Sizes are the worker's to bound: a document over its 4 Mi characters never becomes a
    signal. The system-message delivery reads the document itself, and read it whole: a
    writer's ``HSET`` of 5 M characters (or a writer whose own max_bytes is that large) went
    into the system prompt of every model call. Now the delivery refuses a document over the
    worker's bound, naming the key (as it refuses one that is not UTF-8); the lane's owner
    can still write over it."""
    await redis.hset(keys.doc("r:u"), mapping={"data": "- remember this\n" * 330_000, "version": "1",
                                                "format": "markdown"})
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", delivery="system-message")
    with pytest.raises(CorruptDataError, match=f"{keys.doc('r:u')}.*over"):
        await agent.before_model_call(set())
    store = WorkingMemoryStore(redis, keys=keys)
    assert await store.replace("u", "# fresh") == 2
    result = await agent.before_model_call(set())
    assert result.system is not None and "# fresh" in result.system["content"]


async def test_a_document_at_version_0_is_corrupt_and_never_logged(redis: Redis, keys: Keys) -> None:
    """No write stores version 0 (the first is 1), and a delivery record's version is 1 or
    more. A writer's ``HSET`` of a document at version 0 was read as a document; the
    system-message delivery put it in the system prompt and logged it at version 0, a
    record the log's readers refuse: the agent itself made its thread's log unreadable
    (``replay --deliveries`` exit 2 for every step). Now ``get`` refuses it, naming the
    field, and nothing is logged."""
    await redis.hset(keys.doc("r:u"), mapping={"data": "# planted", "version": "0", "format": "markdown"})
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", delivery="system-message")
    with pytest.raises(CorruptDataError, match=f"{keys.doc('r:u')} field version"):
        await agent.before_model_call(set())
    assert not await redis.exists(keys.deliveries("t1"))
    assert await DeliveryLog(redis, keys).read("t1") == []
    assert await WorkingMemoryStore(redis, keys=keys).replace("u", "# mine") == 1  # the owner writes over it
    assert (await agent.before_model_call(set())).system is not None
    assert [d.version for d in await DeliveryLog(redis, keys).read("t1")] == [1]


async def test_a_conflict_over_a_large_stored_version_is_a_conflict(redis: Redis, keys: Keys) -> None:
    """The write script answered a conflict with ``tostring`` of the stored version, which
    Lua prints as ``1e+14`` from 10**14 on: ``int()`` of it raised ValueError out of a
    conditional write (a client whose cache was stale sent it). The conflict now names the
    version as stored, and the store parses it as every reader does."""
    store = WorkingMemoryStore(redis, keys=keys)
    version = await store.replace("u", "# one")
    await redis.hset(keys.doc("r:u"), "version", "100000000000000")
    with pytest.raises(ConflictError, match="at document version 100000000000000, expected 1") as caught:
        await store.replace("u", "# two", if_version=version)
    assert caught.value.actual == 100_000_000_000_000
    assert await redis.hget(keys.doc("r:u"), "data") == "# one"


async def test_a_write_no_worker_would_take_is_refused_and_get_reads_what_is_stored(redis: Redis, keys: Keys) -> None:
    """A writer's ``max_bytes`` is its own: a store with 8 MiB wrote a document of 4.5 M
    characters that no worker signals, and ``get`` then refused to read it back (an
    operator could not look at it). The write is now refused when its event would be over
    what a worker takes (the document with its JSON escapes: newlines count twice), nothing
    written; a document stored past that by hand is still read by ``get``, and only the
    system-message delivery refuses to put it in front of a model."""
    store = WorkingMemoryStore(redis, keys=keys, config=WorkingMemoryConfig(max_bytes=8 * 1024 * 1024))
    with pytest.raises(DocumentTooLargeError, match="over the 4,194,304 a worker takes"):
        await store.replace("u", "# big\n" + "x" * 4_500_000)
    with pytest.raises(DocumentTooLargeError, match="JSON escapes"):  # 3 M characters, 1.5 M of them newlines
        await store.replace("u", "a\n" * 1_500_000)
    assert not await redis.exists(keys.doc("r:u"))
    assert await redis.xlen(keys.writes(keys.partition("r:u"))) == 0
    await redis.hset(keys.doc("r:u"), mapping={"data": "y" * 4_500_000, "version": "1", "format": "markdown"})
    doc = await store.get("u")
    assert doc is not None and len(doc.data) == 4_500_000
    agent = AgentWorkingMemory(redis, keys, resource_id="u", delivery="system-message")
    with pytest.raises(CorruptDataError, match="over the 4,194,304 a delivery takes"):
        await agent.before_model_call(set())

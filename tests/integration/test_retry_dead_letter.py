"""Retry, then dead-letter after ``max_attempts`` (issue 11): an event whose processing fails
every time is counted, retried, and moved to the dead-letter stream with the reason; the
worker keeps going.

The failure is a real one, provoked on a real redis-server: the worker's ACL user (the
generated least-privilege ``worker`` role) is narrowed so that its commit script may not
declare the signal streams of lanes outside ``r:g*``. Redis refuses the commit of lane
``r:xbad`` with NOPERM on every attempt (a fault of that lane, not of the server), while
lane ``r:good`` in the same namespace is committed as usual. Poison (malformed events)
is dead-lettered at once and is tested in ``test_faults.py``; this is the other path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.codec import FIELD, decode_dead_letter, decode_write
from signals.core.models import DeadLetter
from signals.streams.acl import ROLES, acl_users
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, running_workers
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
KEYS = Keys("dl", 4)
PASSWORD = "worker-secret"
ATTEMPTS = 3


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A private server: the test changes its ACL users."""
    with RedisServer() as srv:
        yield srv


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[Redis]:
    """The default (unrestricted) user: writes documents and reads what the worker did."""
    client = connect(server.url)
    await client.flushall()
    yield client  # type: ignore[misc]
    await client.aclose()


async def _narrowed_worker(admin: Redis, server: RedisServer) -> str:
    """Create the worker user with its scripts' signal-stream pattern narrowed to lanes
    ``r:g*``; returns its URL."""
    name = f"{KEYS.namespace}-worker"
    rules = acl_users(KEYS, dict.fromkeys(ROLES, PASSWORD))[name]
    broad = f"~{KEYS.namespace}:{{p*}}:sig:*"
    root = rules.index(broad)  # the root selector's pattern: what EVAL/EVALSHA may declare
    rules[root] = f"~{KEYS.namespace}:{{p*}}:sig:r:g*"
    await admin.execute_command("ACL", "SETUSER", name, *rules)
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{server.port}/0"


async def _dead_letters(admin: Redis, partition: int) -> list[tuple[str, DeadLetter]]:
    return [(entry_id, decode_dead_letter(fields[FIELD]))
            for entry_id, fields in await admin.xrange(KEYS.dead_letters(partition))]


async def test_an_event_failing_every_attempt_is_retried_then_dead_lettered(
    server: RedisServer, admin: Redis
) -> None:
    """Lane r:xbad's commits are refused every time: each of its events is attempted
    ``max_attempts`` times (counted in the partition's failures hash), then dead-lettered
    with the reason and acknowledged; lane r:good goes on being signalled meanwhile."""
    url = await _narrowed_worker(admin, server)
    store = WorkingMemoryStore(admin, keys=KEYS)
    bad = KEYS.partition("r:xbad")
    seen_attempts: set[int] = set()
    async with running_workers(url, KEYS, 1, max_attempts=ATTEMPTS, claim_idle_ms=300):
        await store.replace("good", "# Good\n- one")
        bad_versions = [await store.replace("xbad", "# Bad\n- one"), await store.replace("xbad", "# Bad\n- two")]
        await store.replace("good", "# Good\n- two")
        with anyio.fail_after(60):
            while len(await _dead_letters(admin, bad)) < len(bad_versions):
                counts = await admin.hvals(KEYS.failures(bad))
                seen_attempts.update(int(c) for c in counts)
                await anyio.sleep(0.02)
        with anyio.fail_after(30):  # r:good is signalled, whatever r:xbad does
            while await admin.hget(KEYS.track("r:good"), "wv") != "2":
                await anyio.sleep(0.05)
        assert await admin.xlen(KEYS.signals("r:xbad")) == 0, "the refused lane got no signal"

    letters = await _dead_letters(admin, bad)
    assert [decode_write(letter.fields[FIELD]).version for _, letter in letters] == bad_versions
    for _, letter in letters:
        assert letter.attempts == ATTEMPTS
        assert letter.error.startswith(f"failed {ATTEMPTS} times: ")
        assert "NoPermission" in letter.error or "no permissions" in letter.error  # the reason names it
        assert letter.stream == KEYS.writes(bad)
    assert seen_attempts <= set(range(1, ATTEMPTS + 1)), seen_attempts
    assert ATTEMPTS - 1 in seen_attempts, f"not retried before the dead letter: counts seen {seen_attempts}"
    assert await admin.hlen(KEYS.failures(bad)) == 0, "a dead letter leaves no failure count behind"
    pending = await admin.xpending(KEYS.writes(bad), GROUP)
    assert pending["pending"] == 0, "dead letters are acknowledged"
    assert (await check_lane(admin, KEYS, "r:good"))[-1].value == "# Good\n- two"

"""A script does everything or nothing visible, whichever of its later commands fails.

Redis does not roll a script back: a command refused after the script's first write left
it half done. With the worker's ACL missing one selector (an operator reloading an old
ACL file), the commit appended a signal, failed on a later command, stored no tracking,
and each retry appended another snapshot (stream versions 1, 2, 2, 3). Each case here
takes one command away from one key kind in the role's generated ACL (``ACL SETUSER``
against a real redis-server), runs the script's path, and checks that the call either
succeeded or changed nothing; for the commit, that once the ACL is whole again every
lane is signalled exactly once per version. A worker that finds signals appended
without their tracking takes the tracking from them only when they are the signals its
commit plans (a retry of a half-done commit); anything else is snapshotted past.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis

from signals.core.codec import FIELD, encode_json
from signals.core.models import DeadLetter, WriteEvent
from signals.errors import WmSignalsError
from signals.streams.acl import SCRIPTS
from signals.streams.client import connect
from signals.streams.deadletters import DeadLetters
from signals.streams.keys import GROUP
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, wait_caught_up
from tests.trust_boundary.narrowed_acl import KEYS, narrow, narrowed, restore, state, url
from tests.trust_boundary.support import worker_in_process
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def _cases(script: str) -> list[tuple[str, str]]:
    """Every command the script runs, reads included, on each key kind it runs it on (the
    keys it reads without declaring them too)."""
    found = SCRIPTS[script]
    return [(kind, cmd) for kind, cmds in (*found.calls.items(), *found.reads.items()) for cmd in cmds]


def test_the_narrowing_takes_away_exactly_one_command_on_one_kind() -> None:
    """The helper's rules refuse the command on that kind only (checked in the DRYRUN test below)."""
    rules = narrowed("worker", "snaps", "rpush")
    assert not any("+rpush" in rule for rule in rules)


async def test_narrowed_rules_refuse_that_command_only(admin: Redis) -> None:
    await narrow(admin, "worker", "trk", "del")
    dry = [str(await admin.execute_command("ACL DRYRUN", "wm-worker", "DEL", key))  # type: ignore[no-untyped-call]
           for key in (KEYS.track("r:x"), KEYS.signals("r:x"))]
    assert dry[0] != "OK"
    assert dry[1] == "OK"


@pytest.mark.parametrize(("kind", "command"), _cases("write"))
async def test_a_write_refused_later_writes_nothing(server: RedisServer, admin: Redis, kind: str,
                                                   command: str) -> None:
    """The write script with one of its commands refused on one kind, reads included: the
    write raises an ACL refusal naming the command (a refused read is not a key of another
    type, which an operator would delete) and nothing is written (a retry then writes
    once), or it succeeds."""
    async with worker_in_process(url(server, "worker"), KEYS):  # loads the library
        pass
    writer = connect(url(server, "writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    try:
        await store.replace("alice", "# Alice", thread_id="t1", scope="thread")
        await narrow(admin, "writer", kind, command)
        before = await state(admin)
        try:
            await store.replace("alice", "# Alice\n- v2", thread_id="t2", scope="thread", idempotency_key="k1")
        except (WmSignalsError, redis_exc.RedisError) as e:
            assert await state(admin) == before, "a refused write changed something"
            assert isinstance(e, redis_exc.NoPermissionError) and command in str(e).lower(), repr(e)
            await restore(admin, "writer")
            await store.replace("alice", "# Alice\n- v2", thread_id="t2", scope="thread", idempotency_key="k1")
        await restore(admin, "writer")
        assert await admin.hget(KEYS.doc("t:t2"), "version") == "1"
        assert await admin.xlen(KEYS.writes(KEYS.partition("t:t2"))) >= 1
    finally:
        await writer.aclose()


@pytest.mark.parametrize(("kind", "command"), _cases("requeue"))
async def test_a_requeue_refused_later_loses_no_dead_letter(server: RedisServer, admin: Redis, kind: str,
                                                          command: str) -> None:
    """``dlq requeue`` with XDEL or XADD refused: the dead letter stays (it used to be
    deleted, and the event never put back, when the XADD was refused)."""
    async with worker_in_process(url(server, "worker"), KEYS):
        pass
    event = WriteEvent(lane="r:alice", scope="resource", format="markdown", version=1, data="# A", op="replace",
                       resource_id="alice")
    partition = KEYS.partition("r:alice")
    dead = DeadLetter(stream=KEYS.writes(partition), entry_id="1-1", fields={FIELD: encode_json(event)},
                      error="x", attempts=1, at="now")
    letter = await admin.xadd(KEYS.dead_letters(partition), {FIELD: encode_json(dead)})
    operator = connect(url(server, "operator"))
    try:
        await narrow(admin, "operator", kind, command)
        before = await state(admin)
        with pytest.raises((WmSignalsError, redis_exc.RedisError)):
            await DeadLetters(operator, KEYS).requeue(str(letter), partition)
        assert await state(admin) == before
    finally:
        await operator.aclose()


@pytest.mark.parametrize(("kind", "command"), _cases("dead_letter"))
async def test_a_dead_letter_refused_later_is_not_sent_twice(server: RedisServer, admin: Redis, kind: str,
                                                           command: str) -> None:
    """The dead-letter script with its XACK (or HDEL) refused: no dead letter without its
    acknowledgement (each retry added another dead letter of the same entry)."""
    from workers.engine.dead_letters import DeadLetters as WorkerDeadLetters  # noqa: PLC0415 - the engine's

    async with worker_in_process(url(server, "worker"), KEYS):
        pass
    stream = KEYS.writes(0)
    entry = await admin.xadd(stream, {"e": "junk"})
    await admin.xreadgroup(GROUP, "c", {stream: ">"})
    worker = connect(url(server, "worker"))
    try:
        await narrow(admin, "worker", kind, command)
        before = await state(admin)
        sent = await WorkerDeadLetters(worker, KEYS, max_attempts=1, maxlen=100).send(0, str(entry), {"e": "junk"},
                                                                                       "poison: junk", 1)
        if not sent:
            assert await state(admin) == before
        else:
            assert (await admin.xpending(stream, GROUP))["pending"] == 0
            assert await admin.xlen(KEYS.dead_letters(0)) == 1
    finally:
        await worker.aclose()


COMMIT_CASES = _cases("commit")


async def _writes(store: WorkingMemoryStore, lanes: int, version: int) -> None:
    for i in range(lanes):
        await store.replace(f"user{i}", f"# user {i}\n" + "".join(f"- fact {v}\n" for v in range(version)))


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


@pytest.mark.parametrize(("kind", "command"), COMMIT_CASES)
async def test_a_commit_refused_later_signals_each_version_once(server: RedisServer, admin: Redis, kind: str,
                                                              command: str) -> None:
    """The worker's ACL without one command on one kind for a while (writes go on, retention
    trims at every snapshot): no signal is appended without its tracking; once the ACL is
    whole again every lane is signalled once per version, and rebuilds its document. A
    command the worker also runs itself (TYPE of the write streams) stops it, naming it:
    that is the outcome then, with nothing half done."""
    writer = connect(url(server, "writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    options: dict[str, Any] = {"retain_signals": 2, "max_attempts": 1000}
    stopped: list[BaseException] = []
    written = anyio.Event()

    async def narrowed_worker() -> None:
        try:
            async with worker_in_process(url(server, "worker"), KEYS, **options):
                await written.wait()
        except* redis_exc.NoPermissionError as group:
            stopped.extend(_leaves(group))

    try:
        async with worker_in_process(url(server, "worker"), KEYS, **options):
            await _writes(store, 6, 1)
            await wait_caught_up(admin, KEYS)
        await narrow(admin, "worker", kind, command)
        async with anyio.create_task_group() as tg:
            tg.start_soon(narrowed_worker)
            for version in range(2, 5):
                await _writes(store, 6, version)
                await anyio.sleep(0.3)
            written.set()
        for i in range(6):  # no signal beyond what the tracking names
            lane = f"r:user{i}"
            last = await admin.xrevrange(KEYS.signals(lane), count=1)
            tail = await admin.hget(KEYS.track(lane), "tail")
            assert (last[0][0] if last else None) == tail, (lane, "a signal without its tracking")
        assert all(command in str(e).lower() for e in stopped), stopped
        await restore(admin, "worker")
        async with worker_in_process(url(server, "worker"), KEYS, **options):
            await wait_caught_up(admin, KEYS)
        for i in range(6):
            signals = await check_lane(admin, KEYS, f"r:user{i}")
            assert signals[-1].write_version == 4
    finally:
        await restore(admin, "worker")
        await writer.aclose()


async def test_signals_after_the_tail_that_the_commit_does_not_plan_are_snapshotted_past(server: RedisServer,
                                                                                         admin: Redis) -> None:
    """A signal in the stream after the tail the tracking names, the tracking of the commit
    before it (as a half-done commit leaves them), but the next commit is another write's:
    it plans other signals, so it does not take the tracking from that one (only a retry
    planning the same signals does: tests/trust_boundary/test_signal_tail.py). The lane is
    re-snapshotted past it, and no version or write version repeats."""
    writer = connect(url(server, "writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    lane = "r:alice"
    try:
        async with worker_in_process(url(server, "worker"), KEYS):
            await store.replace("alice", "# Alice\n- one")
            await wait_caught_up(admin, KEYS)
            after_first = await admin.hgetall(KEYS.track(lane))
            await store.replace("alice", "# Alice\n- one\n- two")
            await wait_caught_up(admin, KEYS)
        await admin.hset(KEYS.track(lane), mapping=dict(after_first))  # type: ignore[arg-type]  # the second commit's tracking "not stored"
        async with worker_in_process(url(server, "worker"), KEYS, name="w1"):
            await store.replace("alice", "# Alice\n- one\n- two\n- three")
            await wait_caught_up(admin, KEYS)
        signals = await check_lane(admin, KEYS, lane)
        assert [s.version for s in signals] == [1, 2, 3]
        assert [s.write_version for s in signals] == [1, 2, 3]
    finally:
        await writer.aclose()

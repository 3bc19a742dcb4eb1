"""Agent loops follow the truth after a data loss (issue 30, finding 4).

An agent loop and a subscriber hold lane version 12; then the lane's history is lost (a
FLUSHALL, an operator deleting the lane's keys, a redis-server restarted without
persistence) and new writes make versions 1, 2, 3 again. The next model call must get
the new memory (a snapshot, logged with reason ``reset``), the old messages are dropped,
and a subscriber's versions start again from the new chain. Also: a namespace epoch
stored with the namespace's settings, and a stream whose tail moved behind what a
subscriber read (recreated with older ids). Workers are real, Redis is real.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.agent import AgentWorkingMemory
from signals.core.codec import FIELD
from signals.integrations._core import is_working_memory_text
from signals.integrations._windows import EphemeralWindow
from signals.integrations.openai_chat import OpenAIChatCodec, OpenAIChatWorkingMemory
from signals.streams.acl import ROLES, acl_file
from signals.streams.client import connect
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys, lane_id
from signals.streams.namespace import read_epoch
from signals.streams.scripts import ensure_loaded
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(10)]
LANE = lane_id("resource", "u", None)


def _doc(n: int, world: str = "old") -> str:
    return f"# Notes ({world})\n" + "\n".join(LINES) + f"\n- counter {n}"


async def _write(url: str, redis: Redis, keys: Keys, texts: list[str]) -> None:
    """Store each text for resource u (a fresh writer each time: as a new process would),
    a worker running, and wait until it has signalled them."""
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1):
        for text in texts:
            await store.replace("u", text)
        await wait_caught_up(redis, keys)


async def _retry(call: Callable[[], Awaitable[object]]) -> object:
    """A call made again while the server it talks to comes back (a restart)."""
    with anyio.fail_after(20):
        while True:
            try:
                return await call()
            except (redis_exc.ConnectionError, redis_exc.TimeoutError, OSError):
                await anyio.sleep(0.1)


@asynccontextmanager
async def _server() -> AsyncIterator[tuple[RedisServer, Redis]]:
    with RedisServer() as server:
        client = cast(Redis, connect(server.url))
        try:
            yield server, client
        finally:
            await client.aclose()


async def _entries(redis: Redis, key: str) -> list[tuple[str, dict[Any, Any]]]:
    """A stream's entries (the test's clients decode replies)."""
    return cast(list[tuple[str, dict[Any, Any]]], await redis.xrange(key))


async def _lose_lane(server: RedisServer, redis: Redis, keys: Keys, how: str) -> None:
    if how == "flushall":
        await redis.flushall()
    elif how == "delete-lane":
        await redis.delete(keys.doc(LANE), keys.track(LANE), keys.signals(LANE), keys.snapshots(LANE))
    else:
        await anyio.to_thread.run_sync(server.restart)


@pytest.mark.parametrize("how", ["flushall", "delete-lane", "restart"])
async def test_an_agent_that_held_version_12_gets_the_new_memory_after_a_data_loss(keys: Keys, how: str) -> None:
    """Versions restart at 1 after the loss; the next model call adds a snapshot of the new
    document (reason ``reset``) and drops the old messages; the window rebuilds the new
    text; the delivery log records the reset; a subscriber delivers versions 1..3 again."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(n) for n in range(1, 13)])
        agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
        sub = Subscription(redis, keys, LANE)
        await agent.start()
        assert [m.signal.version for m in await sub.bootstrap()][-1] == 12
        first = await agent.before_model_call(set())
        held = {inj.id for inj in first.add}
        assert [inj.version for inj in first.add] == [12]

        await _lose_lane(server, redis, keys, how)
        new = [_doc(n, "new") for n in range(1, 4)]
        await _retry(lambda: _write(server.url, redis, keys, new))
        assert await redis.hmget(keys.track(LANE), "v") == ["3"]  # the lane starts again

        result = await _retry(lambda: agent.before_model_call(held))
        assert isinstance(result, type(first))
        assert [(inj.version, inj.mode, inj.reason) for inj in result.add] == [(3, "snapshot", "reset")]
        assert result.add[0].contents == new[-1]
        assert set(result.drop) == held  # the old memory leaves the window
        held = (held - set(result.drop)) | {inj.id for inj in result.add}
        assert agent.window.rebuild(held) == new[-1]
        items = await sub.catch_up()
        assert [(m.signal.version, m.value) for m in items][-1] == (3, new[-1])
        assert sub.version == 3

        log = DeliveryLog(redis, keys)
        records = await log.read("t1")
        assert [(r.version, r.reason) for r in records][-1] == (3, "reset")
        view = await log.view_at("t1", result.step)
        assert view is not None and view.text == new[-1]

        await _write(server.url, redis, keys, [_doc(4, "new")])  # and it goes on as usual
        after = await agent.before_model_call(held)
        assert [(inj.version, inj.reason) for inj in after.add] == [(4, "new")]


async def test_a_loss_with_nothing_written_since_drops_the_old_memory(keys: Keys) -> None:
    """The lane is deleted and nothing is written yet: the old messages leave the window and
    nothing is added (there is no memory); the first new write arrives as a reset snapshot."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(n) for n in range(1, 13)])
        agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
        await agent.start()
        held = {inj.id for inj in (await agent.before_model_call(set())).add}
        await redis.flushall()
        result = await agent.before_model_call(held)
        assert result.add == () and set(result.drop) == held
        assert agent.subscription.version == 0
        await _write(server.url, redis, keys, [_doc(1, "new")])
        result = await agent.before_model_call(set())
        assert [(inj.version, inj.mode, inj.reason) for inj in result.add] == [(1, "snapshot", "reset")]


async def test_a_lane_recreated_past_the_versions_held_is_not_taken_for_their_continuation(keys: Keys) -> None:
    """The lane is deleted and 14 new writes are signalled before the agent looks again: the
    new stream's v13 is not a delta onto the old v12 (its text would be wrong): the agent
    restarts from the new chain and the model gets the new v14 as a snapshot."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(n) for n in range(1, 13)])
        agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
        await agent.start()
        held = {inj.id for inj in (await agent.before_model_call(set())).add}
        await _lose_lane(server, redis, keys, "delete-lane")
        new = [_doc(n, "new") for n in range(1, 15)]
        await _write(server.url, redis, keys, new)
        result = await agent.before_model_call(held)
        assert [(inj.version, inj.mode, inj.reason) for inj in result.add] == [(14, "snapshot", "reset")]
        assert agent.window.rebuild({inj.id for inj in result.add}) == new[-1]


async def test_a_stream_recreated_with_older_ids_is_noticed(keys: Keys) -> None:
    """The lane's stream is recreated with entry ids below the last one the subscriber read
    (a restore, or a server whose clock is behind): a read after it returns nothing, the
    subscriber sees the stream's tail behind what it read and restarts from its chain."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(n) for n in range(1, 4)])
        sub = Subscription(redis, keys, LANE)
        assert [m.signal.version for m in await sub.bootstrap()] == [1, 2, 3]
        entries = await _entries(redis, keys.signals(LANE))
        hint = await redis.lrange(keys.snapshots(LANE), 0, -1)
        await redis.delete(keys.signals(LANE), keys.snapshots(LANE))
        first_id, first = entries[0]  # the lane's v1 snapshot, alone, at its old id
        await redis.xadd(keys.signals(LANE), first, id=first_id)
        await redis.rpush(keys.snapshots(LANE), hint[0])
        items = await sub.poll()
        assert [(m.signal.version, m.value) for m in items] == [(1, _doc(1))]
        assert sub.generation == 1 and sub.version == 1
        assert FIELD in first


async def test_the_namespace_has_an_epoch_readable_by_every_role(redis: Redis, keys: Keys) -> None:
    """The first writer records a random epoch with the partition count; it never changes
    afterwards; a FLUSHALL-like loss of the config and a new writer make a new one."""
    assert await read_epoch(redis, keys) is None
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", _doc(1))
    epoch = await read_epoch(redis, keys)
    assert epoch is not None and len(epoch) == 32
    await WorkingMemoryStore(redis, keys=keys).replace("u", _doc(2))
    assert await read_epoch(redis, keys) == epoch
    await redis.delete(keys.config())
    await WorkingMemoryStore(redis, keys=keys).replace("u", _doc(3))
    assert await read_epoch(redis, keys) not in (None, epoch)


async def test_a_stream_recreated_below_then_past_the_last_entry_read_is_noticed_at_its_first_delta(
        keys: Keys) -> None:
    """A new history whose versions up to 12 got ids below the last entry the agent read (a
    server clock behind) and whose v13, a delta, got a later one: the delta does not chain
    onto the old v12 and the old v12's entry is gone, so the agent restarts from the new
    chain instead of waiting for a snapshot: the model gets the new v13."""
    other = Keys(namespace=keys.namespace + "x", partitions=keys.partitions)
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(n) for n in range(1, 13)])
        new = [_doc(n, "new") for n in range(1, 14)]
        await _write(server.url, redis, other, new)  # the new history, made aside
        agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
        await agent.start()
        held = {inj.id for inj in (await agent.before_model_call(set())).add}
        old = await _entries(redis, keys.signals(LANE))
        made = await _entries(redis, other.signals(LANE))
        snapshots = set(await redis.lrange(other.snapshots(LANE), 0, -1))
        assert len(made) == 13
        await redis.delete(keys.signals(LANE), keys.snapshots(LANE))
        below = int(old[0][0].split("-")[0]) - 1
        for i, (entry_id, fields) in enumerate(made[:12]):
            new_id = await redis.xadd(keys.signals(LANE), fields, id=f"{below}-{i + 1}")
            if entry_id in snapshots:
                await redis.rpush(keys.snapshots(LANE), new_id)
        await redis.xadd(keys.signals(LANE), made[12][1])
        result = await agent.before_model_call(held)
        assert [(inj.version, inj.reason) for inj in result.add] == [(13, "reset")]
        assert agent.window.rebuild({inj.id for inj in result.add}) == new[-1]


async def test_every_role_reads_the_epoch_and_writers_and_workers_record_it(tmp_path: Path) -> None:
    """With the generated ACL: a writer records the epoch, a worker (after a loss of the
    config) records a new one, and a reader's subscription reads it at every poll; no
    command is refused (the server's ACL LOG stays empty)."""
    keys = Keys("wm", 4)
    passwords = {role: secrets.token_hex(8) for role in ROLES}
    admin_password = secrets.token_hex(8)
    (tmp_path / "users.acl").write_text(acl_file(keys, passwords) + f"user admin on >{admin_password} ~* &* +@all\n")
    with RedisServer(extra=["--aclfile", str(tmp_path / "users.acl")]) as server:
        def url(role: str) -> str:
            return f"redis://wm-{role}:{passwords[role]}@127.0.0.1:{server.port}/0"
        admin = connect(f"redis://admin:{admin_password}@127.0.0.1:{server.port}/0")
        clients = {role: connect(url(role)) for role in ("writer", "reader", "agent", "operator")}
        try:
            await ensure_loaded(clients["operator"])  # the project's functions: loaded by an operator or a worker
            await WorkingMemoryStore(clients["writer"], keys=keys).replace("u", _doc(1))
            epoch = await read_epoch(clients["reader"], keys)
            assert epoch is not None
            for role in ("agent", "operator"):
                assert await read_epoch(clients[role], keys) == epoch
            async with running_workers(url("worker"), keys, 1):
                await wait_caught_up(admin, keys)
            sub = Subscription(clients["reader"], keys, LANE)
            assert [m.signal.version for m in await sub.bootstrap()] == [1]
            await admin.delete(keys.config())
            async with running_workers(url("worker"), keys, 1):  # a worker starting records a new one
                await WorkingMemoryStore(clients["writer"], keys=keys).replace("u", _doc(2))
                await wait_caught_up(admin, keys)
            assert await read_epoch(clients["reader"], keys) not in (None, epoch)
            assert [m.signal.version for m in await sub.poll()] == [2]  # the chain continues: no restart
            assert sub.generation == 0
            assert await admin.execute_command("ACL", "LOG") == []
        finally:
            for client in (admin, *clients.values()):
                await client.aclose()


@pytest.mark.parametrize("window", ["persistent", "ephemeral"])
async def test_an_adapter_window_follows_the_truth_after_a_data_loss(keys: Keys, window: str) -> None:
    """A framework adapter (OpenAI Chat's persistent window, an ephemeral one re-inserting its
    blocks every call) held v12; after a FLUSHALL and new writes, the next prepared call
    carries exactly one working-memory block: the new document, and none of the old."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(n) for n in range(1, 13)])
        agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
        history: list[dict[str, str]] = [{"role": "user", "content": "hello"}]

        if window == "persistent":
            helper = OpenAIChatWorkingMemory(agent)

            async def prepare(messages: list[dict[str, str]]) -> list[dict[str, str]]:
                return await helper.prepare(messages)
        else:
            ephemeral = EphemeralWindow(agent, OpenAIChatCodec())

            async def prepare(messages: list[dict[str, str]]) -> list[dict[str, str]]:
                return list((await ephemeral.prepare(messages)).messages)

        def blocks(messages: list[dict[str, str]]) -> list[str]:
            return [m["content"] for m in messages if is_working_memory_text(m["content"])]

        sent = await prepare(history)
        assert len(blocks(sent)) == 1 and "counter 12" in blocks(sent)[0]
        history = sent if window == "persistent" else history
        await redis.flushall()
        await _write(server.url, redis, keys, [_doc(n, "new") for n in range(1, 3)])
        history = [*history, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "again"}]
        sent = await prepare(history)
        assert len(blocks(sent)) == 1
        assert "Notes (new)" in blocks(sent)[0] and "counter 2" in blocks(sent)[0]


async def test_the_subscribe_command_says_when_it_follows_a_lane_again(keys: Keys) -> None:
    """``subscribe`` tails a lane at v2; a FLUSHALL and a new write: it prints the new v1 and
    says on stderr that the lane's history was lost."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(1), _doc(2)])
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        command = [sys.executable, "-m", "workers", "subscribe", "--redis-url", server.url, "--namespace",
                   keys.namespace, "--partitions", str(keys.partitions), "--resource", "u", "--count", "3",
                   "--timeout", "60", "--json"]
        async with await anyio.open_process(command, env=env) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            err, out = b"", b""
            with anyio.fail_after(30):  # it printed v1 and v2 (stderr may hold notes before them)
                while out.count(b"\n") < 2:
                    out += await proc.stdout.receive()
            await redis.flushall()
            await _write(server.url, redis, keys, [_doc(1, "new")])
            with anyio.fail_after(60):
                async for chunk in proc.stdout:
                    out += chunk
                async for chunk in proc.stderr:
                    err += chunk
                await proc.wait()
        assert proc.returncode == 0, err
        versions = [json.loads(line)["version"] for line in out.decode().splitlines()]
        assert versions == [1, 2, 1]
        assert b"history was lost" in err


async def test_a_new_namespace_epoch_makes_a_subscriber_check_its_chain(keys: Keys) -> None:
    """The namespace's settings are lost and recorded again (a new epoch) while the lane's
    stream stays: the next empty read notices the epoch, re-reads the chain, finds it
    continues the one held and delivers nothing twice (no restart)."""
    async with _server() as (server, redis):
        await _write(server.url, redis, keys, [_doc(1)])
        sub = Subscription(redis, keys, LANE)
        assert [m.signal.version for m in await sub.bootstrap()] == [1]
        assert await sub.poll() == []
        await redis.delete(keys.config())
        await WorkingMemoryStore(redis, keys=keys).get("u")  # a reader records nothing
        assert await read_epoch(redis, keys) is None
        assert await sub.poll() == []  # no epoch: nothing to compare
        store = WorkingMemoryStore(redis, keys=keys)
        await store.replace("other", "# Other")  # a writer records a new epoch
        with capture_logs() as logs:
            assert await sub.poll() == []
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["subscribe.epoch_changed"]
        assert sub.generation == 0 and sub.version == 1

"""What a role of the generated ACL can do to the server and to other users, against real
redis-servers loaded with the generated ACL file.

- No role that faces callers runs code of its own: ``ACL DRYRUN`` refuses EVAL, EVALSHA,
  SCRIPT LOAD and FUNCTION LOAD to writer, reader, agent and scaler; only the operator
  and the worker may load the project's library, and only the operator may SCRIPT KILL /
  FUNCTION KILL. ``EVAL "while true do end"`` as a writer is refused, so it cannot freeze
  the server; the roles run the pipeline through FCALL of the project's functions.
- After ``FUNCTION FLUSH`` a writer gets a clear error naming the cause (nothing ran), and
  a running worker loads the library again; the write then goes through.
- A writer that trims its partition's write stream (``XADD ... MAXLEN 0``: an append to
  the ACL, a trim to Redis) leaves no lane unsignalled once a worker passes: the lanes
  whose document is ahead of their signals are signalled up to it, once; ``replay
  --verify``'s check names them until then.
- A worker survives a lost consumer group or write stream in every task (maintenance's
  reclaim met NOGROUP and the process exited).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import msgspec
import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.codec import FIELD, encode_json
from signals.errors import VerifyError
from signals.streams.acl import ROLES
from signals.streams.client import Client, connect
from signals.streams.deliveries import DeliveryLog
from signals.streams.delivery_chain import ChainState, link
from signals.streams.keys import GROUP, Keys
from signals.streams.scripts import ScriptsNotLoadedError, ensure_loaded, library_name
from signals.streams.status import inspect
from signals.streams.store import WorkingMemoryStore
from signals.streams.verify import verify_lane
from tests.integration.helpers import check_lane, wait_caught_up
from tests.trust_boundary.narrowed_acl import start_server, url
from tests.trust_boundary.support import worker_in_process
from workers.engine.consumer import Consumer
from workers.engine.options import ConsumerOptions
from workers.engine.reconcile import orphaned_lanes
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
KEYS = Keys("wm", 4)
CALLERS = ("writer", "reader", "agent", "scaler")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    srv = start_server(tmp_path_factory.mktemp("roles"), KEYS)
    yield srv
    srv.stop()


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[Redis]:
    client = connect(url(server, "admin"))
    await client.flushall()
    await client.function_flush()
    yield client  # type: ignore[misc]
    await client.aclose()


@pytest.fixture
async def clients(server: RedisServer) -> AsyncIterator[dict[str, Client]]:
    made = {role: connect(url(server, role)) for role in ROLES}
    yield made
    for client in made.values():
        await client.aclose()


async def _dryrun(admin: Redis, role: str, *args: str) -> str:
    try:
        return str(await admin.execute_command("ACL DRYRUN", f"wm-{role}", *args))  # type: ignore[no-untyped-call]
    except redis_exc.ResponseError as e:
        return str(e)


CODE = {
    "eval": ("EVAL", "return 1", "0"),
    "evalsha": ("EVALSHA", "0" * 40, "0"),
    "eval_ro": ("EVAL_RO", "return 1", "0"),
    "evalsha_ro": ("EVALSHA_RO", "0" * 40, "0"),
    "script|load": ("SCRIPT", "LOAD", "return 1"),
    "function|load": ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)"),
    "function|restore": ("FUNCTION", "RESTORE", "x"),
}
KILLS = {"script|kill": ("SCRIPT", "KILL"), "function|kill": ("FUNCTION", "KILL")}


@pytest.mark.parametrize("role", list(ROLES))
async def test_only_the_worker_and_operator_may_load_code_and_only_the_operator_kill(admin: Redis, role: str) -> None:
    """ACL DRYRUN: no role runs code of its own (EVAL*, SCRIPT LOAD); FUNCTION LOAD for the
    worker and the operator only; SCRIPT KILL and FUNCTION KILL for the operator only."""
    for name, args in CODE.items():
        allowed = role in ("worker", "operator") and name == "function|load"
        reply = await _dryrun(admin, role, *args)
        assert (reply == "OK") == allowed, (role, name, reply)
    for name, kill in KILLS.items():
        reply = await _dryrun(admin, role, *kill)
        assert (reply == "OK") == (role == "operator"), (role, name, reply)


async def test_a_writer_cannot_freeze_the_server(admin: Redis, clients: dict[str, Client]) -> None:
    """``EVAL "while true do end"`` as each role that faces callers is refused at once; the
    server keeps answering."""
    for role in CALLERS:
        with pytest.raises(redis_exc.NoPermissionError):
            await clients[role].eval("while true do end", 0)
        with pytest.raises(redis_exc.NoPermissionError):
            await clients[role].script_load("while true do end")
        with pytest.raises(redis_exc.NoPermissionError):
            await clients[role].function_load("#!lua name=spin\nredis.register_function('spin', "
                                              "function() while true do end end)")
    assert await admin.ping()
    assert await admin.function_list() == []


async def test_the_roles_run_the_pipeline_through_the_projects_functions(
        server: RedisServer, admin: Redis, clients: dict[str, Client]) -> None:
    """A writer before any worker: a clear error naming the library (nothing written);
    once a worker has started (it loads the library), writes go through; after FUNCTION
    FLUSH the running worker loads it again (at its readiness tick) and writes go through."""
    store = WorkingMemoryStore(clients["writer"], keys=KEYS)
    with pytest.raises(ScriptsNotLoadedError, match=library_name()):
        await store.replace("alice", "# Alice\n- likes tea")
    assert await admin.keys("wm:*doc*") == []
    async with worker_in_process(url(server, "worker"), KEYS):
        assert [lib[1] for lib in await admin.function_list()] == [library_name()]  # RESP2: name, value pairs
        await store.replace("alice", "# Alice\n- likes tea")
        await admin.function_flush()
        with anyio.fail_after(10):
            while True:
                try:
                    await store.replace("alice", "# Alice\n- likes coffee")
                    break
                except ScriptsNotLoadedError:
                    await anyio.sleep(0.1)
        await wait_caught_up(admin, KEYS)
    signals = await check_lane(admin, KEYS, "r:alice")
    assert [s.version for s in signals] == [1, 2]


async def _write_lanes(store: WorkingMemoryStore, n: int, version: int) -> None:
    for i in range(n):
        await store.replace(f"user{i}", f"# user {i}\n- fact {version}")


async def test_a_writer_trimming_its_write_streams_loses_no_version(
        server: RedisServer, admin: Redis, clients: dict[str, Client]) -> None:
    """40 users' writes, then the writer trims every write stream (XADD MAXLEN 0) while no
    worker runs: once a worker passes, every lane is signalled up to its document, each
    version at most once; until then the check names the lanes."""
    store = WorkingMemoryStore(clients["writer"], keys=KEYS)
    async with worker_in_process(url(server, "worker"), KEYS):
        await _write_lanes(store, 40, 1)
        await wait_caught_up(admin, KEYS)
    await _write_lanes(store, 40, 2)
    writer = clients["writer"]
    for p in range(KEYS.partitions):
        await writer.xadd(KEYS.writes(p), {"e": "junk"}, maxlen=0, approximate=False)
    lanes = [f"r:user{i}" for i in range(40)]
    orphans = []
    for p in range(KEYS.partitions):
        orphans += await orphaned_lanes(admin, KEYS, p, [lane for lane in lanes if KEYS.partition(lane) == p])
    assert sorted(o.lane for o in orphans) == sorted(lanes)
    with pytest.raises(VerifyError, match="gone from the write stream"):  # replay --verify names the lane
        await verify_lane(clients["operator"], KEYS, lanes[0])
    report = await inspect(clients["operator"], KEYS)  # and inspect names them
    assert report.totals["bad"] == 40
    assert all("gone from the write stream" in b.reason for b in report.bad_lanes)
    async with worker_in_process(url(server, "worker"), KEYS):
        with anyio.fail_after(20):
            while True:
                left = [lane for lane in lanes
                        if int(await admin.hget(KEYS.track(lane), "wv") or 0) < 2]
                if not left:
                    break
                await anyio.sleep(0.1)
        await anyio.sleep(0.5)  # more passes: nothing is signalled again
    for lane in lanes:
        signals = await check_lane(admin, KEYS, lane)
        assert [s.write_version for s in signals] == [1, 2], lane


async def _lose_groups(admin: Redis, how: str) -> None:
    for p in range(KEYS.partitions):
        if how == "destroy":
            await admin.xgroup_destroy(KEYS.writes(p), GROUP)
        else:
            await admin.delete(KEYS.writes(p))


@pytest.mark.parametrize("how", ["destroy", "delete"])
async def test_the_worker_survives_a_lost_group_in_every_task(
        server: RedisServer, admin: Redis, clients: dict[str, Client], how: str) -> None:
    """XGROUP DESTROY (or DEL of the write streams) while a worker runs with maintenance
    every 0.05 s and entries pending for a dead consumer: the worker neither exits nor
    loses a write; later writes are signalled."""
    store = WorkingMemoryStore(clients["writer"], keys=KEYS)
    options: dict[str, Any] = {"maintenance_interval_s": 0.05, "claim_idle_ms": 100}
    async with worker_in_process(url(server, "worker"), KEYS, **options):
        await _write_lanes(store, 10, 1)
        await wait_caught_up(admin, KEYS)
        for round_ in range(5):
            # entries pending for a consumer that never acknowledges (a crashed worker)
            await admin.xreadgroup(GROUP, "dead", {KEYS.writes(p): ">" for p in range(KEYS.partitions)})
            await _lose_groups(admin, how)
            await anyio.sleep(0.2)
            await _write_lanes(store, 10, round_ + 2)
        with anyio.fail_after(20):
            while [i for i in range(10) if int(await admin.hget(KEYS.track(f"r:user{i}"), "wv") or 0) < 6]:
                await anyio.sleep(0.1)
    for i in range(10):
        await check_lane(admin, KEYS, f"r:user{i}")


async def test_reclaim_meets_a_lost_group_and_makes_it_again(server: RedisServer, admin: Redis) -> None:
    """The maintenance task's reclaim on a write stream whose group was destroyed (and on
    one deleted): no NOGROUP out of it (the worker exited 1); the group is made again."""
    worker = connect(url(server, "worker"))
    try:
        consumer = Consumer(worker, KEYS, ConsumerOptions(), "c")
        await consumer.ensure_groups()
        await admin.xadd(KEYS.writes(1), {"e": "x"})
        await admin.xgroup_destroy(KEYS.writes(1), GROUP)
        await admin.delete(KEYS.writes(2))
        await consumer.reclaim()
        for p in (1, 2):
            assert [g["name"] for g in await admin.xinfo_groups(KEYS.writes(p))] == [GROUP]
    finally:
        await worker.aclose()


async def _agent_steps(server: RedisServer, admin: Redis, clients: dict[str, Client], thread: str) -> None:
    """An agent loop (reader role) over three versions: three deliveries in its log."""
    store = WorkingMemoryStore(clients["writer"], keys=KEYS)
    async with worker_in_process(url(server, "worker"), KEYS):
        loop = AgentWorkingMemory(clients["reader"], KEYS, resource_id="bob", thread_id=thread, read_only=True)
        for n in range(3):
            await store.replace("bob", "# Bob\n" + "".join(f"- fact {i}\n" for i in range(n + 1)))
            await wait_caught_up(admin, KEYS)
            if n == 0:
                await loop.start()
            assert (await loop.before_model_call(set())).add


async def test_a_whole_delivery_log_is_reported_whole(server: RedisServer, admin: Redis,
                                                      clients: dict[str, Client]) -> None:
    await _agent_steps(server, admin, clients, "t-whole")
    integrity = await DeliveryLog(clients["operator"], KEYS).integrity("t-whole")
    assert integrity.complete, integrity.problems


@pytest.mark.parametrize("forged", ["junk-free", "copied", "emptied"])
async def test_a_reader_trimming_a_delivery_log_is_reported_not_believed(
        server: RedisServer, admin: Redis, clients: dict[str, Client], forged: str) -> None:
    """The reader role replaces a thread's log with one well-formed record (XADD MAXLEN 1),
    or empties it (MAXLEN 0): the log is reported as tampered with (entries removed while
    it holds fewer than its retention), never as whole; replay --deliveries exits 2."""
    await _agent_steps(server, admin, clients, "t-cut")
    records = await DeliveryLog(clients["operator"], KEYS).read("t-cut")
    last = records[-1]
    if forged == "junk-free":  # a record of its own, numbered and chained as a first one
        state = ChainState()
        record = link(state, msgspec.structs.replace(last, seq=None, chain=None, window="forged"))
    else:  # the newest genuine record, kept alone
        record = last
    await clients["reader"].xadd(KEYS.deliveries("t-cut"), {FIELD: encode_json(record)},
                                 maxlen=0 if forged == "emptied" else 1, approximate=False)
    integrity = await DeliveryLog(clients["operator"], KEYS).integrity("t-cut")
    assert not integrity.complete
    assert integrity.tampered, integrity.problems
    assert any("removed" in p for p in integrity.problems)
    shown = await anyio.to_thread.run_sync(lambda: _cli("replay", "--deliveries", "--thread", "t-cut", "--redis-url",
                                                        url(server, "operator"), "--namespace", "wm",
                                                        "--partitions", str(KEYS.partitions)))
    assert shown.returncode == 2, shown.stderr
    assert "tampered with" in shown.stderr


async def test_an_entry_processed_by_two_workers_is_counted_once(server: RedisServer, admin: Redis,
                                                                 clients: dict[str, Client]) -> None:
    """Worker A reads an entry and stalls; B claims it (idle past claim_idle_ms) and commits
    it; A then processes what it read. The signal is unique, and the entry is counted by
    one worker's outcomes, not by both (3,052 events were counted for 3,000 writes)."""
    store = WorkingMemoryStore(clients["writer"], keys=KEYS)
    first, second = connect(url(server, "worker")), connect(url(server, "worker"))
    try:
        a = Consumer(first, KEYS, ConsumerOptions(claim_idle_ms=100), "a")
        b = Consumer(second, KEYS, ConsumerOptions(claim_idle_ms=100), "b")
        await a.ensure_groups()
        await ensure_loaded(first)  # as a worker does at its start
        for i in range(5):
            await store.replace(f"user{i}", f"# user {i}")
        raw = await a.read_batch()
        assert len(raw) == 5
        await anyio.sleep(0.2)
        await b.reclaim()
        await a.process(raw)
        counted = [c.stats.signals + c.stats.skipped for c in (a, b)]
        assert sum(counted) == 5, counted
        for i in range(5):
            assert [s.version for s in await check_lane(admin, KEYS, f"r:user{i}")] == [1]
    finally:
        await first.aclose()
        await second.aclose()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", *args], capture_output=True, text=True, timeout=60,
                          check=False)


async def test_deploy_functions_loads_as_the_operator_only(server: RedisServer, admin: Redis) -> None:
    """``wm-signals deploy functions``: refused as the writer (naming the library, nothing
    loaded), loaded as the operator."""
    refused = await anyio.to_thread.run_sync(lambda: _cli("deploy", "functions", "--redis-url",
                                                          url(server, "writer"), "--namespace", "wm"))
    assert refused.returncode != 0 and library_name() in refused.stderr
    assert await admin.function_list() == []
    done = await anyio.to_thread.run_sync(lambda: _cli("deploy", "functions", "--redis-url",
                                                       url(server, "operator"), "--namespace", "wm"))
    assert done.returncode == 0, done.stderr
    assert [lib[1] for lib in await admin.function_list()] == [library_name()]

"""The generated ACL users against real redis-server processes (Redis 7 selectors).

The committed ``deploy/users.acl`` is the generated file; each role is refused every
command outside its table (``ACL DRYRUN`` over the server's whole command table) and
every command on key kinds outside its table; the attacks of issue 10 fail with NOPERM;
and the roles, each on its own user, run the pipeline end to end: writer, worker, agent
loops, operator. Tests start private servers loaded with the generated file plus a test
``admin`` user (the file switches ``default`` off; DRYRUN needs an admin).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.codec import encode_json
from signals.core.memory import WorkingMemoryConfig
from signals.core.models import WriteEvent
from signals.streams import keys as keys_module
from signals.streams.acl import KINDS, ROLES, SCRIPTS, acl_file, acl_users, allowed_commands, grants_of
from signals.streams.client import Client, connect, lua
from signals.streams.deadletters import DeadLetters
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import GROUP, Keys
from signals.streams.status import inspect
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.cluster import LocalCluster
from tests.integration.helpers import check_lane, running_workers, wait_caught_up
from workers.deploy import kubernetes
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
PASSWORDS = {role: f"{role}-secret" for role in ROLES}
KEYS = Keys("wm", 4)
ADMIN = secrets.token_hex(8)

#: One key of each kind in the namespace (a lane in partition whatever crc32 says).
SAMPLE = {
    "doc": KEYS.doc("r:x"), "trk": KEYS.track("r:x"), "sig": KEYS.signals("r:x"),
    "snaps": KEYS.snapshots("r:x"), "idem": KEYS.idempotency("r:x", "k"), "thread": KEYS.thread("t1"),
    "dlv": KEYS.deliveries("t1"), "writes": KEYS.writes(0), "dlq": KEYS.dead_letters(0),
    "fails": KEYS.failures(0), "lanes": KEYS.lanes(0), "config": KEYS.config(),
    "hb": KEYS.heartbeat("host-1"),
}


def _url(server: RedisServer, role: str) -> str:
    return f"redis://wm-{role}:{PASSWORDS[role]}@127.0.0.1:{server.port}/0"


def _start(tmp: Path, text: str) -> RedisServer:
    """A redis-server loaded with ``text`` plus an ``admin`` user for the test itself."""
    path = tmp / "users.acl"
    path.write_text(text + f"user admin on >{ADMIN} ~* &* +@all\n")
    return RedisServer(extra=["--aclfile", str(path)]).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the module, with the generated users of namespace ``wm``."""
    srv = _start(tmp_path_factory.mktemp("acl"), acl_file(KEYS, PASSWORDS))
    yield srv
    srv.stop()


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[Redis]:
    """The test's own unrestricted client."""
    client = connect(f"redis://admin:{ADMIN}@127.0.0.1:{server.port}/0")
    yield client  # type: ignore[misc]
    await client.aclose()


@pytest.fixture
async def clients(server: RedisServer) -> AsyncIterator[dict[str, Client]]:
    """A client per role."""
    made = {role: connect(_url(server, role)) for role in ROLES}
    yield made
    for client in made.values():
        await client.aclose()


# -- the file ---------------------------------------------------------------------------


def test_committed_file_is_the_generated_one() -> None:
    """deploy/users.acl is ``acl_file(Keys("wm"), test passwords)``, hash for hash: regenerate with
    ``wm-signals deploy acl --namespace wm --password worker=worker-secret ...`` when the table changes."""
    assert (DEPLOY / "users.acl").read_text() == acl_file(Keys("wm"), PASSWORDS)


def test_file_holds_hashes_and_namespace_patterns_only() -> None:
    """No clear-text password, every key pattern under the namespace (never ``~*``), no channels."""
    text = acl_file(Keys("acme"), PASSWORDS)
    for secret in PASSWORDS.values():
        assert secret not in text
    users = acl_users(Keys("acme"), PASSWORDS)
    assert list(users) == [f"acme-{role}" for role in ROLES]
    for rules in users.values():
        assert re.fullmatch("#[0-9a-f]{64}", rules[2])
        patterns = re.findall(r"~(\S+?)[\s)]", " ".join(rules) + " ")
        assert patterns and all(p.startswith("acme:") for p in patterns), patterns
        assert not any(r.startswith(("&", "allkeys", "allchannels", "nopass", ">")) for r in rules)


def test_the_table_names_every_key_kind_and_only_those() -> None:
    """KINDS are exactly the kinds of the key layout, and the table uses no other (a
    misspelt kind would otherwise render no selector at all)."""
    assert set(KINDS) == {*keys_module._LANE_KINDS, *keys_module._PARTITION_KINDS, "config", "hb"}
    used = {kind for role in ROLES.values() for kind in grants_of(role)}
    used |= {kind for script in SCRIPTS.values() for kind in (*script.declares, *script.calls, *script.reads)}
    assert used <= set(KINDS), used - set(KINDS)


CONTAINER_COMMANDS = {"XGROUP", "XINFO"}  # listed with their subcommand (xgroup|delconsumer)


def test_every_script_the_code_runs_is_in_the_table() -> None:
    """Each Lua script loaded by the code is in SCRIPTS, with exactly the commands it calls."""
    sources = [*(ROOT / "signals").rglob("*.py"), *(ROOT / "workers").rglob("*.py")]
    used = {name for path in sources
            for name in re.findall(r"""\bServerScript\(\w+, ["'](\w+)["']\)""", path.read_text())}
    assert used <= set(SCRIPTS), used - set(SCRIPTS)
    for name, script in SCRIPTS.items():
        calls = re.findall(r"""redis\.p?call\(\s*'(\w+)'(?:\s*,\s*'(\w+)')?""", lua(name))
        called = {f"{c}|{sub}".lower() if c.upper() in CONTAINER_COMMANDS else c.lower() for c, sub in calls}
        listed = {c for commands in (*script.calls.values(), *script.reads.values()) for c in commands}
        assert called == listed, (name, called ^ listed)


# -- ACL DRYRUN over the command table --------------------------------------------------


async def _call(client: Redis, *args: str) -> Any:
    """A raw command (redis-py leaves ``execute_command`` untyped)."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


async def _command_table(admin: Redis) -> dict[str, int]:
    """Every runnable command and subcommand (``xinfo|stream``) with its arity."""
    names = await _call(admin, "COMMAND LIST")
    infos = await _call(admin, "COMMAND INFO", *names)
    return {info[0]: int(info[1]) for info in infos if info and not info[9]}  # containers: their subcommands


def _args(name: str, arity: int, key: str) -> list[str]:
    """Arguments for a command with ``key`` where its key goes (DRYRUN checks the arity)."""
    special = {
        "xread": ["xread", "streams", key, "0"],
        "xreadgroup": ["xreadgroup", "group", GROUP, "c", "streams", key, ">"],
    }
    if name in special:
        return special[name]
    args = name.split("|")
    if arity < 0 or len(args) < arity:
        args.append(key)
    while len(args) < abs(arity):
        args.append("0")
    return args


async def _always_allowed(admin: Redis) -> set[str]:
    """Commands Redis lets every authenticated user run (QUIT, RESET): a user with ``-@all``."""
    await _call(admin, "ACL SETUSER", "nobody", "reset", "on", ">" + ADMIN, "-@all")
    table = await _command_table(admin)
    return {name for name in table if await _dryrun(admin, "nobody", _args(name, table[name], "k")) == "OK"}


async def _dryrun(admin: Redis, user: str, args: list[str]) -> str:
    return str(await _call(admin, "ACL DRYRUN", user, *args))


@pytest.mark.parametrize("role", list(ROLES))
async def test_every_command_outside_the_role_is_refused(admin: Redis, role: str) -> None:
    """ACL DRYRUN of every command of the server's table (and every subcommand) that the
    role's table does not list is refused as a command, whatever the key."""
    allowed = allowed_commands(ROLES[role])
    table = await _command_table(admin)
    assert allowed <= set(table), allowed - set(table)
    assert len(table) > 300
    everyone = await _always_allowed(admin)
    assert everyone == {"quit", "reset"} or everyone <= {"quit", "reset", "auth", "hello"}, everyone
    refused = [name for name in table if name not in allowed | everyone]
    async with admin.pipeline(transaction=False) as pipe:
        for name in refused:
            pipe.execute_command("ACL DRYRUN", f"wm-{role}", *_args(name, table[name], SAMPLE["doc"]))
        replies = await pipe.execute(raise_on_error=False)
    wrong = {name: str(reply) for name, reply in zip(refused, replies, strict=True)
             if f"no permissions to run the '{name}' command" not in str(reply)}
    assert wrong == {}


@pytest.mark.parametrize("role", list(ROLES))
async def test_each_command_only_on_its_key_kinds(admin: Redis, role: str) -> None:
    """Each command the table gives a role on some kinds runs there (DRYRUN OK) and is
    refused on every other kind's key (``no permissions to access``)."""
    grants = grants_of(ROLES[role])
    table = await _command_table(admin)
    commands = {cmd for grant in grants.values() for cmd in grant.commands}
    problems = []
    for cmd in sorted(commands):
        for kind, key in SAMPLE.items():
            args = _args(cmd, table[cmd], key)
            assert key in await _call(admin, "COMMAND GETKEYS", *args), args
            reply = await _dryrun(admin, f"wm-{role}", args)
            if cmd in (grants[kind].commands if kind in grants else ()):
                ok = reply == "OK"
            else:
                ok = f"no permissions to access the '{key}' key" in reply
            if not ok:
                problems.append((cmd, kind, reply))
    assert problems == []


@pytest.mark.parametrize("role", list(ROLES))
async def test_no_command_reaches_a_namespace_this_one_prefixes(admin: Redis, role: str) -> None:
    """A namespace is the tenant boundary, also for one whose name extends it: each command
    of the role is refused on every key of the namespaces ``wm:hb`` and ``wm:config`` (under
    the old heartbeat glob ``wm:hb:*`` the worker of ``wm`` could write all of ``wm:hb``)."""
    grants = grants_of(ROLES[role])
    table = await _command_table(admin)
    commands = sorted({cmd for grant in grants.values() for cmd in grant.commands})
    problems = []
    for other in (Keys("wm:hb", 4), Keys("wm:config", 4)):
        theirs = [other.doc("r:x"), other.signals("r:x"), other.track("r:x"), other.writes(0),
                  other.config(), other.heartbeat("host-1")]
        for cmd in commands:
            for key in theirs:
                reply = await _dryrun(admin, f"wm-{role}", _args(cmd, table[cmd], key))
                if f"no permissions to access the '{key}' key" not in reply:
                    problems.append((cmd, key, reply))
    assert problems == []


@pytest.mark.parametrize("role", list(ROLES))
async def test_write_access_only_where_a_command_writes(admin: Redis, role: str) -> None:
    """Each kind a role's table gives read-write access has a command that needs it: with
    that kind's selectors made read-only, some granted command is refused there."""
    grants = grants_of(ROLES[role])
    table = await _command_table(admin)
    rules = acl_users(KEYS, PASSWORDS)[f"wm-{role}"]
    for kind, grant in grants.items():
        if grant.access != "RW" or not grant.commands:
            continue
        pattern = KEYS.pattern(kind)
        narrowed = [r.replace(f"(~{pattern} ", f"(%R~{pattern} ").replace(f" ~{pattern} ", f" %R~{pattern} ")
                    if r.startswith("(") else r for r in rules]
        await _call(admin, "ACL SETUSER", "narrowed", *narrowed)
        replies = [await _dryrun(admin, "narrowed", _args(cmd, table[cmd], SAMPLE[kind])) for cmd in grant.commands]
        assert any(reply != "OK" for reply in replies), (kind, grant)


@pytest.mark.parametrize("role", [r for r in ROLES if ROLES[r].scripts])
async def test_scripts_may_declare_only_their_key_kinds(admin: Redis, role: str) -> None:
    """FCALL declaring every kind the role's scripts declare is allowed (in one call);
    declaring any other kind is refused."""
    declared = {kind for name in ROLES[role].scripts for kind in SCRIPTS[name].declares}
    function = "wms_f"
    together = [SAMPLE[k] for k in sorted(declared)]
    assert await _dryrun(admin, f"wm-{role}", ["fcall", function, str(len(together)), *together]) == "OK"
    for kind, key in SAMPLE.items():
        reply = await _dryrun(admin, f"wm-{role}", ["fcall", function, "1", key])
        assert (reply == "OK") == (kind in declared), (kind, reply)


# -- attacks (issue 10, items 1-2) ------------------------------------------------------


async def test_writer_cannot_forge_signals_tracking_or_deliveries(clients: dict[str, Client]) -> None:
    """The writer cannot XADD a signal into a victim's stream, HSET a tracking hash, SET any
    ``wm:*`` key to a string, XADD into a delivery log, nor reach those keys through EVAL."""
    writer = clients["writer"]
    victim = KEYS.signals("r:victim")
    with pytest.raises(redis_exc.NoPermissionError):
        await writer.xadd(victim, {"e": '{"version": 1}'})
    with pytest.raises(redis_exc.NoPermissionError):
        await writer.hset(KEYS.track("r:victim"), "wv", 999999)
    for key in (KEYS.doc("r:victim"), victim, KEYS.writes(0), KEYS.track("r:victim"), KEYS.thread("t1"),
                KEYS.lanes(0), KEYS.config(), "wm:anything"):
        with pytest.raises(redis_exc.NoPermissionError):
            await writer.set(key, "x")
    with pytest.raises(redis_exc.NoPermissionError):
        await writer.xadd(KEYS.deliveries("t1"), {"e": "{}"})
    with pytest.raises(redis_exc.NoPermissionError):  # a declared signal stream
        await writer.eval("return redis.call('XADD', KEYS[1], '*', 'e', 'x')", 1, victim)
    with pytest.raises(redis_exc.NoPermissionError, match="'eval' command"):  # no code of its own at all
        await writer.eval(f"return redis.call('XADD', '{victim}', '*', 'e', 'x')", 1, KEYS.doc("r:victim"))
    with pytest.raises(redis_exc.NoPermissionError):
        await writer.xack(KEYS.writes(0), GROUP, "0-1")
    with pytest.raises(redis_exc.NoPermissionError):  # another namespace is another tenant
        await writer.hset(Keys("acme").doc("r:victim"), "data", "x")


async def test_worker_cannot_write_documents(clients: dict[str, Client]) -> None:
    """The worker reads documents and never writes them (nor anything outside its keys)."""
    worker = clients["worker"]
    for attempt in (worker.hset(KEYS.doc("r:victim"), "data", "x"), worker.delete(KEYS.doc("r:victim")),
                    worker.set(KEYS.idempotency("r:victim", "k"), "1"), worker.xadd(KEYS.deliveries("t1"), {"e": "{}"}),
                    worker.hset(KEYS.thread("t1"), "resource", "mallory"), worker.flushdb()):
        with pytest.raises(redis_exc.NoPermissionError):
            await attempt


async def test_reader_writes_nothing_but_delivery_logs(clients: dict[str, Client]) -> None:
    """The read-only agent user can append to a delivery log and write nothing else."""
    reader = clients["reader"]
    for kind, key in SAMPLE.items():
        for attempt in (reader.set(key, "x"), reader.hset(key, "a", "b"), reader.delete(key),
                        reader.rpush(key, "x"), reader.sadd(key, "x"), reader.expire(key, 1)):
            with pytest.raises(redis_exc.NoPermissionError):
                await attempt
        if kind != "dlv":
            with pytest.raises(redis_exc.NoPermissionError):
                await reader.xadd(key, {"e": "{}"})
    with pytest.raises(redis_exc.NoPermissionError):
        await reader.evalsha("0" * 40, 0)


async def test_operator_cannot_write_documents_or_signals(clients: dict[str, Client]) -> None:
    """The operator reads everything of the namespace and writes only dead letters and requeues."""
    operator = clients["operator"]
    for attempt in (operator.hset(KEYS.doc("r:victim"), "data", "x"), operator.xadd(KEYS.signals("r:v"), {"e": "x"}),
                    operator.hset(KEYS.track("r:v"), "wv", 1), operator.delete(KEYS.writes(0))):
        with pytest.raises(redis_exc.NoPermissionError):
            await attempt


async def test_scaler_reads_the_backlog_as_keda_does(server: RedisServer, clients: dict[str, Client]) -> None:
    """The generated ScaledObject, evaluated as KEDA would: the scaler user of its Secret logs in
    with ``HELLO 3 AUTH`` (as go-redis does), reads each trigger's consumer-group lag with
    ``XINFO GROUPS``, and the scalingModifiers formula over the triggers' names is the backlog
    (every write not yet given to a worker). The user can do nothing else: not read an entry or
    a document, not touch the group."""
    files = kubernetes.manifests(kubernetes.Options(KEYS))
    scaled = files["keda.yaml"][1]["spec"]
    [_, secret] = files["secret.yaml"]
    async with running_workers(_url(server, "worker"), KEYS, 1):  # creates the groups, then stops
        pass
    scaler = Redis(host="127.0.0.1", port=server.port, username=secret["stringData"]["username"],
                   password=PASSWORDS["scaler"], protocol=3, decode_responses=True)

    async def backlog() -> int:
        lag = {}
        for trigger in scaled["triggers"]:
            groups = await scaler.xinfo_groups(trigger["metadata"]["stream"])
            [group] = [g for g in groups if g["name"] == trigger["metadata"]["consumerGroup"]]
            lag[trigger["name"]] = int(group["lag"])
        terms = [term.strip() for term in scaled["advanced"]["scalingModifiers"]["formula"].split("+")]
        return sum(lag[term] for term in terms)

    before = await backlog()
    store = WorkingMemoryStore(clients["writer"], keys=KEYS)
    for i in range(5):
        await store.replace(f"scaled-{i}", f"# User {i}\n- waits for a worker")
    assert await backlog() == before + 5
    for attempt in (scaler.xrange(KEYS.writes(0)), scaler.xlen(KEYS.writes(0)), scaler.hget(KEYS.doc("r:x"), "data"),
                    scaler.xgroup_destroy(KEYS.writes(0), GROUP), scaler.xinfo_groups(KEYS.dead_letters(0))):
        with pytest.raises(redis_exc.NoPermissionError):
            await attempt
    async with running_workers(_url(server, "worker"), KEYS, 1):  # leave the server caught up
        await wait_caught_up(clients["operator"], KEYS)
    assert await backlog() == 0
    await scaler.aclose()


# -- the roles end to end ---------------------------------------------------------------


async def _until(predicate: object, limit_s: float = 30.0) -> None:
    with anyio.fail_after(limit_s):
        while not await predicate():  # type: ignore[operator]
            await anyio.sleep(0.05)


async def test_roles_run_the_pipeline(server: RedisServer, admin: Redis, clients: dict[str, Client]) -> None:
    """Each role on its own user: a writer writes (thread, idempotency, thread scope), a worker
    processes and dead-letters a poison event, a read-only agent loop subscribes and logs its
    deliveries, an agent loop writes through the tool, an operator inspects, requeues and drops.
    No command of any of them is refused (the server's ACL LOG stays empty)."""
    keys = KEYS
    await _call(admin, "ACL LOG", "RESET")
    writer, reader, operator = clients["writer"], clients["reader"], clients["operator"]
    store = WorkingMemoryStore(writer, keys=keys)
    async with running_workers(_url(server, "worker"), keys, 1):
        await store.create_thread("t-e2e", "bob", initial="# Bob\n- likes tea")
        await wait_caught_up(operator, keys)  # (a worker signals the current document: one write at a time)
        await store.replace("bob", "# Bob\n- likes coffee", thread_id="t-e2e", idempotency_key="k1")
        await store.replace("bob", "# Bob\n- likes coffee", thread_id="t-e2e", idempotency_key="k1")
        thread_store = WorkingMemoryStore(writer, keys=keys, config=WorkingMemoryConfig(scope="thread"))
        await thread_store.replace("bob", "# Thread notes", thread_id="t-e2e")
        # poison that decodes (requeue refuses an event that does not): a lane with no document
        ghost = WriteEvent(lane="r:ghost", scope="resource", format="markdown", version=1, data="# Ghost",
                           op="replace", resource_id="ghost")
        await writer.xadd(keys.writes(keys.partition("r:ghost")), {"e": encode_json(ghost)})
        await wait_caught_up(operator, keys)
        assert [s.version for s in await check_lane(operator, keys, "r:bob")] == [1, 2]
        await check_lane(operator, keys, "t:t-e2e")

        async def dead_lettered() -> bool:
            return (await inspect(operator, keys)).totals["dead_letters"] == 1

        await _until(dead_lettered)

        # a read-only agent loop: subscribe, deliver, log
        loop = AgentWorkingMemory(reader, keys, resource_id="bob", thread_id="t-e2e", read_only=True)
        assert (await loop.start())[-1].signal.version == 2
        assert (await loop.before_model_call(set())).add
        logged = await DeliveryLog(reader, keys).read("t-e2e")
        assert logged and logged[-1].version == 2
        chain = await Subscription(reader, keys, "r:bob").bootstrap(from_start=True)
        assert [m.signal.version for m in chain] == [1, 2]

        # an agent loop whose model writes through the tool
        agent = AgentWorkingMemory(clients["agent"], keys, resource_id="bob", thread_id="t-e2e")
        await agent.start()
        assert (await agent.call_tool({"memory": "# Bob\n- likes cocoa"}))["success"]
        await wait_caught_up(operator, keys)
        await agent.before_model_call(set())

        # the operator: inspect, requeue (the worker dead-letters it again), drop
        dlq = DeadLetters(operator, keys)
        [letter] = await dlq.list()
        assert await dlq.requeue(letter.id)
        await _until(dead_lettered)
        [again] = await dlq.list()
        assert again.id != letter.id
        await dlq.drop(again.id)
        assert await dlq.list() == []
        report = await inspect(operator, keys)
        assert report.totals["pending"] == 0 and report.totals["lag"] == 0

        async def trimmed() -> bool:  # the worker's maintenance (reclaim, trim) ran under its user
            return all([await operator.xlen(keys.writes(p)) == 0 for p in range(keys.partitions)])

        await _until(trimmed)

    # the operator's commands, as an operator runs them
    common = ["--redis-url", _url(server, "operator"), "--namespace", "wm", "--partitions", str(keys.partitions)]
    for command in (["inspect", "--json"], ["dlq", "list"], ["replay", "--resource", "bob", "--verify"],
                    ["replay", "--thread", "t-e2e", "--deliveries"]):
        proc = await anyio.run_process([sys.executable, "-m", "workers", *command, *common], cwd=ROOT, check=False)
        assert proc.returncode == 0, (command, proc.stderr.decode())
    # every role that reads signals tails a lane from the CLI (it asked TYPE, which only the worker may)
    for role in ("reader", "agent", "writer", "operator"):
        proc = await anyio.run_process(
            [sys.executable, "-m", "workers", "subscribe", "--resource", "bob", "--from-start", "--count", "1",
             "--timeout", "20", "--redis-url", _url(server, role), "--namespace", "wm",
             "--partitions", str(keys.partitions)], cwd=ROOT, check=False)
        assert proc.returncode == 0 and proc.stdout, (role, proc.stderr.decode())
    assert await _call(admin, "ACL LOG") == []


async def test_a_wrong_password_is_named_as_a_refused_login(server: RedisServer) -> None:
    """A wrong password is exit 2 saying the login was refused (it said 'cannot reach Redis')."""
    url = f"redis://wm-reader:not-the-password@127.0.0.1:{server.port}/0"
    proc = await anyio.run_process([sys.executable, "-m", "workers", "get", "--resource", "bob", "--redis-url", url,
                                    "--namespace", "wm"], cwd=ROOT, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "refused the login" in err and "cannot reach" not in err, err
    assert "not-the-password" not in err  # the URL is shown redacted


async def test_acl_users_work_and_are_refused_outside_their_keys(tmp_path: Path) -> None:
    """deploy/users.acl as committed: the writer and worker users run the pipeline; other keys are refused."""
    acl = tmp_path / "users.acl"
    acl.write_text((DEPLOY / "users.acl").read_text())
    server = RedisServer(extra=["--aclfile", str(acl)]).start()
    keys = Keys("wm", 4)
    try:
        writer_url = f"redis://wm-writer:writer-secret@127.0.0.1:{server.port}/0"
        worker_url = f"redis://wm-worker:worker-secret@127.0.0.1:{server.port}/0"
        operator_url = f"redis://wm-operator:operator-secret@127.0.0.1:{server.port}/0"
        writer = connect(writer_url)
        # the worker creates the groups; the writer only appends through the write script
        async with running_workers(worker_url, keys, 1):
            store = WorkingMemoryStore(writer, keys=keys)
            facts = "\n".join(f"- fact {i}: something worth remembering" for i in range(10))
            watcher = connect(operator_url)  # reads lanes, documents, tracking and signals
            await store.replace("alice", f"# Alice\n- likes tea\n{facts}")
            await wait_caught_up(watcher, keys)
            await store.replace("alice", f"# Alice\n- likes coffee\n{facts}")
            await wait_caught_up(watcher, keys)
            signals = await check_lane(watcher, keys, "r:alice")
            assert [s.mode for s in signals] == ["snapshot", "delta"]
            # an agent loop with the writer's credentials can subscribe
            chain = await Subscription(writer, keys, "r:alice").bootstrap()
            assert [m.signal.version for m in chain] == [1, 2]
            await watcher.aclose()
        with pytest.raises(redis_exc.NoPermissionError):
            await writer.set("other:key", "x")
        with pytest.raises(redis_exc.NoPermissionError):
            await writer.get("other:key")
        with pytest.raises(redis_exc.NoPermissionError):
            await writer.xack(keys.writes(0), GROUP, "0-1")
        worker = connect(worker_url)
        with pytest.raises(redis_exc.NoPermissionError):
            await worker.hset("elsewhere", "a", "b")
        with pytest.raises(redis_exc.NoPermissionError):
            await worker.flushdb()
        await worker.aclose()
        await writer.aclose()
    finally:
        server.stop()


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A real three-node Redis Cluster (its default user stays on: the test's admin)."""
    with LocalCluster() as local:
        yield local


async def test_cluster_users_run_the_pipeline_on_a_cluster(cluster: LocalCluster) -> None:
    """With ``cluster=True`` the users also have what redis-py's cluster client needs: on a
    real three-node cluster a writer writes, a worker processes, a reader subscribes, and
    no node refuses anything (the ACL LOGs stay empty)."""
    keys = Keys("wm", 8)
    nodes = [Redis(host="127.0.0.1", port=s.port, decode_responses=True, protocol=2) for s in cluster.servers]
    for node in nodes:
        for user, rules in acl_users(keys, PASSWORDS, cluster=True).items():
            await _call(node, "ACL SETUSER", user, *rules)
    users = {role: connect(_url(cluster.servers[i % 3], role), cluster=True)
             for i, role in enumerate(("writer", "reader", "operator"))}
    store = WorkingMemoryStore(users["writer"], keys=keys)
    async with running_workers(_url(cluster.servers[2], "worker"), keys, 1, cluster=True):
        for i in range(6):
            await store.replace(f"u{i}", f"# User {i}\n- likes tea")
        await wait_caught_up(users["operator"], keys)
        for i in range(6):
            chain = await Subscription(users["reader"], keys, f"r:u{i}").bootstrap()
            assert chain[-1].value == f"# User {i}\n- likes tea"
    for client in users.values():
        await client.aclose()
    for node in nodes:
        assert await _call(node, "ACL LOG") == []
        await node.aclose()


# -- the command ------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", "deploy", "acl", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def _auth(port: int, user: str, secret: str) -> bytes:
    """The reply to AUTH on a fresh connection (a synchronous test: no event loop)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        parts = [b"AUTH", user.encode(), secret.encode()]
        sock.sendall(b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        return sock.recv(256)


def test_deploy_acl_command(tmp_path: Path) -> None:
    """``deploy acl`` prints the file for the given passwords, makes up and prints the missing
    ones (stderr, never in the file), writes ``-o`` (a redis-server loads it and the printed
    passwords log in), and exits 2 on bad input."""
    given = [f"--password={role}={secret}" for role, secret in PASSWORDS.items()]
    proc = _cli("--namespace", "wm", *given)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == acl_file(Keys("wm"), PASSWORDS) and proc.stderr == ""

    out = tmp_path / "users.acl"
    proc = _cli("--namespace", "acme", "--password", "acme-writer=w", "--cluster", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    made = dict(line.split(" ", 1) for line in proc.stderr.splitlines())
    assert sorted(made) == sorted(f"acme-{role}" for role in ROLES if role != "writer")
    text = out.read_text()
    assert proc.stdout == "" and all(secret not in text for secret in made.values())
    passwords = {name.removeprefix("acme-"): secret for name, secret in made.items()} | {"writer": "w"}
    assert text == acl_file(Keys("acme"), passwords, cluster=True)
    server = RedisServer(extra=["--aclfile", str(out)]).start()
    try:
        for user, secret in made.items():
            assert _auth(server.port, user, secret) == b"+OK\r\n"
        assert _auth(server.port, "acme-writer", "w") == b"+OK\r\n"
        assert _auth(server.port, "acme-reader", "w").startswith(b"-WRONGPASS")
    finally:
        server.stop()

    for bad in (["--password", "worker"], ["--password", "worker="], ["--password", "boss=x"],
                ["--password", "worker=a", "--password", "wm-worker=b"],
                ["--password", "worker=with space"], ["--password", "worker=a@b:c/d"]):  # not URL-safe
        proc = _cli("--namespace", "wm", *bad)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert proc.stderr.startswith("wm-signals: ") and len(proc.stderr.splitlines()) == 1
    assert _cli("--namespace", "no spaces").returncode == 2


async def test_a_worker_with_a_wrong_password_stops_at_once_naming_the_login(server: RedisServer) -> None:
    """``write`` with a wrong password exited 2 at once, but a worker took the refusal for an
    outage: it backed off for ``reconnect_timeout_s`` (5 minutes by default) and then exited
    1 with "Redis unreachable". A refused login does not pass by waiting: the worker stops
    at once, exit 2, saying the login was refused."""
    url = f"redis://wm-worker:not-the-password@127.0.0.1:{server.port}/0"
    env = {**os.environ, "WM_SIGNALS_RECONNECT_TIMEOUT_S": "5"}  # the back-off it took: then exit 1, unreachable
    with anyio.fail_after(120):  # a hang guard only
        proc = await anyio.run_process([sys.executable, "-m", "workers", "worker", "--redis-url", url,
                                        "--namespace", "wm"], cwd=ROOT, check=False, env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "refused the login" in err.splitlines()[-1] and "not-the-password" not in err, err

"""Durable writes (issue 13, scope 5): WAIT after the write script, on real servers; and a
master refusing writes for want of replicas (``min-replicas-to-write``) is transient.

A lone server has no replica, so a write that needs one is stored but refused with
DurabilityError (library) or exit 1 (CLI); once a replica follows, the retry with the same
idempotency key returns the first write's version and waits for the replica again.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from functools import partial
from pathlib import Path

import anyio
import pytest

from signals.errors import DurabilityError, RedisBusyError
from signals.streams.acl import acl_file
from signals.streams.client import connect
from signals.streams.durability import Durability
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.scripts import ensure_loaded
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import settings_for
from tests.integration.test_acl import ADMIN, KEYS, PASSWORDS, _start
from workers.runtime.embedded import RedisServer, bundled_redis_server
from workers.runtime.worker import run_worker

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).parents[2]


async def test_unreplicated_write_is_stored_refused_and_safely_retried() -> None:
    """No replica: DurabilityError naming the version; with one, the idempotent retry is
    acknowledged (same version, no second write) and the replica holds the document."""
    keys = Keys(namespace="d" + uuid.uuid4().hex[:8], partitions=2)
    with RedisServer(extra=["--repl-diskless-sync-delay", "0"]) as primary:
        client = connect(primary.url)
        store = WorkingMemoryStore(client, keys=keys, durability=Durability(1, 50))
        try:
            with pytest.raises(DurabilityError, match="stored on the master but not yet replicated") as caught:
                await store.replace("ada", "# Ada\n- likes tea", idempotency_key="k1")
            assert (caught.value.version, caught.value.acked, caught.value.required) == (1, 0, 1)
            doc = await store.get("ada")
            assert doc is not None and doc.version == 1  # stored on the master
            with RedisServer(extra=["--replicaof", "127.0.0.1", str(primary.port)]) as replica:
                replica_client = connect(replica.url)
                try:
                    with anyio.fail_after(20):
                        while (await replica_client.info("replication"))["master_link_status"] != "up":
                            await anyio.sleep(0.05)
                    retry = WorkingMemoryStore(client, keys=keys, durability=Durability(1, 2000))
                    stored = await client.get(keys.idempotency("r:ada", "k1"))
                    assert await retry.replace("ada", "# Ada\n- likes tea", idempotency_key="k1") == 1
                    assert await client.get(keys.idempotency("r:ada", "k1")) == stored  # confirmed unchanged
                    legacy = keys.idempotency("r:ada", "old")  # a key from before request fingerprints
                    await client.set(legacy, "1")
                    assert await retry.replace("ada", "# Ada\n- other", idempotency_key="old") == 1
                    assert await client.get(legacy) == "1"  # it took no fingerprint (review finding)
                    assert await replica_client.hget(keys.doc("r:ada"), "version") == "1"
                    assert await retry.replace("ada", "# Ada\n- likes green tea") == 2  # a new write waits too
                finally:
                    await replica_client.aclose()
        finally:
            await client.aclose()


def test_cli_write_with_min_replicas_on_a_lone_server_is_exit_1(redis_server: RedisServer) -> None:
    """``write --min-replicas 1``: exit 1, one line saying the write may be lost on failover."""
    namespace = "d" + uuid.uuid4().hex[:8]
    done = subprocess.run(
        [sys.executable, "-m", "workers", "write", "--redis-url", redis_server.url, "--namespace", namespace,
         "--resource", "ada", "--markdown", "# Ada", "--min-replicas", "1", "--replica-timeout-ms", "20",
         "--idempotency-key", "k1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "not yet replicated" in done.stderr
    assert "lost on a failover" in done.stderr and "idempotency key" in done.stderr


@pytest.mark.parametrize("binary", ["path", "redis-6.2"])
async def test_master_without_its_replicas_is_transient_for_writers_and_the_worker(binary: str) -> None:
    """``min-replicas-to-write`` on a master cut off from its replicas (a failover's old
    side) answers NOREPLICAS to every write: the store raises RedisBusyError (not
    CorruptDataError) and a worker starting then backs off (it used to exit on its first
    XGROUP CREATE), then signals once writes are allowed again. Redis 6.2 relays the
    script's NOREPLICAS after the script's location (``@user_script: 65: -NOREPLICAS``):
    it was CorruptDataError there (exit 2, "malformed data")."""
    keys = Keys(namespace="d" + uuid.uuid4().hex[:8], partitions=2)
    with RedisServer(binary=bundled_redis_server() if binary == "redis-6.2" else None) as server:
        client, worker_client = connect(server.url), connect(server.url)
        store = WorkingMemoryStore(client, keys=keys)
        try:
            await store.replace("ada", "# Ada\n- likes tea")
            await client.config_set("min-replicas-to-write", 1)
            with pytest.raises(RedisBusyError, match="NOREPLICAS"):
                await store.replace("ada", "# Ada\n- likes coffee")
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(run_worker, worker_client, settings_for(server.url, keys), name="w0", stop=stop,
                                      handle_signals=False))
                await anyio.sleep(1.0)  # refused meanwhile: the worker retries
                assert await client.exists(keys.signals("r:ada")) == 0
                await client.config_set("min-replicas-to-write", 0)
                await wait_caught_up(client, keys, limit_s=20)
                stop.set()
            assert await client.xlen(keys.signals("r:ada")) == 1
        finally:
            await client.aclose()
            await worker_client.aclose()


async def test_writer_and_agent_roles_may_write_durably(tmp_path: Path) -> None:
    """Under the generated ACL users, the writer and agent roles run WAIT and the
    confirmation of a retried write (SET XX KEEPTTL on its idempotency key)."""
    primary = _start(tmp_path, acl_file(KEYS, PASSWORDS))
    try:
        with RedisServer(extra=["--replicaof", "127.0.0.1", str(primary.port), "--masteruser", "admin",
                                "--masterauth", ADMIN]) as replica:
            follower = connect(replica.url)
            try:
                with anyio.fail_after(20):
                    while (await follower.info("replication"))["master_link_status"] != "up":
                        await anyio.sleep(0.05)
            finally:
                await follower.aclose()
            loader = connect(f"redis://wm-worker:{PASSWORDS['worker']}@127.0.0.1:{primary.port}/0")
            try:  # the project's functions, as a worker loads them at its start
                await ensure_loaded(loader)
            finally:
                await loader.aclose()
            for role in ("writer", "agent"):
                client = connect(f"redis://wm-{role}:{PASSWORDS[role]}@127.0.0.1:{primary.port}/0")
                store = WorkingMemoryStore(client, keys=KEYS, durability=Durability(1, 2000))
                try:
                    assert await store.replace(role, f"# {role}", idempotency_key="k") == 1
                    assert await store.replace(role, f"# {role}", idempotency_key="k") == 1  # dup: confirmed
                finally:
                    await client.aclose()
    finally:
        primary.stop()

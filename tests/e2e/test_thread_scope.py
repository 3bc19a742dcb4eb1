"""Thread scope from ``--thread`` alone, in every command that names a lane (issue 11).

The ``--scope`` help says thread scope is implied when only ``--thread`` is given; each
command is run as a user runs it (``python -m workers ...`` in a subprocess) with no
``--resource``. A write to an existing thread resolves its owner; a write to a thread
that does not exist needs ``--resource`` (exit 2, one line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

PLAN = "# Trip\n- Kyoto in May"
NEXT = "# Trip\n- Kyoto in May\n- book the ryokan"


async def wm(url: str, keys: Keys, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run ``wm-signals args`` against the test namespace: exit code, stdout, stderr."""
    proc = await anyio.run_process(
        [sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", keys.namespace,
         "--partitions", str(keys.partitions)], input=stdin, check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def test_every_command_takes_thread_alone(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                tmp_path: Path) -> None:
    """get, write, subscribe, replay and export address lane ``t:<id>`` from ``--thread`` alone."""
    url = redis_server.url
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "alice")
    await store.replace("alice", PLAN, thread_id="t1", scope="thread")
    async with running_workers(url, keys, 1):
        code, out, err = await wm(url, keys, "write", "--thread", "t1", "--markdown", NEXT)
        assert (code, out.strip()) == (0, "2"), err
        await wait_caught_up(redis, keys)
    assert await redis.hget(keys.thread("t1"), "resource") == "alice"
    assert not await redis.exists(keys.doc("r:alice")), "the write went to the thread's lane"

    code, out, err = await wm(url, keys, "get", "--thread", "t1", "--json")
    assert code == 0, err
    assert (json.loads(out)["lane"], json.loads(out)["data"]) == ("t:t1", NEXT)

    code, out, err = await wm(url, keys, "subscribe", "--thread", "t1", "--json", "--from-start", "--count", "2")
    assert code == 0, err
    assert [json.loads(line)["version"] for line in out.splitlines()] == [1, 2]

    code, out, err = await wm(url, keys, "replay", "--thread", "t1", "--json")
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["value"] == NEXT

    code, out, err = await wm(url, keys, "replay", "--thread", "t1", "--verify")
    assert code == 0 and "verified 2 signals" in out, err

    export = tmp_path / "t1.jsonl"
    code, out, err = await wm(url, keys, "export", "--thread", "t1", "-o", str(export))
    assert code == 0 and "exported 2 signals" in out, err
    code, out, err = await wm(url, keys, "replay", "--file", str(export), "--at", "2")
    assert (code, out) == (0, NEXT + "\n"), err


async def test_writing_a_new_thread_needs_its_resource(redis_server: RedisServer, keys: Keys) -> None:
    """A write naming a thread that does not exist, without ``--resource``: exit 2, one line, nothing stored."""
    code, _, err = await wm(redis_server.url, keys, "write", "--thread", "nobody", "--markdown", PLAN)
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "'nobody' does not exist" in err and "--resource" in err
    code, _, err = await wm(redis_server.url, keys, "get", "--thread", "nobody")
    assert code == 1 and "no working memory" in err


async def test_a_lane_needs_resource_or_thread(redis_server: RedisServer, keys: Keys) -> None:
    """Neither ``--resource`` nor ``--thread``: exit 2 naming both options."""
    for command in ("get", "subscribe", "replay", "export -o /dev/null"):
        code, _, err = await wm(redis_server.url, keys, *command.split())
        assert code == 2 and "--resource" in err and "--thread" in err, (command, err)

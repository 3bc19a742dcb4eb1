"""The worker's hard stop deadline (issue 11): past ``grace_s`` after a stop, the task group
is cancelled, ``worker.hard_deadline`` is logged, and the process exits; what it had in
flight stays pending for the next worker (no loss).

The fault is real: a worker process on a private redis-server gets SIGTERM while Redis
holds its commands (``CLIENT PAUSE ... WRITE``, what a failover does: XREADGROUP and the
commit script are write commands), so the read or commit in flight cannot finish within
the grace period.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, lanes_of, running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
GRACE_S = 0.5
PAUSE_MS = 30_000


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A private server: the test pauses its clients."""
    with RedisServer() as srv:
        yield srv


@pytest.fixture
async def client(server: RedisServer) -> AsyncIterator[Redis]:
    redis = connect(server.url)
    yield redis  # type: ignore[misc]
    await redis.execute_command("CLIENT", "UNPAUSE")
    await redis.aclose()


def _spawn(server: RedisServer, keys: Keys, log: Path) -> subprocess.Popen[bytes]:
    """A worker process logging JSON at info level to ``log``."""
    env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "info", "WM_SIGNALS_LOG_FORMAT": "json",
           "WM_SIGNALS_BLOCK_MS": "20", "WM_SIGNALS_GRACE_S": str(GRACE_S)}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "workers", "worker", "--redis-url", server.url, "--namespace", keys.namespace,
             "--partitions", str(keys.partitions), "--consumer-name", "stuck"],
            env=env, stdout=subprocess.DEVNULL, stderr=out)


async def _events(log: Path) -> list[str]:
    """The event names the worker logged so far, in order."""
    out = []
    for line in (await anyio.Path(log).read_text()).splitlines():
        try:
            out.append(str(json.loads(line).get("event")))
        except (json.JSONDecodeError, AttributeError):
            continue
    return out


async def _wait_for(log: Path, event: str, proc: subprocess.Popen[bytes], limit_s: float = 30.0) -> None:
    with anyio.fail_after(limit_s):
        while event not in await _events(log):
            assert proc.poll() is None, f"worker exited with {proc.returncode}"
            await anyio.sleep(0.05)


async def test_a_stop_that_cannot_finish_is_cut_at_the_hard_deadline(
    server: RedisServer, client: Redis, keys: Keys, tmp_path: Path
) -> None:
    """SIGTERM while Redis holds the worker's commands: the process exits about ``grace_s``
    later (not when Redis lets go), logging ``worker.hard_deadline``; a later worker then
    signals every write, the ones held during the pause included (nothing is lost)."""
    writer = connect(server.url, socket_timeout=PAUSE_MS / 1000)  # its writes wait out the pause
    store = WorkingMemoryStore(writer, keys=keys)
    log = tmp_path / "worker.log"
    proc = _spawn(server, keys, log)
    try:
        await _wait_for(log, "worker.ready", proc)
        for n in range(5):
            await store.replace(f"u{n}", f"# Profile {n}\n- before the pause")
        await wait_caught_up(client, keys)

        await client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        async with anyio.create_task_group() as writers:
            for n in range(5):  # held by the pause like the worker's commands; they land after it
                writers.start_soon(store.replace, f"u{n}", f"# Profile {n}\n- during the pause")
            await anyio.sleep(0.3)  # the worker's next XREADGROUP (a write command) is held by now
            stopped_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(PAUSE_MS / 1000 / 2):
                while proc.poll() is None:
                    await anyio.sleep(0.02)
            took = time.monotonic() - stopped_at
            await client.execute_command("CLIENT", "UNPAUSE")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        await writer.aclose()
    events = await _events(log)
    assert "worker.stopping" in events and "worker.hard_deadline" in events, events
    assert events.index("worker.stopping") < events.index("worker.hard_deadline")
    assert GRACE_S <= took < GRACE_S + 2.5, f"stopped after {took:.2f}s (grace {GRACE_S}s, Redis paused 30s)"

    async with running_workers(server.url, keys, 1):
        await wait_caught_up(client, keys, limit_s=60)
    lanes = await lanes_of(client, keys)
    assert len(lanes) == 5
    for lane in lanes:
        assert (await check_lane(client, keys, lane))[-1].value.endswith("- during the pause")

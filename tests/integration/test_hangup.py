"""SIGHUP stops a worker gracefully (issue 30, finding 9): exit 0, consumer and heartbeat gone.

A closed terminal or SSH session sends SIGHUP; Python's default action killed the worker
at once (exit 129), leaving its consumer in the group and its heartbeat to expire, so
``worker --check`` said healthy for a dead worker. One process and a supervisor of two.
"""

from __future__ import annotations

import signal
import uuid

import anyio
import pytest

from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import spawn_worker, wait_ready
from workers.ops.health import check_heartbeat
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.mark.parametrize("processes", [1, 2])
async def test_sighup_is_a_graceful_stop(redis_server: RedisServer, keys: Keys, processes: int) -> None:
    """SIGHUP to the worker (the supervisor with ``--processes 2``): exit 0, ``worker.stopped``
    logged, the heartbeat deleted, no consumer left in any group."""
    redis = connect(redis_server.url)
    name = "hup-" + uuid.uuid4().hex[:6]
    proc = spawn_worker(redis_server.url, keys, name, processes=processes)
    try:
        await wait_ready(proc)
        await WorkingMemoryStore(redis, keys=keys).replace("hup", "# Hup")
        await wait_caught_up(redis, keys)
        with anyio.fail_after(10):  # the monitor's first heartbeat
            while await check_heartbeat(redis, keys, name) is not None:
                await anyio.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(30)) == 0
        log_text = await anyio.Path(proc.log_path).read_text()  # type: ignore[attr-defined]
        assert "worker.stopped" in log_text and "SIGHUP" in log_text
        assert await check_heartbeat(redis, keys, name) is not None  # deleted at the stop: "no heartbeat"
        for stream in keys.all_writes():
            assert not await redis.xinfo_consumers(stream, GROUP)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await redis.aclose()

"""``worker --check --consumer-name`` takes the name ``inspect`` shows for a consumer, as well
as the worker's configured name (the heartbeat is per instance, a consumer per process)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.streams.keys import GROUP, Keys
from tests.integration.helpers import spawn_worker, wait_ready
from workers.runtime.embedded import RedisServer
from workers.runtime.supervisor import heartbeat_candidates

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).parents[2]


def test_candidates_strip_the_process_suffix() -> None:
    """The configured name first, then the name without ``-<digits>`` (``<host>-<pid>``, ``<name>-<i>``)."""
    assert heartbeat_candidates("blue-0") == ["blue-0", "blue"]
    assert heartbeat_candidates("host-a-4242") == ["host-a-4242", "host-a"]
    assert heartbeat_candidates("blue") == ["blue"]


def _check(url: str, keys: Keys, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", "worker", "--check", "--redis-url", url, "--namespace",
                           keys.namespace, "--partitions", str(keys.partitions), "--consumer-name", name],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


async def test_check_takes_the_consumer_name_inspect_shows(redis_server: RedisServer, redis: Redis,
                                                           keys: Keys) -> None:
    """Two processes named ``blue``: inspect shows ``blue-0`` and ``blue-1``; each passes the check,
    as does ``blue``; a name of no worker fails (exit 1)."""
    proc = spawn_worker(redis_server.url, keys, "blue", processes=2)
    try:
        await wait_ready(proc)
        with anyio.fail_after(30):
            while True:
                consumers = {c["name"] for p in range(keys.partitions)  # each process reads its share of them
                             for c in await redis.xinfo_consumers(keys.writes(p), GROUP)}
                if consumers == {"blue-0", "blue-1"} and _check(redis_server.url, keys, "blue").returncode == 0:
                    break
                await anyio.sleep(0.2)
        for name in ("blue-0", "blue-1"):
            result = _check(redis_server.url, keys, name)
            assert result.returncode == 0, result.stderr
        result = _check(redis_server.url, keys, "green-0")
        assert result.returncode == 1 and "no live worker 'green-0'" in result.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)

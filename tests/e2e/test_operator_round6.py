"""An operator's round with the worker and the CLI, each defect found as a user meets it.

``wm_signals_up`` stayed 1 while the worker backed off from an unreachable Redis, so the
alerts built on it (``WmSignalsNoWorkerReading``, ``WmSignalsWorkerNotReading``) never
fired for the outage they describe. ``/readyz`` said ``ok`` while Redis was out of memory:
every readiness check is a read, which Redis still answers, while it refused every commit.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from signals.streams.client import connect
from signals.streams.keys import Keys
from tests.integration.test_ops import _http, _metrics, _ready, _spawn, _until
from workers.embedded import RedisServer, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_up_reads_zero_while_the_worker_cannot_reach_redis(tmp_path: Path, keys: Keys) -> None:
    """``wm_signals_up`` is 0 while the read loop backs off from a Redis that is gone, and
    1 again once it reads: the alerts on it fire for exactly that outage."""
    server = RedisServer(data_dir=str(tmp_path)).start()
    port = free_port()
    proc = _spawn(server.url, keys, "--metrics-port", str(port), "--consumer-name", "up-probe")

    async def up(value: float) -> bool:
        return (await _metrics(port))["wm_signals_up"] == value

    try:
        await _ready(proc, port)
        assert await up(1.0)
        await anyio.to_thread.run_sync(server.kill)
        await _until("wm_signals_up 0 while Redis is gone", lambda: up(0.0))
        await anyio.to_thread.run_sync(server.start)
        await _until("wm_signals_up 1 once the worker reads again", lambda: up(1.0))
    finally:
        proc.kill()
        proc.wait()
        server.stop()


async def test_readyz_fails_while_redis_is_out_of_memory(keys: Keys) -> None:
    """Past ``maxmemory`` Redis answers the readiness check's reads but refuses the commits
    (OOM): ``/readyz`` is 503 saying so, and 200 again once memory is freed."""
    server = RedisServer().start()
    admin = connect(server.url)
    port = free_port()
    proc = _spawn(server.url, keys, "--metrics-port", str(port), "--consumer-name", "oom-probe")

    async def unready() -> str | None:
        status, body = await _http(port, "/readyz")
        return body if status == 503 else None

    try:
        await _ready(proc, port)
        await admin.config_set("maxmemory", "1")  # below what the server already holds
        assert "refuses work" in await _until("/readyz 503 while Redis is out of memory", unready)
        await admin.config_set("maxmemory", "0")
        await _ready(proc, port)
    finally:
        proc.kill()
        proc.wait()
        await admin.aclose()
        server.stop()

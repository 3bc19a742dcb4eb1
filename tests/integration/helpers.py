"""Shared helpers for the Redis tests: run workers, wait for catch-up, check lane histories."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from signals.core.cachekey import js_trim
from signals.streams.client import Client, connect
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.replay import materialise, read_signals
from workers.engine.consumer import Consumer
from workers.runtime.settings import Settings
from workers.runtime.worker import run_worker

__all__ = (
    "check_lane", "lanes_of", "running_workers", "settings_for", "spawn_worker", "wait_caught_up", "wait_ready",
)


def settings_for(url: str, keys: Keys, **overrides: Any) -> Settings:
    """Worker settings for a test namespace (fast maintenance, short claims)."""
    values: dict[str, Any] = {
        "redis_url": url, "namespace": keys.namespace, "partitions": keys.partitions,
        "maintenance_interval_s": 0.2, "claim_idle_ms": 1000, "retain_signals": 100_000,
        "block_ms": 20,
    }
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def running_workers(url: str, keys: Keys, count: int = 1, *, crash: bool = False,
                          **overrides: Any) -> AsyncIterator[list[Consumer]]:
    """Run ``count`` in-process workers (each its own connection and consumer name).

    On exit they stop gracefully, or with ``crash`` are cancelled wherever they are
    (entries read but not committed stay pending, as after a SIGKILL).
    """
    stop = anyio.Event()
    consumers: list[Consumer] = []
    settings = settings_for(url, keys, **overrides)
    bound = None if settings.cluster else settings.max_reply_bytes  # as a worker process connects
    clients = [connect(url, cluster=settings.cluster, max_reply_bytes=bound) for _ in range(count)]
    async with anyio.create_task_group() as tg:
        for i, client in enumerate(clients):
            consumers.append(await tg.start(_worker, client, settings, f"w{i}", stop))
        try:
            yield consumers
        finally:
            if crash:
                tg.cancel_scope.cancel()
            stop.set()
    for client in clients:
        await client.aclose()


async def _worker(client: Client, settings: Settings, name: str, stop: anyio.Event, *, task_status: Any) -> None:
    await run_worker(client, settings, name=name, stop=stop, handle_signals=False, task_status=task_status)


async def lanes_of(redis: Client, keys: Keys) -> list[str]:
    """Every lane of the namespace."""
    out: list[str] = []
    for p in range(keys.partitions):
        out += sorted(await redis.smembers(keys.lanes(p)))
    return out


async def check_lane(redis: Client, keys: Keys, lane: str) -> list[Any]:
    """Assert a lane's invariants; returns its signals.

    Versions are 1, 2, 3... with no gap or repeat, write versions strictly increase (no
    write version is signalled twice), the chain rebuilds with matching cacheKeys, and
    the text after the last signal equals the stored document (trimmed).
    """
    history = await read_signals(redis, keys, lane)
    assert history, f"{lane}: no signals"
    assert history[0][1].mode == "snapshot", f"{lane}: stream does not start with a snapshot"
    rebuilt = list(materialise(history))
    write_versions = [s.write_version for _, s in history]
    assert write_versions == sorted(set(write_versions)), f"{lane}: write version signalled twice"
    data = await redis.hget(keys.doc(lane), "data")
    assert rebuilt[-1].value == js_trim(data), f"{lane}: final signal differs from the document"
    return [s for _, s in history]


def spawn_worker(url: str, keys: Keys, name: str, **flags: Any) -> subprocess.Popen[bytes]:
    """A worker in its own process (for SIGKILL tests)."""
    args = [sys.executable, "-m", "workers", "worker", "--redis-url", url, "--namespace", keys.namespace,
            "--partitions", str(keys.partitions), "--consumer-name", name]
    for flag, value in flags.items():
        args += ["--" + flag.replace("_", "-"), str(value)]
    env = {**os.environ, "WM_SIGNALS_MAINTENANCE_INTERVAL_S": "0.2", "WM_SIGNALS_CLAIM_IDLE_MS": "500",
           "WM_SIGNALS_RETAIN_SIGNALS": "100000", "WM_SIGNALS_LOG_LEVEL": "info", "WM_SIGNALS_LOG_FORMAT": "json"}
    log = tempfile.NamedTemporaryFile(prefix=f"wm-worker-{name}-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    proc.log_path = log.name  # type: ignore[attr-defined]
    return proc


async def wait_ready(proc: subprocess.Popen[bytes], limit_s: float = 30.0) -> None:
    """Wait until a spawned worker logged ``worker.ready`` (signal handlers installed)."""
    path = Path(proc.log_path)  # type: ignore[attr-defined]
    with anyio.fail_after(limit_s):
        while "worker.ready" not in (text := await anyio.to_thread.run_sync(path.read_text)):
            assert proc.poll() is None, f"worker exited with {proc.returncode}: {text[-500:]}"
            await anyio.sleep(0.05)

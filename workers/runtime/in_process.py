"""A worker inside the caller's own process, for examples, tests and small applications.

:func:`worker_in_process` runs one worker (the same engine as ``wm-signals worker``) as a
task of the caller's event loop for the duration of an ``async with`` block, on its own
connection, and stops it gracefully at the end of the block. A deployment runs
``wm-signals worker`` processes instead: they survive the application, scale out and
expose health and metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from workers.engine.consumer import Consumer
from workers.runtime.settings import Settings
from workers.runtime.worker import run_worker

__all__ = ("InProcessWorker", "worker_in_process")


@dataclass(frozen=True, slots=True)
class InProcessWorker:
    """A worker running in this process (see :func:`worker_in_process`).

    Attributes:
        keys: the namespace and partition count it serves.
        name: its consumer name (``inspect`` shows it).
    """

    keys: Keys
    name: str
    _consumer: Consumer

    async def caught_up(self, limit_s: float = 60.0) -> None:
        """Wait until every write made so far has been processed (its signal emitted).

        Raises:
            TimeoutError: not caught up within ``limit_s``.
        """
        await wait_caught_up(self._consumer.redis, self.keys, limit_s=limit_s)


@asynccontextmanager
async def worker_in_process(redis_url: str, *, namespace: str = "wm", partitions: int = 16,
                            name: str = "in-process", **settings: Any) -> AsyncIterator[InProcessWorker]:
    """Run one worker in this process for the block; it stops gracefully when the block ends.

    Args:
        redis_url: the Redis to serve (``redis://HOST:PORT/DB``).
        namespace: the namespace to serve (the writers' and agent loops' ``Keys``).
        partitions: its partition count.
        name: the worker's consumer name.
        **settings: any other worker setting, by its name in
            :class:`~workers.runtime.settings.Settings` (``policy="mastra"``, ``block_ms=20``).

    Raises:
        pydantic.ValidationError: a setting that is not one, or out of range.
        signals.errors.RedisUnavailableError: Redis cannot be reached.
    """
    config = Settings(redis_url=redis_url, namespace=namespace, partitions=partitions, **settings)
    redis = connect(redis_url, cluster=config.cluster, tls=config.tls(),
                    max_reply_bytes=None if config.cluster else config.max_reply_bytes)
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            consumer: Consumer = await tg.start(_run, redis, config, name, stop)
            try:
                yield InProcessWorker(config.keys(), name, consumer)
            finally:
                stop.set()
    finally:
        with anyio.move_on_after(2, shield=True):
            await redis.aclose()


async def _run(redis: Any, settings: Settings, name: str, stop: anyio.Event, *, task_status: Any) -> None:
    await run_worker(redis, settings, name=name, stop=stop, handle_signals=False, task_status=task_status)

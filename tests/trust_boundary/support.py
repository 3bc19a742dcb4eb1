"""A worker run in this process that closes its connection even when it crashes.

``tests.integration.helpers.running_workers`` closes its clients only after a clean stop;
a worker that dies (what these tests provoke) would leave its sockets to the garbage
collector, and with warnings as errors the ``ResourceWarning`` fails whichever test
happens to run next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from signals.streams.acl import ROLES
from signals.streams.client import connect
from signals.streams.keys import Keys
from tests.integration.helpers import settings_for
from workers.engine.consumer import Consumer
from workers.runtime.worker import run_worker

__all__ = ("PASSWORDS", "worker_in_process")

#: Each role's password in the test namespaces' ACL users (the ``as_role`` fixture).
PASSWORDS = {role: f"{role}-pw" for role in ROLES}


@asynccontextmanager
async def worker_in_process(url: str, keys: Keys, name: str = "w0", **overrides: Any) -> AsyncIterator[Consumer]:
    """Run one worker (the supervisor's task group) until the block ends; any exception
    the worker lets through ends the block and is raised from it."""
    client = connect(url)
    stop = anyio.Event()
    settings = settings_for(url, keys, **overrides)

    async def worker(*, task_status: Any) -> None:
        await run_worker(client, settings, name=name, stop=stop, handle_signals=False, task_status=task_status)

    try:
        async with anyio.create_task_group() as tg:
            consumer = await tg.start(worker)
            try:
                yield consumer
            finally:
                stop.set()
    finally:
        with anyio.move_on_after(5, shield=True):
            await client.aclose()

"""What every framework example does around its loop: the Redis it runs on, and what it prints last.

Not part of the library: the examples' own scaffolding (the library prints nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import anyio

from signals.agent import AgentWorkingMemory
from workers import RedisServer, configure_logging


def run_example(main: Callable[[str], Awaitable[None]]) -> None:
    """Run ``main(redis_url)`` on the URL given as the first argument, else on an embedded Redis."""
    configure_logging("console", "warning")
    if len(sys.argv) > 1:
        anyio.run(main, sys.argv[1])
    else:
        with RedisServer() as server:
            anyio.run(main, server.url)


async def print_rebuilt(memory: AgentWorkingMemory) -> None:
    """Print what the delivery log says the model could rebuild at its last call (nothing without a log)."""
    step = memory.last_step
    view = None
    if memory.log is not None and memory.thread_id is not None:
        view = await memory.log.view_at(memory.thread_id, step, window=memory.window.window_id)
    if view is not None:
        print(f"delivery log: at call {step} the model could rebuild version {view.version}:")
        print(view.text)

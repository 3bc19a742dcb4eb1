"""The library logs nothing unless the application configures logging (finding 11)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.redis]

_PROGRAM = """
import asyncio, sys
from signals import WorkingMemoryStore, connect
from signals.streams.keys import Keys

async def main():
    redis = connect(sys.argv[1])
    store = WorkingMemoryStore(redis, keys=Keys(sys.argv[2], 4))
    await store.replace("quiet", "# Quiet\\n- says nothing")
    await store.replace("quiet", "# Quiet\\n- still nothing")
    await redis.aclose()
    if len(sys.argv) > 3:
        import logging
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        await main_again(sys.argv[1], sys.argv[2])

async def main_again(url, ns):
    redis = connect(url)
    await WorkingMemoryStore(redis, keys=Keys(ns, 4)).replace("quiet", "# Quiet\\n- now logged")
    await redis.aclose()

asyncio.run(main())
"""


def test_library_prints_nothing_with_logging_unconfigured(redis_server: RedisServer) -> None:
    """A write with neither structlog nor logging configured leaves stdout and stderr empty
    (it printed a debug line to stdout on every write: fatal to a stdio protocol)."""
    run = subprocess.run([sys.executable, "-c", _PROGRAM, redis_server.url, "logq"], capture_output=True,
                         text=True, timeout=60, check=True)
    assert (run.stdout, run.stderr) == ("", "")


def test_library_logs_once_the_application_configures_logging(redis_server: RedisServer) -> None:
    """``logging.basicConfig`` in the application shows the library's events (on stderr here)."""
    run = subprocess.run([sys.executable, "-c", _PROGRAM, redis_server.url, "logr", "configure"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout == ""
    assert "wm.written" in run.stderr

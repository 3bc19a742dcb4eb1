"""Console logs escape control and bidi characters in every field (issue 30, finding 8).

A resource id may hold U+202E (RIGHT-TO-LEFT OVERRIDE), U+009B (CSI), U+200B (zero width
space) or ESC; a worker's console log printed them raw to the operator's terminal. Each
test reads the bytes a real process wrote to its stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from signals.streams.client import connect
from signals.streams.keys import Keys, lane_id
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import wait_caught_up
from workers.runtime.embedded import RedisServer

HOSTILE = "u\u202egnp.exe\u009b31m\u200b\x1b[2J\x07\r\nfake 2026 [info] line\u2066\u2028"
RAW = ["\u202e", "\u009b", "\u200b", "\x1b[2J", "\x07", "\r", "\u2066", "\u2028"]


def _raw_found(text: str) -> list[str]:
    """The hostile characters found raw (the renderer's own colour sequences aside)."""
    return [repr(c) for c in RAW if c in text]


def test_every_field_of_a_console_line_is_escaped() -> None:
    """Event name, key, string value, value inside a list, an exception's message: each
    hostile character arrives as its escape, never raw; a line stays one line."""
    script = textwrap.dedent(f"""
        import structlog
        from workers.runtime.logging import configure_logging
        configure_logging("console", "info")
        log = structlog.get_logger("t")
        hostile = {HOSTILE!r}
        log.warning("event " + hostile, lane="r:" + hostile, items=[hostile], **{{"key" + hostile: 1}})
        try:
            raise ValueError(hostile)
        except ValueError:
            log.exception("failed", lane=hostile)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, check=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    text = re.sub(r"\x1b\[[0-9;]*m", "", done.stderr.decode("utf-8"))  # the renderer's own colours
    assert _raw_found(text) == []
    assert "\\u202e" in text and "\\x9b" in text and "\\u200b" in text and "\\x1b" in text
    first = text.splitlines()[0]
    assert "event u\\u202egnp.exe" in first and "lane='r:u\\u202egnp.exe\\x9b31m" in first  # quoted: it has spaces
    assert "fake 2026" in first and "keyu\\u202egnp" in first  # one line, the key escaped too
    assert "Traceback" in text and "ValueError: u\\u202egnp" in text  # the traceback keeps its lines


def test_a_workers_console_log_escapes_a_hostile_resource_id(tmp_path: Path) -> None:
    """A worker logging in console format repairs a lane whose id holds bidi and control
    characters (its tracking hash broken by hand): the warning names the lane escaped."""
    keys = Keys("tlog", 2)
    resource = "u\u202egnp.exe\u009b31m\u200bx"
    lane = lane_id("resource", resource, None)
    with RedisServer() as server:
        log_path = tmp_path / "worker.log"
        env = {**os.environ, "WM_SIGNALS_LOG_FORMAT": "console", "WM_SIGNALS_LOG_LEVEL": "info",
               "WM_SIGNALS_MAINTENANCE_INTERVAL_S": "0.2"}
        with log_path.open("wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                     "--namespace", keys.namespace, "--partitions", "2"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            async def scenario() -> None:
                redis = connect(server.url)
                try:
                    store = WorkingMemoryStore(redis, keys=keys)
                    await store.replace(resource, "# Notes\n- one")
                    with anyio.fail_after(30):
                        await wait_caught_up(redis, keys)
                    await redis.hset(keys.track(lane), "v", "junk")
                    await store.replace(resource, "# Notes\n- two")
                    with anyio.fail_after(30):
                        while "worker.lane_repair" not in log_path.read_text("utf-8", "replace"):
                            await anyio.sleep(0.1)
                finally:
                    await redis.aclose()

            anyio.run(scenario)
        finally:
            proc.terminate()
            proc.wait(30)
        text = log_path.read_bytes().decode("utf-8")
        assert "worker.lane_repair" in text
        assert _raw_found(text) == []
        assert "r:u\\u202egnp.exe\\x9b31m\\u200bx" in text


@pytest.mark.parametrize("fmt", ["json"])
def test_json_lines_are_ascii(fmt: str) -> None:
    """JSON lines escape every character outside ASCII (the encoder's default)."""
    script = textwrap.dedent(f"""
        import structlog
        from workers.runtime.logging import configure_logging
        configure_logging({fmt!r}, "info")
        structlog.get_logger("t").warning("e", lane={HOSTILE!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, check=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.stderr.isascii() and done.stderr.count(b"\n") == 1


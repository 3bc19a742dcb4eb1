"""Commands run with a standard stream closed (issue 30, finding 7): cron jobs and daemons.

Each command runs as a real process whose descriptor is really closed (``sh -c 'cmd >&-'``):
a ``write`` with standard output closed stored its document and then aborted in uvloop
(exit 134), so a caller retried and wrote twice; ``get`` and ``subscribe`` aborted too;
with standard error closed every command exited 1 before doing anything; with standard
input closed ``--file -`` was "unexpected error (AttributeError)"; a worker with standard
output closed ended a graceful stop with exit 1. Now the streams are reopened on
``/dev/null`` at start and the exit code says whether the work was done.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from signals.streams.keys import GROUP, Keys, lane_id
from workers.runtime.embedded import RedisServer

KEYS = Keys("tclosed", 2)
LANE = lane_id("resource", "u", None)
CLI = [sys.executable, "-m", "workers"]


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def db(server: RedisServer) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis(port=server.port, decode_responses=True)
    client.flushall()
    yield client
    client.close()


def _sh(args: list[str], redirect: str, *, stdin: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run ``args`` under ``sh -c`` with ``redirect`` (``>&-``, ``2>&-``, ``<&-``) applied."""
    command = " ".join(shlex.quote(a) for a in args) + " " + redirect
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "WM_SIGNALS_NAMESPACE": KEYS.namespace,
           "WM_SIGNALS_PARTITIONS": str(KEYS.partitions)}
    return subprocess.run(["sh", "-c", command], input=stdin.encode() if stdin is not None else None,
                          capture_output=True, timeout=timeout, check=False, env=env)


def _url(server: RedisServer) -> list[str]:
    return ["--redis-url", server.url]


@pytest.mark.parametrize("redirect", [">&-", "2>&-", ">&- 2>&-", "<&- >&- 2>&-"])
def test_write_with_a_stream_closed_stores_once_and_exits_zero(server: RedisServer, db: redis_sync.Redis,
                                                                redirect: str) -> None:
    """The document is stored once (version 1) and the command exits 0."""
    done = _sh([*CLI, "write", *_url(server), "--resource", "u", "--markdown", "# Closed"], redirect)
    assert done.returncode == 0, done.stderr
    assert db.hget(KEYS.doc(LANE), "version") == "1"
    assert db.hget(KEYS.doc(LANE), "data") == "# Closed"


def test_write_whose_reader_is_gone_exits_zero(server: RedisServer, db: redis_sync.Redis) -> None:
    """Standard output is a pipe nobody reads (``| :``): stored once, exit 0 (the work was
    done: a caller that retried on 141 wrote twice)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "WM_SIGNALS_NAMESPACE": KEYS.namespace,
           "WM_SIGNALS_PARTITIONS": str(KEYS.partitions)}
    command = " ".join(shlex.quote(a) for a in [*CLI, "write", *_url(server), "--resource", "u", "--markdown", "# P"])
    # the reader closes its end at once; the command needs far longer to start than that
    done = subprocess.run(["bash", "-c", f"{command} | (exec 0<&-; true); exit ${{PIPESTATUS[0]}}"],
                          capture_output=True, timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert db.hget(KEYS.doc(LANE), "version") == "1"


@pytest.mark.parametrize("redirect", [">&-", "2>&-", "<&- >&- 2>&-"])
def test_get_and_subscribe_with_a_stream_closed_exit_zero(server: RedisServer, db: redis_sync.Redis,
                                                           redirect: str) -> None:
    """``get`` and ``subscribe --count 1`` read a stored lane with a stream closed: exit 0."""
    assert _sh([*CLI, "write", *_url(server), "--resource", "u", "--markdown", "# G"], "").returncode == 0
    worker = subprocess.Popen([*CLI, "worker", *_url(server), "--namespace", KEYS.namespace, "--partitions", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 30
        while not db.exists(KEYS.signals(LANE)):
            assert time.monotonic() < deadline, "no worker signalled the lane"
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    got = _sh([*CLI, "get", *_url(server), "--resource", "u"], redirect)
    assert got.returncode == 0, got.stderr
    sub = _sh([*CLI, "subscribe", *_url(server), "--resource", "u", "--count", "1", "--timeout", "20"], redirect)
    assert sub.returncode == 0, sub.stderr


def test_file_dash_with_stdin_closed_is_a_clear_error(server: RedisServer, db: redis_sync.Redis) -> None:
    """``--file -`` with standard input closed: exit 2 naming it, nothing stored."""
    done = _sh([*CLI, "write", *_url(server), "--resource", "u", "--file", "-"], "<&-")
    assert done.returncode == 2
    assert b"standard input is closed" in done.stderr
    assert not db.exists(KEYS.doc(LANE))


def test_a_worker_with_stdout_closed_stops_gracefully_with_zero(server: RedisServer, db: redis_sync.Redis,
                                                                tmp_path: Path) -> None:
    """A worker started with standard output closed (its log on standard error) signals a
    write, then stops on SIGTERM with exit 0, its consumer gone from the groups."""
    log = tmp_path / "worker.log"
    command = " ".join(shlex.quote(a) for a in [*CLI, "worker", *_url(server)])
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "WM_SIGNALS_NAMESPACE": KEYS.namespace,
           "WM_SIGNALS_PARTITIONS": str(KEYS.partitions), "WM_SIGNALS_LOG_FORMAT": "json"}
    with log.open("wb") as err:
        proc = subprocess.Popen(["sh", "-c", f"exec {command} >&-"], stderr=err, env=env)
    try:
        deadline = time.monotonic() + 30
        while b"worker.ready" not in log.read_bytes():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _sh([*CLI, "write", *_url(server), "--resource", "u", "--markdown", "# W"], ">&-").returncode == 0
        while not db.exists(KEYS.signals(LANE)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
        for stream in KEYS.all_writes():
            assert not db.xinfo_consumers(stream, GROUP)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("args", [["simulate"], ["replay", "--file", "-"]])
def test_other_readers_of_stdin_name_a_closed_stdin(args: list[str]) -> None:
    """``simulate`` (its scenario on stdin) and ``replay --file -`` with stdin closed: exit 2, named."""
    done = _sh([*CLI, *args], "<&-")
    assert done.returncode == 2
    assert b"standard input is closed" in done.stderr

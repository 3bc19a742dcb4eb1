"""Hostile Redis contents at the CLI: keys of the wrong type must be exit 2 with one stderr line.

Each test corrupts one key of a fresh namespace the way a hostile writer or a careless
operator could, then runs a read command as a user runs it (``python -m workers ...``).
The promise (README "Commands"): malformed data read from Redis is bad input, exit 2, one
line on stderr naming what is wrong, never a traceback, never a hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import pytest
import redis as redis_sync

from signals.core.codec import encode_json
from signals.core.models import DeadLetter
from signals.streams.keys import Keys
from workers.runtime.embedded import RedisServer

ROOT = Path(__file__).parents[2]
PARTITIONS = 16


def wm(url: str, ns: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", ns],
                          cwd=ROOT, capture_output=True, timeout=timeout, check=False, env=dict(os.environ))
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                       proc.stderr.decode("utf-8", "replace"))


def assert_bad_input(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("wm-signals: "), lines[0]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)


@pytest.fixture
def setup(redis_server: RedisServer):
    """A fresh namespace holding one resource lane and one thread lane, and a sync client."""
    ns = "h" + uuid.uuid4().hex[:10]
    url = redis_server.url
    for args in (("write", "--resource", "alice", "--markdown", "# Alice\n- tea"),
                 ("write", "--resource", "alice", "--thread", "t1", "--scope", "thread", "--markdown", "hi")):
        proc = wm(url, ns, *args)
        assert proc.returncode == 0, proc.stderr
    client = redis_sync.Redis.from_url(url)
    yield url, ns, Keys(namespace=ns, partitions=PARTITIONS), client
    client.close()


def part(lane: str) -> int:
    return zlib.crc32(lane.encode()) % PARTITIONS


def clobber(client: redis_sync.Redis, key: str) -> None:
    client.delete(key)
    client.set(key, b"\xff junk")


def test_inspect_lanes_key_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    clobber(client, keys.lanes(part("r:alice")))
    assert_bad_input(wm(url, ns, "inspect"))


def test_inspect_writes_key_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    clobber(client, keys.writes(part("r:alice")))
    assert_bad_input(wm(url, ns, "inspect", "--json"))


def test_inspect_dlq_key_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    client.hset(keys.dead_letters(3), "x", b"\xff")
    assert_bad_input(wm(url, ns, "inspect"))


def test_dlq_list_dlq_key_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    clobber(client, keys.dead_letters(5))
    assert_bad_input(wm(url, ns, "dlq", "list"))


def test_dlq_show_dlq_key_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    clobber(client, keys.dead_letters(0))
    assert_bad_input(wm(url, ns, "dlq", "show", "5-0"))


def test_dlq_requeue_writes_key_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    p = part("r:alice")
    letter = DeadLetter(stream=keys.writes(p), entry_id="1-0", fields={"e": "{}"}, error="boom", attempts=3)
    client.xadd(keys.dead_letters(p), {"e": encode_json(letter)}, id="5-0")
    clobber(client, keys.writes(p))
    assert_bad_input(wm(url, ns, "dlq", "requeue", "5-0"))


def test_write_thread_record_wrong_type(setup) -> None:
    url, ns, keys, client = setup
    clobber(client, keys.thread("t1"))
    assert_bad_input(wm(url, ns, "write", "--thread", "t1", "--markdown", "y"))


def test_subscribe_signal_key_wrong_type_is_bad_input(setup) -> None:
    """It waited forever for a repair (with --count), logging once a second."""
    url, ns, keys, client = setup
    clobber(client, keys.signals("r:alice"))
    try:
        proc = wm(url, ns, "subscribe", "--resource", "alice", "--from-start", "--count", "1", timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("subscribe hung for 20 s on a signal key of the wrong type")
    assert_bad_input(proc)


def test_dlq_show_entry_missing_field(setup) -> None:
    url, ns, keys, client = setup
    client.xadd(keys.dead_letters(part("r:alice")), {"x": b"\xff"}, id="5-1")
    assert_bad_input(wm(url, ns, "dlq", "show", "5-1"))


def test_dlq_drop_entry_missing_field(setup) -> None:
    """Junk in a dead-letter stream is what an operator drops: it used to be unreadable and
    undroppable (KeyError, exit 1)."""
    url, ns, keys, client = setup
    client.xadd(keys.dead_letters(part("r:alice")), {"x": b"\xff"}, id="5-1")
    assert wm(url, ns, "dlq", "drop", "5-1").returncode == 0
    assert client.xlen(keys.dead_letters(part("r:alice"))) == 0


def test_dlq_show_id_not_a_stream_id(setup) -> None:
    url, ns, _, _ = setup
    assert_bad_input(wm(url, ns, "dlq", "show", "abc"))


def test_dlq_requeue_empty_fields(setup) -> None:
    url, ns, keys, client = setup
    p = part("r:alice")
    letter = DeadLetter(stream=keys.writes(p), entry_id="zz", fields={}, error="e", attempts=-1)
    client.xadd(keys.dead_letters(p), {"e": encode_json(letter)}, id="5-4")
    assert_bad_input(wm(url, ns, "dlq", "requeue", "5-4"))

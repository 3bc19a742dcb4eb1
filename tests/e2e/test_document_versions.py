"""Document versions (what ``write`` prints) and signal versions (replay's ``vN``) are told
apart in every message, and ``replay --at-write`` takes a document version."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from workers import worker_in_process
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).parents[2]


def _wm(url: str, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_SIGNALS_")}
    return subprocess.run([sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", namespace,
                           "--partitions", "4"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
                          env=env)


async def test_replay_at_a_document_version(redis_server: RedisServer) -> None:
    """Three writes, the third changing nothing: two signals. ``--at-write 2`` is the second
    document; ``--at 3`` names signal versions and points at ``--at-write``; ``--at-write 3``
    says document version 3 has no signal of its own and shows document version 2."""
    url, namespace = redis_server.url, "dv" + uuid.uuid4().hex[:8]
    first, second = "# Ada\n- likes tea", "# Ada\n- likes tea\n- lives in Paris"
    async with worker_in_process(url, namespace=namespace, partitions=4, block_ms=20) as worker:
        for text in (first, second, second):
            written = await anyio.to_thread.run_sync(lambda t=text: _wm(url, namespace, "write", "--resource", "ada",
                                                                        "--markdown", t))
            assert written.returncode == 0, written.stderr
            await worker.caught_up()
    assert written.stdout == "3\n"  # the document version

    replay = _wm(url, namespace, "replay", "--resource", "ada")
    assert replay.returncode == 0, replay.stderr
    assert "document v1" in replay.stdout and "document v2" in replay.stdout and "document v3" not in replay.stdout

    at_write = _wm(url, namespace, "replay", "--resource", "ada", "--at-write", "2")
    assert (at_write.returncode, at_write.stdout, at_write.stderr) == (0, second + "\n", "")

    at_signal = _wm(url, namespace, "replay", "--resource", "ada", "--at", "3")
    assert at_signal.returncode == 2
    assert "signal version 3 is not in the retained history (signal versions 1..2" in at_signal.stderr
    assert "--at-write" in at_signal.stderr

    unsignalled = _wm(url, namespace, "replay", "--resource", "ada", "--at-write", "3")
    assert (unsignalled.returncode, unsignalled.stdout) == (0, second + "\n"), unsignalled.stderr
    assert "document version 3 has no signal of its own" in unsignalled.stderr
    assert "document version 2, signal version 2" in unsignalled.stderr

    ahead = _wm(url, namespace, "replay", "--resource", "ada", "--at-write", "9")
    assert ahead.returncode == 2 and "document version 9 has no signal yet" in ahead.stderr

    conflict = _wm(url, namespace, "write", "--resource", "ada", "--markdown", "x", "--if-version", "1")
    assert conflict.returncode == 3 and "is at document version 3, expected 1" in conflict.stderr

"""``wm-signals subscribe`` on a namespace no worker serves says so, once, and a
``--timeout`` that received nothing says so and why (stderr; stdout stays the signals')."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]


def _subscribe(url: str, namespace: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_SIGNALS_")}
    return subprocess.run([sys.executable, "-m", "workers", "subscribe", "--resource", "zz", "--redis-url", url,
                           "--namespace", namespace, "--timeout", "2", *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False, env=env)


def test_subscribe_without_a_worker_warns_and_explains_its_empty_timeout(redis_server: RedisServer) -> None:
    """No worker ever ran: one warning naming the namespace, then the timeout's note with the reason; exit 0."""
    namespace = "sub" + uuid.uuid4().hex[:8]
    proc = _subscribe(redis_server.url, namespace)
    assert (proc.returncode, proc.stdout) == (0, "")
    lines = proc.stderr.splitlines()
    warnings = [line for line in lines if "subscribe.no_worker" in line]
    assert len(warnings) == 1 and namespace in warnings[0]
    [note] = [line for line in lines if "--timeout 2s expired" in line]
    assert "with no signal for lane 'r:zz'" in note and f"no worker has run in namespace {namespace!r}" in note


def test_subscribe_count_names_the_missing_worker(redis_server: RedisServer) -> None:
    """``--count`` not reached (exit 1): the note says no worker serves the namespace."""
    namespace = "sub" + uuid.uuid4().hex[:8]
    proc = _subscribe(redis_server.url, namespace, "--count", "1")
    assert proc.returncode == 1
    assert "expired after 0 of 1 signals (no worker has run in namespace" in proc.stderr

"""What an operator reads: an empty ``dlq list`` says so (and ``--json`` has the same
facts), and ``inspect``'s table keeps every header whole in 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]


def _wm(url: str, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WM_SIGNALS_")}, "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", namespace],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env)


def test_an_empty_dead_letter_list_says_so(redis_server: RedisServer) -> None:
    """``dlq list`` with none: one line saying so, exit 0; ``--json``: an empty list."""
    namespace = "op" + uuid.uuid4().hex[:8]
    proc = _wm(redis_server.url, namespace, "dlq", "list")
    assert (proc.returncode, proc.stdout) == (0, f"no dead letters in namespace {namespace!r}\n"), proc.stderr
    proc = _wm(redis_server.url, namespace, "dlq", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"namespace": namespace, "deadLetters": [], "notListed": {}}


def test_inspect_headers_are_whole_in_80_columns(redis_server: RedisServer) -> None:
    """No header is cut (``consumers:pending/i…``): the consumers' format is said under the table."""
    namespace = "op" + uuid.uuid4().hex[:8]
    write = _wm(redis_server.url, namespace, "write", "--resource", "ada", "--markdown", "# hi")
    assert write.returncode == 0, write.stderr
    proc = _wm(redis_server.url, namespace, "inspect")
    assert proc.returncode == 0, proc.stderr
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    [header] = [line for line in proc.stdout.splitlines() if "part" in line and "stream" in line]
    assert "…" not in header
    for name in ("part", "stream", "pending", "lagging", "lanes", "bad", "dlq", "consumers"):
        assert name in header
    assert "consumers: name:pending/idle" in proc.stdout

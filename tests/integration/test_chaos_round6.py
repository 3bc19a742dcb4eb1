"""Chaos round 6: combinations the other fault tests miss, and what the runs found."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()


@pytest.mark.parametrize("extra", [[], ["--count", "2"], ["--from-start"]])
def test_subscribe_timeout_bounds_connecting_too(silent_server: str, extra: list[str]) -> None:
    """``subscribe --timeout`` bounds the whole command: against a server that accepts and
    never answers, the namespace check and the stream probe ran before the timeout began,
    so ``--timeout 1`` waited for the client's own read timeout (about 5 s) and reported
    that instead. It now ends at its own timeout, exit 1 (the lane was never reached: not
    an empty tail's exit 0), saying so in one line."""
    args = [sys.executable, "-m", "workers", "subscribe", "--redis-url", silent_server, "--resource", "u",
            "--timeout", "1", *extra]
    done = subprocess.run(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          timeout=120, check=False)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert done.stdout == b""
    assert len(err.splitlines()) == 1, err
    assert "--timeout 1s expired before Redis at redis://127.0.0.1:" in err, err
    assert "Timeout reading" not in err, err

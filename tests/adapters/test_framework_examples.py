"""The PydanticAI, LangChain and ADK examples run as a user runs them, offline, and print what the model received."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]
FINAL = "- **Goals**: finish the notes on the engine"


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WM_SIGNALS_REDIS_URL"}
    # keys in the environment must not matter: the examples remove them and refuse the network
    env.update({"OPENAI_API_KEY": "sk-not-used", "GOOGLE_API_KEY": "not-used", "LANGSMITH_TRACING": "true"})
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False, env=env)


@pytest.mark.parametrize("example", ["pydantic_ai_loop.py", "langchain_loop.py", "adk_loop.py"])
def test_example_runs_offline(example: str, redis_server: RedisServer) -> None:
    """Each example delivers a snapshot, a delta and a re-injected snapshot, and rebuilds the final memory."""
    proc = _run([f"examples/{example}", redis_server.url])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert '<working-memory format="markdown" scope="resource"># User Information' in out
    assert 'patch="unified-diff">' in out
    assert out.count("- **Location**: Paris\n") >= 2  # the Paris version was delivered again after trimming
    assert "the model could rebuild version 3:" in out and out.rstrip().endswith(FINAL)
    assert "Traceback" not in proc.stderr


def test_example_starts_an_embedded_redis() -> None:
    """With no URL an example starts its own redis-server (and stops it)."""
    proc = _run(["examples/pydantic_ai_loop.py"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith(FINAL)


def test_examples_refuse_the_network() -> None:
    """The examples' offline guard refuses any connection or name lookup that is not loopback."""
    code = ("import socket, sys; sys.path.insert(0, 'examples'); import _offline\n"
            "for target in (lambda: socket.socket().connect(('192.0.2.1', 443)),\n"
            "               lambda: socket.getaddrinfo('generativelanguage.googleapis.com', 443)):\n"
            "    try:\n        target()\n    except RuntimeError as e:\n        print(e)\n")
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stderr
    assert "refused a connection to ('192.0.2.1', 443)" in proc.stdout
    assert "refused a name lookup of 'generativelanguage.googleapis.com'" in proc.stdout

"""The framework examples run as a user runs them: offline, printing what the model received."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]


def _run(script: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, script, url], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False, env=os.environ.copy())


@pytest.mark.parametrize("script", ["examples/anthropic_loop.py", "examples/openai_agents_loop.py"])
def test_framework_example_runs(redis_server: RedisServer, script: str) -> None:
    """The example's model receives the snapshot, the loop's trimming re-injects it, the memory ends updated."""
    proc = _run(script, redis_server.url)
    assert proc.returncode == 0, proc.stderr
    assert "model received" in proc.stdout and "working memory: ['<working-memory" in proc.stdout
    assert "snapshot (bootstrap)" in proc.stdout and "(reinject)" in proc.stdout
    assert proc.stdout.rstrip().endswith("- **City**: Paris")

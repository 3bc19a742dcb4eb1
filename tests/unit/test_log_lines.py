"""The worker's JSON log lines stay whole when several processes share one stderr pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
LINES = 3000
CHILD = (
    "from workers.runtime.logging import configure_logging; import structlog; configure_logging('json', 'info'); "
    f"log = structlog.get_logger(); [log.info('worker.tick', n=n, pad='x' * 200) for n in range({LINES})]"
)


def test_log_lines_of_processes_sharing_a_pipe_do_not_interleave() -> None:
    """Two processes log to one pipe with PYTHONUNBUFFERED=1 (as container images set it):
    every line is one JSON object (print() wrote the newline apart, and lines ran together)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    read, write = os.pipe()
    children = [subprocess.Popen([sys.executable, "-c", CHILD], stderr=write, env=env, cwd=ROOT) for _ in range(2)]
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        output = pipe.read().decode()
    assert [child.wait(120) for child in children] == [0, 0]
    lines = output.splitlines()
    assert len(lines) == 2 * LINES
    for line in lines:
        assert json.loads(line)["event"] == "worker.tick", line[:200]

"""The README's quickstart runs as written: a worker (step 1), a write from application
code (step 2), and an agent loop (step 3) that receives a snapshot, then a delta, then a
re-injected snapshot.

The steps are the README's three blocks marked ``<!-- test: quickstart -->``, run as they
are against a private redis-server: the only change is the Redis URL
(``redis://127.0.0.1:6379/0`` becomes the server's, see tests/docs/runner.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from signals import Keys, connect, lane_id, read_signals
from tests.docs import runner
from tests.docs.codeblocks import ROOT, Block, blocks
from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis


def _steps() -> list[Block]:
    steps = [b for b in blocks(ROOT / "README.md") if b.mark == "quickstart"]
    assert [b.lang for b in steps] == ["sh", "python", "python"], [b.where for b in steps]
    return steps


async def _signalled(url: str, version: int) -> None:
    """Wait until the worker has signalled the lane's document ``version``."""
    redis = connect(url)
    try:
        with anyio.fail_after(20):
            while not any((s.write_version or 0) >= version for _, s in await read_signals(redis, Keys(), lane_id(
                    "resource", "ada", None))):
                await anyio.sleep(0.05)
    finally:
        await redis.aclose()


def _worker_started(log: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while b"worker.ready" not in log.read_bytes():
        assert proc.poll() is None, f"step 1 exited with {proc.returncode}: {log.read_text()[-800:]}"
        assert time.monotonic() < deadline, "step 1's worker was not ready within 30 s"
        time.sleep(0.05)


def test_readme_quickstart_runs_as_written() -> None:
    """Worker, write, snapshot, delta, re-injection."""
    worker_step, write_step, agent_step = _steps()
    with RedisServer() as server, runner.temp_folder() as tmp:
        folder = Path(tmp)
        env = runner.environment(server.url, runner.cli_shim(folder))
        log = folder / "worker.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(["bash", "-eu", "-c", runner.source(worker_step, server.url)], cwd=folder,
                                    env={**env, "WM_SIGNALS_LOG_LEVEL": "info"}, stdout=subprocess.DEVNULL,
                                    stderr=out, start_new_session=True)
        try:
            _worker_started(log, proc)  # step 1: a worker serves the namespace

            wrote = runner.run(write_step, server.url, env, folder)  # step 2: a write from app code
            assert wrote.stdout.strip() == "stored document version 1", wrote.stdout
            anyio.run(_signalled, server.url, 1)  # what a person does between steps: a moment passes

            seen = runner.run(agent_step, server.url, env, folder).stdout  # step 3: the agent loop
            assert proc.poll() is None, "the worker stopped during the quickstart"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    lines = [line.strip() for line in seen.splitlines()]
    assert lines[:4] == ["model call 1", "add snapshot of version 1 (bootstrap)",
                         "model call 2", "add delta of version 2 (new)"], seen
    assert lines[4] == "model call 3", seen
    assert re.fullmatch(r"drop wm:r:ada:v2:\S+", lines[5]), seen  # the delta whose snapshot is gone
    assert lines[6:] == ["add snapshot of version 2 (reinject)"], seen
    assert proc.returncode == 0, f"the worker did not stop cleanly on SIGTERM: {log.read_text()[-800:]}"

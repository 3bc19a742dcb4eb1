"""Runs the code blocks of one page against a private redis-server (and a worker when a
block asks for one), in the page's order, sharing one working folder.

What a block runs against: the literal URL ``redis://127.0.0.1:6379/0`` in a block is
replaced by the page's own server's URL (and asserted gone, so that no block reaches a
server on the default port), ``WM_SIGNALS_REDIS_URL`` is set to it, and ``wm-signals`` on
PATH runs this checkout's CLI (``python -m workers``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.docs.codeblocks import ROOT, Block

DEFAULT_URL = "redis://127.0.0.1:6379/0"
BLOCK_TIMEOUT_S = 60


def environment(url: str, bin_dir: Path) -> dict[str, str]:
    """The environment of every block and of the worker: this checkout's code, the page's
    Redis, quiet logs."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("WM_SIGNALS_")}
    env.update(PYTHONPATH=str(ROOT), WM_SIGNALS_REDIS_URL=url, WM_SIGNALS_LOG_LEVEL="warning",
               WM_SIGNALS_LOG_FORMAT="json", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    return env


def cli_shim(folder: Path) -> Path:
    """A folder holding a ``wm-signals`` that runs this checkout's CLI with this interpreter."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "wm-signals"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m workers "$@"\n')
    shim.chmod(0o755)
    return bin_dir


@contextmanager
def worker(env: dict[str, str], folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process on the page's Redis, ready (it logged ``worker.ready``) when yielded."""
    log_path = folder / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "workers", "worker"], cwd=folder, stdout=subprocess.DEVNULL,
                                stderr=log, env={**env, "WM_SIGNALS_LOG_LEVEL": "info"})
    try:
        deadline = time.monotonic() + 30
        while b"worker.ready" not in log_path.read_bytes():
            assert proc.poll() is None, f"the worker exited with {proc.returncode}: {log_path.read_text()[-800:]}"
            assert time.monotonic() < deadline, "the worker was not ready within 30 s"
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def source(block: Block, url: str) -> str:
    """The block's text, pointed at the page's Redis."""
    text = block.text.replace(DEFAULT_URL, url)
    assert "127.0.0.1:6379" not in text, f"{block.where}: names a Redis on the default port in a form not replaced"
    return text


#: Runs the Python blocks given as file names one after the other in one interpreter, each
#: as ``__main__`` with fresh globals (one interpreter start for a run of blocks: starting
#: one per block would take most of the docs tests' time).
_DRIVER = """
import runpy, sys
for path in sys.argv[1:]:
    print(f"--- {path}", file=sys.stderr, flush=True)
    runpy.run_path(path, run_name="__main__")
"""


def run_python(run: list[Block], url: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    """Run consecutive Python blocks in one interpreter, in order; fails naming the block
    that failed."""
    paths = []
    for block in run:
        script = folder / f"{block.path.stem}_{block.line}.py"
        script.write_text(source(block, url))
        paths.append(str(script))
    done = subprocess.run([sys.executable, "-c", _DRIVER, *paths], env=env, cwd=folder, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S * len(run), check=False)
    if done.returncode != 0:
        started = [line for line in done.stderr.splitlines() if line.startswith("--- ")]
        failed = run[len(started) - 1] if started else run[0]
        raise AssertionError(f"{failed.where} (python) failed\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n"
                             f"{done.stderr[-3000:]}")
    return done


def run(block: Block, url: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    """Run one block; fails the test, naming the block, when it does not succeed."""
    if block.lang == "json":
        json.loads(block.text)
        return subprocess.CompletedProcess([], 0, "", "")
    if block.lang == "python":
        return run_python([block], url, env, folder)
    if block.lang == "sh":
        argv = ["bash", "-eu", "-o", "pipefail", "-c", source(block, url)]
    else:
        raise AssertionError(f"{block.where}: a {block.lang or 'plain'} block is not run: mark it "
                             "<!-- test: fragment --> (see docs/contributing.md)")
    done = subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, (f"{block.where} ({block.lang}) exited {done.returncode}\n--- stdout\n"
                                  f"{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-2000:]}")
    return done


def temp_folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="wm-docs-")

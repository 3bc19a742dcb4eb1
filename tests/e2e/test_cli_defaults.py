"""With no Redis configured, no command but ``demo`` writes into a server that dies with it.

``write`` then ``get`` with no URL: the write refuses (exit 2, one line saying how to point
at a Redis) and acknowledges nothing, so there is nothing the ``get`` could have lost;
``worker`` refuses the same way. ``demo`` runs on its throwaway server (tested in
test_commands.py). The reason is in docs/cli-defaults.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
NO_REDIS = "no Redis configured: set WM_SIGNALS_REDIS_URL or pass --redis-url"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_SIGNALS_")}
    return subprocess.run([sys.executable, "-m", "workers", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False, env=env)


def test_write_then_get_without_a_url_acknowledge_nothing() -> None:
    """``write`` refuses with exit 2 and prints no version; ``get`` refuses the same way."""
    write = _run("write", "--resource", "zz", "--markdown", "# hi")
    assert (write.returncode, write.stdout) == (2, "")
    [line] = write.stderr.splitlines()
    assert NO_REDIS in line and "wm-signals demo" in line
    get = _run("get", "--resource", "zz")
    assert (get.returncode, get.stdout) == (2, "")
    assert NO_REDIS in get.stderr


@pytest.mark.parametrize("command", [["worker"], ["worker", "--processes", "2"], ["subscribe", "--resource", "zz"],
                                     ["inspect"]])
def test_other_commands_refuse_too(command: list[str]) -> None:
    """A worker (one process or several), a subscriber, an operator's view: exit 2, one line."""
    proc = _run(*command)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert NO_REDIS in line

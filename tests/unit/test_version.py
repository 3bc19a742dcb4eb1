"""One version: the package metadata's, as ``signals.__version__`` and ``wm-signals --version`` say it."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import signals

ROOT = Path(__file__).parents[2]


def test_signals_version_is_the_metadata_version() -> None:
    """``signals.__version__`` is the installed distribution's version."""
    assert signals.__version__ == metadata.version("wm-signals")


def test_the_command_prints_the_same_version() -> None:
    """``wm-signals --version`` (through the entry point) prints it, exit 0."""
    proc = subprocess.run([sys.executable, "-m", "workers", "--version"], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout) == (0, f"wm-signals {metadata.version('wm-signals')}\n")

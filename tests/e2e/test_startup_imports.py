"""What a command loads: ``get`` (and the other lane commands) never load the worker
engine, the process runtime's worker lifecycle, the ops endpoint or the servers; the
library loads none of the worker's stack. Each runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from signals.streams.keys import Keys
from workers.runtime.embedded import RedisServer

ROOT = Path(__file__).resolve().parents[2]

_RUN = """
import json, sys
from workers.cli.app import main
code = main(sys.argv[1:])
sys.stdout.flush()
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

#: Packages of the worker side a lane command must not load.
_HEAVY = ("workers.engine", "workers.ops", "workers.mcp", "workers.ui", "workers.runtime.worker",
          "workers.runtime.supervisor", "prometheus_client", "uvicorn", "starlette", "mcp")


def _loaded(*args: str) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return report["code"], report["modules"]


@pytest.mark.redis
@pytest.mark.parametrize("command", ["get", "write"])
def test_a_lane_command_loads_no_engine_module(redis_server: RedisServer, keys: Keys, command: str) -> None:
    """``get`` (and ``write``) run to the end without importing the engine or the servers."""
    lane = ["--redis-url", redis_server.url, "--namespace", keys.namespace, "--partitions", str(keys.partitions),
            "--resource", "alice"]
    written, _ = _loaded("write", *lane, "--markdown", "# hi")
    assert written == 0
    code, modules = _loaded(command, *lane, *(["--markdown", "# hi again"] if command == "write" else []))
    assert code == 0
    heavy = [m for m in modules if any(m == h or m.startswith(h + ".") for h in _HEAVY)]
    assert heavy == []
    assert "workers.cli.commands.memory" in modules  # the command itself ran from the CLI

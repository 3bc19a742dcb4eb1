"""CPU seconds of the benchmarks' processes: a local process (with its children) from
Linux ``/proc``, and a Redis server from ``INFO cpu``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ("process_cpu_s", "server_cpu_s")


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children so far (Linux /proc; 0.0
    when the process is gone or there is no /proc)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    total = 0
    for p in [pid, *(int(c) for c in children)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def server_cpu_s(redis: Any) -> float:
    """The Redis server's user + system CPU seconds since it started (``INFO cpu``)."""
    info = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

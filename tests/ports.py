"""Ports for the servers the suite starts, without races between its processes.

``make test`` runs the suite in several processes (pytest-xdist). Asking the kernel for a
free port (bind to 0, close, hand the number on) races: between the close and the server's
own bind, another process can be given the same port, by the same question or as the
ephemeral port of an outgoing connection, and a sentinel then answers as a data node. Each
test process takes its ports from a range of its own below the kernel's ephemeral range
(32768 and up on Linux): no outgoing connection is ever given one, and no other test
process picks from it. A port is handed out once per process while the range lasts, and
only when it can be bound at that moment.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

__all__ = ("free_port",)

#: Ranges of 1,200 ports from 10,000 up: 8 processes stay below 19,600, and a cluster node's
#: bus port (its port + 10,000, see tests/integration/cluster.py) falls in 20,000..29,599,
#: below the ephemeral range too and in no process's range of ports.
_BASE, _SPAN = 10_000, 1_200


def _worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # gw0, gw1, ... (one process: 0)
    digits = name.removeprefix("gw")
    return int(digits) % 8 if digits.isdigit() else 0


_START = _BASE + _worker_index() * _SPAN
_cycle = itertools.cycle(range(_START, _START + _SPAN))
for _ in range(random.randrange(_SPAN)):  # another suite on the host (a second checkout) starts elsewhere
    next(_cycle)


def free_port() -> int:
    """A port on 127.0.0.1 that can be bound now, from this test process's own range."""
    for _ in range(_SPAN):
        port = next(_cycle)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_START}..{_START + _SPAN - 1}")

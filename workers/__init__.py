"""wm-signals worker processes and CLI.

The public API of this package is what an application or an example needs to run the
pipeline beside its own code (the ``worker`` extra: ``pip install 'wm-signals[worker]'``):

* :func:`worker_in_process` (:class:`InProcessWorker`): one worker as a task of the
  caller's event loop, for an ``async with`` block;
* :class:`RedisServer`: a throwaway redis-server on a free loopback port (from ``PATH``,
  else the one the ``embedded`` extra ships), stopped at the end of a ``with`` block;
* :func:`configure_logging`: the worker's structlog configuration (console or JSON, a level).

Everything else (``workers.engine``, ``workers.runtime``, ``workers.cli``...) is internal.
The names are loaded on first use, so that ``import workers`` (the ``wm-signals`` entry
point) imports nothing of the worker stack before it has checked that it is installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.runtime.embedded import RedisServer
    from workers.runtime.in_process import InProcessWorker, worker_in_process
    from workers.runtime.logging import configure_logging

__all__ = ("InProcessWorker", "RedisServer", "configure_logging", "worker_in_process")

_HOMES = {
    "InProcessWorker": "workers.runtime.in_process",
    "worker_in_process": "workers.runtime.in_process",
    "RedisServer": "workers.runtime.embedded",
    "configure_logging": "workers.runtime.logging",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'workers' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted((*globals(), *__all__))

"""How the processes run their async code: anyio on asyncio, on uvloop when installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ("run",)

T = TypeVar("T")
_UVLOOP = importlib.util.find_spec("uvloop") is not None


def run(fn: Callable[..., Awaitable[T]], *args: object) -> T:
    """``anyio.run`` on uvloop when it is installed (a dependency on Linux and macOS).

    uvloop's event loop cuts the per-command client overhead of redis.asyncio: measured
    here, one process's write rate went from about 16,500 to 20,000 writes/s. redis.asyncio
    is asyncio-only, so the backend is always asyncio.
    """
    return anyio.run(fn, *args, backend_options={"use_uvloop": _UVLOOP})

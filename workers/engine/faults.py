"""Which errors are the server's (back off and retry) and which belong to one lane.

A worker must never exit for a fault of one lane, and must never dead-letter a lane's
events because the server was briefly unable to work. Whole-server conditions: the
connection failed or timed out, Redis is out of memory (``noeviction``), loading its
dataset, a read-only replica, a master refusing writes for want of replicas
(``min-replicas-to-write``), a cluster reconfiguring, or the wm-signals functions missing where this user may not load
them (a worker with the generated ACL may). Everything else a command
answers with is about the keys it touched.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis import exceptions as redis_exc

from signals.streams.redis_errors import SERVER_CONDITIONS, relayed_error
from signals.streams.scripts import ScriptsNotLoadedError

__all__ = ("WHOLE_SERVER", "is_whole_server", "raise_whole_server")

#: Exception classes of whole-server conditions (redis-py maps ``LOADING`` to a
#: ConnectionError subclass, ``OOM`` and ``READONLY`` to ResponseError subclasses).
WHOLE_SERVER: tuple[type[Exception], ...] = (
    redis_exc.ConnectionError,
    redis_exc.TimeoutError,
    redis_exc.OutOfMemoryError,
    redis_exc.ReadOnlyError,
    redis_exc.TryAgainError,
    redis_exc.ClusterDownError,
    ScriptsNotLoadedError,
)


def is_whole_server(error: BaseException) -> bool:
    """Whether ``error`` is about the server rather than one lane (also when a Lua
    script relays it as a plain error reply), and passes: backing off waits it out. A
    refused login is not (redis-py's AuthenticationError is a ConnectionError): waiting
    does not change the credentials, so the worker stops at once, saying so (exit 2),
    rather than looking like an outage for ``reconnect_timeout_s``."""
    if isinstance(error, redis_exc.AuthenticationError):
        return False
    if isinstance(error, WHOLE_SERVER):
        return True
    return isinstance(error, redis_exc.ResponseError) and relayed_error(error).startswith(SERVER_CONDITIONS)


def raise_whole_server(replies: Iterable[object]) -> None:
    """Raise the first whole-server error among a pipeline's replies (read with
    ``raise_on_error=False``); errors about single keys are left to the caller."""
    for reply in replies:
        if isinstance(reply, Exception) and is_whole_server(reply):
            raise reply

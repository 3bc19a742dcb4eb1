"""The one place this package hooks into redis-py's internals (``redis>=5.0,<8``).

redis-py has no public hook for what :func:`signals.streams.client.connect` needs: a pool
that waits for a free connection without a lock per command, error replies of a busy
server raised as :class:`~signals.errors.RedisBusyError` too, a server that cannot be
reached raised as :class:`~signals.errors.RedisUnavailableError` too, a bound on one reply's size,
and commands packed by hiredis. Each is a subclass of a redis-py class that overrides as
little as it can; ``tests/unit/test_redis_compat.py`` pins every internal name used here,
so that an upgrade of redis-py that changes one fails there, not in production.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import hiredis
from redis import exceptions as redis_exc
from redis.asyncio.connection import AbstractConnection, ConnectionPool

from signals.errors import InvalidInputError
from signals.streams.redis_errors import (
    RedisLoadingError,
    RedisOutOfMemoryError,
    RedisReadOnlyError,
    RedisScriptBusyError,
    ReplyTooLargeError,
    unreachable,
)

__all__ = (
    "MAX_CONNECTIONS", "MIN_REPLY_BYTES", "POOL_WAIT_S", "RESP_OPTIONS", "WaitsForConnections",
    "wrap_connection_class",
)


#: Connections one client opens at most (``connect(url, max_connections=...)``).
MAX_CONNECTIONS = 100
#: How long a command waits for a free connection when all are in use
#: (``connect(url, pool_wait_s=...)``).
POOL_WAIT_S = 20.0


class WaitsForConnections(ConnectionPool):
    """A redis-py connection pool (first among the bases of a subclass of another pool,
    as for Sentinel), except that a
    command finding all ``max_connections`` in use waits for one to be released (up to
    ``pool_wait_s``) instead of failing at once with "Too many connections": what the 101st
    concurrent call of a busy agent server met, on a healthy Redis. While a connection is
    free the pool's own path runs, and nothing more is paid (redis-py's
    ``BlockingConnectionPool`` takes a lock and a timer on every command: ~20 us more per
    command, measured).
    """

    def __init__(self, *args: Any, pool_wait_s: float = POOL_WAIT_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_wait_s = pool_wait_s
        self._released = asyncio.Event()

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            self._released.clear()  # a release from here on wakes the wait below
            try:
                return cast(AbstractConnection, await super().get_connection(*args, **kwargs))  # type: ignore[no-untyped-call]
            except redis_exc.MaxConnectionsError:
                deadline = deadline or loop.time() + self.pool_wait_s
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise redis_exc.MaxConnectionsError(
                        f"all {self.max_connections} connections of this client stayed in use for "
                        f"{self.pool_wait_s:g} s (connect(..., max_connections=N) allows more)") from None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._released.wait(), remaining)

    async def release(self, connection: AbstractConnection) -> None:
        await super().release(connection)
        self._released.set()


#: The reply options of every client of this package (see :func:`connect`). surrogateescape:
#: a reply that is not UTF-8 never raises while being read (one bad byte in Redis must not
#: end a read loop); its bytes come back as lone surrogates, which every check of this
#: package refuses, and go back to Redis unchanged if sent again.
RESP_OPTIONS: dict[str, object] = {"protocol": 2, "decode_responses": True, "encoding_errors": "surrogateescape"}


def wrap_connection_class(pool: Any, max_reply_bytes: int | None = None) -> type[AbstractConnection]:
    """The connection class of ``pool`` with busy replies raised as :class:`RedisBusyError`,
    replies bounded by ``max_reply_bytes`` (see :func:`connect`) and, for UTF-8 pools,
    commands packed by hiredis (one class per base class and bound)."""
    if max_reply_bytes is not None and (isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int)
                                        or max_reply_bytes < MIN_REPLY_BYTES):
        raise InvalidInputError(f"max_reply_bytes is a number of bytes of at least {MIN_REPLY_BYTES:,} (1 MiB), "
                                f"not {max_reply_bytes!r}")
    base = cast(type[AbstractConnection], pool.connection_class)
    utf8 = pool.connection_kwargs.get("encoding", "utf-8") == "utf-8"
    wrapped = _hiredis_packing(base) if utf8 else _busy_errors(base)
    if max_reply_bytes is None:
        return wrapped
    key = (wrapped, max_reply_bytes)
    if key not in _BOUNDED_CLASSES:
        _BOUNDED_CLASSES[key] = type(base.__name__, (wrapped,), {"max_reply_bytes": max_reply_bytes})
    return _BOUNDED_CLASSES[key]


#: The smallest reply bound :func:`connect` takes: a document is 64 KiB by default, an
#: event at most 4 Mi characters; a bound below a few of those would refuse honest reads.
MIN_REPLY_BYTES = 1 << 20
_BOUNDED_CLASSES: dict[tuple[type[AbstractConnection], int], type[AbstractConnection]] = {}


_BUSY_REPLIES: dict[str, type[Exception]] = {
    "OOM": RedisOutOfMemoryError, "LOADING": RedisLoadingError, "READONLY": RedisReadOnlyError,
    "BUSY": RedisScriptBusyError,
}


class _BusyErrors:
    """A connection whose parser raises the busy replies as :class:`RedisBusyError` too.

    redis-py's parsers map an error reply's first word to an exception class through
    ``EXCEPTION_CLASSES``; the connection gets a subclass of its parser whose table maps
    ``OOM``, ``LOADING`` and ``READONLY`` to subclasses of the classes redis-py would
    raise, so every ``except`` written against redis-py still catches them.
    """

    max_reply_bytes: int | None = None  # see connect(); set on the classes wrap_connection_class makes

    def set_parser(self, parser_class: type[Any]) -> None:
        super().set_parser(_busy_parser(parser_class, self.max_reply_bytes))  # type: ignore[misc]

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise (unreachable(e) or e) from e

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        """Connect; a database the server does not have is the URL's fault, named as such."""
        try:
            await super().on_connect_check_health(check_health)  # type: ignore[misc]
        except redis_exc.ResponseError as e:
            if "DB index is out of range" not in str(e):
                raise
            db = getattr(self, "db", "?")
            raise InvalidInputError(f"Redis refused database {db} of the URL ({e}): the server has fewer "
                                    "databases (its `databases` setting, 16 by default)") from e

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise (unreachable(e) or e) from e
        parser = getattr(self, "_parser", None)
        if isinstance(parser, _BoundedReplies):  # the replies to this send are counted from here
            parser.round_trip()

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise (unreachable(e) or e) from e


_BUSY_PARSERS: dict[tuple[type[Any], int | None], type[Any]] = {}


def _busy_parser(base: type[Any], max_reply_bytes: int | None = None) -> type[Any]:
    """``base`` with the busy replies mapped to this library's classes and, for the hiredis
    parser, replies bounded by ``max_reply_bytes``; one class per base and bound."""
    key = (base, max_reply_bytes)
    if key not in _BUSY_PARSERS:
        table = {**base.EXCEPTION_CLASSES, **_BUSY_REPLIES}
        namespace: dict[str, object] = {"EXCEPTION_CLASSES": table}
        bases: tuple[type[Any], ...] = (base,)
        if max_reply_bytes is not None and hasattr(base, "read_from_socket") and "_reader" in getattr(
                base, "__slots__", ()):  # the hiredis parser: what it feeds its reader is counted
            bases, namespace["max_reply_bytes"] = (_BoundedReplies, base), max_reply_bytes
        _BUSY_PARSERS[key] = type(base.__name__, bases, namespace)
    return _BUSY_PARSERS[key]


class _BoundedReplies:
    """A hiredis parser that stops a round trip's replies past ``max_reply_bytes``: it
    counts the bytes it reads from the socket since the connection last sent (one command,
    or a whole pipeline, whose replies count together: a pipeline of many replies each
    under the bound brought in their sum), and raises :class:`ReplyTooLargeError` before
    feeding hiredis more (redis-py closes the connection on any error of a read, so the
    rest is never read). Its body is redis-py's ``read_from_socket`` with the count."""

    max_reply_bytes: int
    _stream: Any
    _reader: Any
    _read_size: int
    _taken = 0

    def round_trip(self) -> None:
        """Count anew: the connection has sent a command (or a pipeline's commands)."""
        self._taken = 0

    async def read_from_socket(self) -> bool:
        buffer = await self._stream.read(self._read_size)
        if not buffer or not isinstance(buffer, bytes):
            raise redis_exc.ConnectionError("Connection closed by server.") from None
        self._taken += len(buffer)
        if self._taken > self.max_reply_bytes:
            raise ReplyTooLargeError(f"a reply from Redis over {self.max_reply_bytes:,} bytes (the client's "
                                     "max_reply_bytes): not read")
        self._reader.feed(buffer)
        return True


_BUSY_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _busy_errors(base: type[AbstractConnection]) -> type[AbstractConnection]:
    if base not in _BUSY_CLASSES:
        _BUSY_CLASSES[base] = type(base.__name__, (_BusyErrors, base), {})
    return _BUSY_CLASSES[base]


class _HiredisPacking(_BusyErrors):
    """Serialise commands with hiredis's C packer.

    redis-py's synchronous client packs with hiredis when it is installed; its asyncio
    client always packs in Python, which costs about a fifth of a small command's client
    CPU (measured on the write path). Arguments are ``str`` (UTF-8), ``bytes``, ``int``
    or ``float``, as with redis-py's own packer; anything else is a ``DataError``.
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str):  # "XINFO GROUPS" and the like go out as separate words
            args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            pass
        plain: Any = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args)
        try:  # buffers other than bytes, which hiredis does not take
            return [hiredis.pack_command(plain)]
        except TypeError as e:
            raise redis_exc.DataError(f"cannot send a command argument to Redis: {e}") from e


_PACKING_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _hiredis_packing(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` (TCP, TLS or Unix socket connection) with hiredis packing; one class per base."""
    if base not in _PACKING_CLASSES:
        _PACKING_CLASSES[base] = type(base.__name__, (_HiredisPacking, base), {})
    return _PACKING_CLASSES[base]



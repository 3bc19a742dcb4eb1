"""The redis-py internals that :mod:`signals.streams.redis_compat` relies on are still there.

redis-py has no public hook for a busy-reply mapping, a reply bound or hiredis packing on
the asyncio client, so the compatibility module subclasses its connection and parser
classes. An upgrade of redis-py that renames or reshapes one of these fails here, with
the name, instead of silently dropping a guarantee.
"""

from __future__ import annotations

import inspect

import redis
from redis import exceptions as redis_exc
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser
from redis.asyncio.connection import AbstractConnection, Connection, ConnectionPool, SSLConnection

from signals.streams.redis_compat import wrap_connection_class


def test_the_redis_version_is_within_the_tested_range() -> None:
    """pyproject bounds redis to >=5.0,<9: the majors this module was checked against."""
    major = int(redis.__version__.split(".")[0])
    assert 5 <= major < 9


def test_connections_take_a_parser_class_and_send_packed_commands() -> None:
    """``set_parser(parser_class)``, ``send_packed_command(command, check_health)`` and
    ``pack_command(*args)`` are the connection methods the hooks override."""
    assert list(inspect.signature(AbstractConnection.set_parser).parameters) == ["self", "parser_class"]
    assert list(inspect.signature(AbstractConnection.send_packed_command).parameters)[:3] == [
        "self", "command", "check_health"]
    assert "args" in inspect.signature(AbstractConnection.pack_command).parameters
    assert hasattr(AbstractConnection, "_parser") or "_parser" in getattr(AbstractConnection, "__slots__", ())


def test_connections_connect_and_read_through_the_hooked_methods() -> None:
    """``connect_check_health`` (what ``connect`` runs) and ``read_response`` are the methods
    whose plain ``ConnectionError``/``TimeoutError`` the hooks raise as ``RedisUnavailableError`` too."""
    assert "connect_check_health" in inspect.getsource(AbstractConnection.connect)
    assert callable(AbstractConnection.read_response)


def test_parsers_map_error_replies_through_exception_classes() -> None:
    """Both asyncio parsers look an error reply's first word up in ``EXCEPTION_CLASSES``,
    with OOM, LOADING and READONLY mapped to these redis-py classes (the compat module's
    classes subclass them)."""
    for parser in (_AsyncRESP2Parser, _AsyncHiredisParser):
        table = parser.EXCEPTION_CLASSES
        assert table["OOM"] is redis_exc.OutOfMemoryError
        assert table["LOADING"] is redis_exc.BusyLoadingError
        assert table["READONLY"] is redis_exc.ReadOnlyError


def test_the_hiredis_parser_reads_through_read_from_socket_into_its_reader() -> None:
    """The reply bound replaces the hiredis parser's ``read_from_socket``, which reads
    ``_read_size`` bytes from ``_stream`` and feeds ``_reader``."""
    source = inspect.getsource(_AsyncHiredisParser.read_from_socket)
    for name in ("_stream", "_read_size", "_reader.feed"):
        assert name in source, name
    assert "_reader" in getattr(_AsyncHiredisParser, "__slots__", ())


def test_pools_expose_their_connection_class_and_kwargs() -> None:
    """``wrap_connection_class`` reads ``connection_class`` and ``connection_kwargs`` of a pool."""
    pool = ConnectionPool.from_url("redis://127.0.0.1:1/0")
    assert pool.connection_class is Connection
    assert pool.connection_kwargs["host"] == "127.0.0.1"
    wrapped = wrap_connection_class(pool)
    assert issubclass(wrapped, Connection)
    assert issubclass(wrap_connection_class(ConnectionPool(connection_class=SSLConnection)), SSLConnection)

"""The client's command serialisation: hiredis packing must send what redis-py's own packer sends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis import exceptions as redis_exc
from redis.asyncio.connection import Connection

from signals.streams.client import connect
from signals.streams.redis_compat import _hiredis_packing, _HiredisPacking

_ARG = st.one_of(st.text(), st.binary(), st.integers(), st.floats(allow_nan=False, allow_infinity=False))


def _both() -> tuple[Connection, Connection]:
    return Connection(), _hiredis_packing(Connection)()


@given(st.sampled_from(["EVALSHA", "XADD", "XINFO GROUPS", b"CONFIG GET"]), st.lists(_ARG, max_size=12))
def test_hiredis_packing_matches_redis_py(command: str | bytes, args: list[object]) -> None:
    """Byte for byte the same wire command as redis-py's Python packer, multi-word names included."""
    plain, fast = _both()
    assert b"".join(fast.pack_command(command, *args)) == b"".join(plain.pack_command(command, *args))


def test_hiredis_packing_takes_buffers() -> None:
    """memoryview and bytearray arguments go out as their bytes."""
    plain, fast = _both()
    args = ("SET", bytearray(b"k"), memoryview(b"value"))
    assert b"".join(fast.pack_command(*args)) == b"".join(plain.pack_command(*args))


def test_hiredis_packing_refuses_other_types() -> None:
    """A None argument is a DataError naming the problem, as with redis-py's packer."""
    _, fast = _both()
    with pytest.raises(redis_exc.DataError, match="command argument"):
        fast.pack_command("SET", "k", None)


def test_connect_uses_hiredis_packing() -> None:
    """Clients made by connect() pack with hiredis (no connection is opened here)."""
    client = connect("redis://127.0.0.1:1/0")
    assert issubclass(client.connection_pool.connection_class, _HiredisPacking)
    assert issubclass(client.connection_pool.connection_class, Connection)

"""A minimal RESP connection for the benchmarks' load generators: commands packed once
into bytes, written in one call, replies parsed by hiredis.

A load generator on the benchmarks' host shares its two cores with what it measures:
redis-py's pipeline costs about 80 us of the generator's CPU per write-script call
(building the command stack, packing, parsing each reply into Python objects), so three
generator processes took a third of the host at 10,000 writes/s and the result measured
the generator as much as the consumer. This sends the same commands (the store's own write
script, keys and arguments) for a small fraction of that. Benchmarks only: the library
and the workers use redis.asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from urllib.parse import urlparse

import hiredis

__all__ = ("RawConnection", "pack", "pack_args")


def pack_args(args: Sequence[bytes | str | int]) -> bytes:
    """Arguments as RESP bulk strings, without the array header (see :func:`pack`)."""
    out = []
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def pack(args: Sequence[bytes | str | int], *, more: int = 0) -> bytes:
    """One command in RESP (an array of bulk strings); with ``more``, only its first part:
    ``more`` arguments packed by :func:`pack_args` must follow."""
    return b"*%d\r\n" % (len(args) + more) + pack_args(args)


class RawConnection:
    """One connection to a Redis server at a ``redis://host:port`` URL (no auth, no TLS:
    the benchmarks' own servers on loopback)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._parser = hiredis.Reader()

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        parsed = urlparse(url)
        reader, writer = await asyncio.open_connection(parsed.hostname or "127.0.0.1", parsed.port or 6379)
        return cls(reader, writer)

    async def call(self, packed: bytes, count: int) -> list[object]:
        """Send ``count`` packed commands at once and return their ``count`` replies, in
        order (an error reply is an exception object in the list, not raised)."""
        self._writer.write(packed)
        replies: list[object] = []
        while len(replies) < count:
            reply = self._parser.gets()
            if reply is False:
                chunk = await self._reader.read(1 << 16)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                self._parser.feed(chunk)
                continue
            replies.append(reply)
        return replies

    async def aclose(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()

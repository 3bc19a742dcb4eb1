"""Settings every process of a namespace must agree on, stored once in Redis.

Writers, workers and agent loops each compute key names from a :class:`~signals.streams.keys.Keys`;
if they disagree on the partition count, a writer appends events to a stream no worker
reads and nothing is logged anywhere. So the partition count lives in the namespace's
config hash (``<namespace>:config``): the first process that writes or works in a
namespace records its own (``HSETNX``: a value, once set, is never changed by the
library), and every process checks its value against the stored one before its first
write, read or commit, refusing to go on with :class:`~signals.errors.NamespaceMismatchError`.
"""

from __future__ import annotations

from typing import cast

from redis import exceptions as redis_exc

from signals.errors import CorruptDataError, NamespaceMismatchError
from signals.streams.client import Client
from signals.streams.keys import Keys

__all__ = ("check_namespace",)


async def check_namespace(redis: Client, keys: Keys, *, record: bool = True) -> None:
    """Check (and with ``record``, first record) the namespace's shared settings.

    Raises:
        NamespaceMismatchError: the stored partition count differs from ``keys.partitions``.
        CorruptDataError: the stored value is not a partition count.
    """
    key = keys.config()
    try:
        stored = cast(str | None, await redis.hget(key, "partitions"))
        if stored is None and record:  # read first: a full (noeviction) Redis refuses HSETNX even as a no-op
            await redis.hsetnx(key, "partitions", keys.partitions)
            stored = cast(str | None, await redis.hget(key, "partitions"))
    except redis_exc.ResponseError as e:
        if "WRONGTYPE" not in str(e):
            raise
        raise CorruptDataError(f"{key} is not a hash: the namespace's settings cannot be read") from e
    if stored is None:
        return
    if not stored.isdigit() or not 1 <= int(stored) <= 4096:
        raise CorruptDataError(f"{key} field partitions is {stored[:40]!r}, not a partition count")
    if int(stored) != keys.partitions:
        raise NamespaceMismatchError(
            f"namespace {keys.namespace!r} uses {stored} partitions, this process was started with "
            f"{keys.partitions}: start it with --partitions {stored} (WM_SIGNALS_PARTITIONS)"
        )

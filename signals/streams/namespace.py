"""Settings every process of a namespace must agree on, stored once in Redis.

Writers, workers and agent loops each compute key names from a :class:`~signals.streams.keys.Keys`;
if they disagree on the partition count, a writer appends events to a stream no worker
reads and nothing is logged anywhere. So the partition count lives in the namespace's
config hash (``<namespace>:config``): the first process that writes or works in a
namespace records its own (``HSETNX``: a value, once set, is never changed by the
library), and every process checks its value against the stored one before its first
write, read or commit, refusing to go on with :class:`~signals.errors.NamespaceMismatchError`.

The same hash holds the namespace's **epoch** (field ``epoch``): 32 random hex digits
recorded once by the first process that records the settings, and never changed by the
library. A namespace whose data is lost (``FLUSHALL``, a Redis restarted without
persistence) loses its epoch with it, and the next writer or worker records a new one;
a subscriber that finds a different epoch than the one it saw checks its lane's chain
again (:mod:`signals.streams.subscribe`). Every role may read it (``HGET`` on the config
key); writers and workers record it (``HSETNX``).
"""

from __future__ import annotations

import secrets
from typing import cast

from redis import exceptions as redis_exc

from signals.errors import CorruptDataError, NamespaceMismatchError
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.redis_errors import is_wrong_type

__all__ = ("EPOCH_FIELD", "NamespaceCheck", "check_namespace", "epoch_of", "read_epoch")

#: The config hash field holding the namespace's epoch.
EPOCH_FIELD = "epoch"


async def check_namespace(redis: Client, keys: Keys, *, record: bool = True) -> bool:
    """Check (and with ``record``, first record) the namespace's shared settings; returns
    whether they are stored (``False``: a namespace nothing has written or worked in yet,
    checked without ``record``).

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
        if record and await redis.hget(key, EPOCH_FIELD) is None:
            await redis.hsetnx(key, EPOCH_FIELD, secrets.token_hex(16))
    except redis_exc.ResponseError as e:
        if not is_wrong_type(e):
            raise
        raise CorruptDataError(f"{key} is not a hash: the namespace's settings cannot be read") from e
    if stored is None:
        return False
    if not (stored.isascii() and stored.isdigit()) or not 1 <= int(stored) <= 4096:  # isdigit alone: '²', '٤'
        raise CorruptDataError(f"{key} field partitions is {stored[:40]!r}, not a partition count")
    if int(stored) != keys.partitions:
        raise NamespaceMismatchError(
            f"namespace {keys.namespace!r} uses {stored} partitions, this process was started with "
            f"{keys.partitions}: start it with --partitions {stored} (WM_SIGNALS_PARTITIONS)"
        )
    return True


async def read_epoch(redis: Client, keys: Keys) -> str | None:
    """The namespace's epoch (``None``: none recorded, or the key is not a hash, or the value
    is not the 32 hex digits the library records: nothing to compare)."""
    try:
        raw = await redis.hget(keys.config(), EPOCH_FIELD)
    except redis_exc.ResponseError as e:
        if not is_wrong_type(e):
            raise
        return None
    return epoch_of(raw)


def epoch_of(raw: object) -> str | None:
    """An epoch field's value as read (text, bytes, ``None`` or a WRONGTYPE error of a
    pipeline), checked: the epoch, or ``None`` when it is not one."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    if not isinstance(text, str) or len(text) != 32 or not all(c in "0123456789abcdef" for c in text):
        return None
    return text


class NamespaceCheck:
    """The check of one client's namespace, made until it has found the settings stored:
    the first write, read or commit of a store or a subscription pays one ``HGET``; a
    reader of a namespace nothing has written yet checks again next time (a reader never
    records: it may not write, and a namespace is set up by its first writer or worker).
    """

    def __init__(self, redis: Client, keys: Keys) -> None:
        self._redis, self._keys = redis, keys
        self._done = False

    async def __call__(self, *, record: bool) -> None:
        """Check (see :func:`check_namespace`), once it passed with the settings stored.

        Raises:
            NamespaceMismatchError: the stored partition count differs from this client's.
            CorruptDataError: the stored value is not a partition count.
            redis.exceptions.ConnectionError: as the caller's own commands would (a
                subscription reconnects on it; the store translates it).
        """
        if not self._done:
            self._done = await check_namespace(self._redis, self._keys, record=record)

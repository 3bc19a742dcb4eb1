"""Thread ownership: a thread belongs to one resource forever.

The first write to a thread, or :meth:`ThreadOwners.claim` (the ``thread`` script),
records its owner in the thread record (``keys.thread``); a write or a read naming
another resource is refused with :class:`~signals.errors.ThreadOwnerError`. Nothing read
here is trusted: an owner record that is not a resource id, or a thread record of another
type, is :class:`~signals.errors.CorruptDataError` naming the key. An owner never changes
once set, so a check that passed is remembered (per client, bounded).
"""

from __future__ import annotations

from typing import cast

from redis import exceptions as redis_exc

from signals.core._time import now_iso
from signals.core.lru import LRU
from signals.errors import CorruptDataError, InvalidInputError, RedisUnavailableError, ThreadOwnerError
from signals.streams.client import Client
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import is_wrong_type
from signals.streams.scripts import ServerScript

__all__ = ("ThreadOwners", "owner_record")


class ThreadOwners:
    """Reads, checks and claims thread owners for one namespace.

    Args:
        redis: a redis.asyncio client.
        keys: the namespace's keys.
        cache_size: threads whose owner check passed, remembered with their owner.
    """

    def __init__(self, redis: Client, keys: Keys, cache_size: int) -> None:
        self.redis = redis
        self.keys = keys
        self._claim = ServerScript(redis, "thread")
        self._checked: LRU[str, str] = LRU(cache_size)

    async def owner(self, thread_id: str) -> str | None:
        """The resource that owns a thread, or ``None`` when the thread does not exist.

        Raises:
            CorruptDataError: the owner record holds something that is not a resource id.
        """
        key = self.keys.thread(validate_id(thread_id, "thread id"))
        recorded = cast(str | None, await self.redis.hget(key, "resource"))
        return None if recorded is None else owner_record(key, recorded)

    async def check(self, thread_id: str, resource_id: str) -> None:
        """Refuse ``resource_id`` on a thread another resource owns (a thread with no owner
        yet passes: its first write claims it). A match is remembered: an owner never changes.

        Raises:
            ThreadOwnerError: the thread belongs to another resource.
            CorruptDataError: its owner record is not a resource id.
            RedisUnavailableError: Redis could not be reached.
        """
        if self._checked.get(thread_id) == resource_id:
            return
        try:
            recorded = await self.owner(thread_id)
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"reading the owner of thread {thread_id!r}: {e}") from e
        except redis_exc.ResponseError as e:  # WRONGTYPE: the key is not a thread record
            raise CorruptDataError(f"{self.keys.thread(thread_id)}: {e}") from e
        if recorded is None:
            return
        if recorded != resource_id:
            raise ThreadOwnerError(f"thread {thread_id!r} belongs to resource {recorded!r}, not {resource_id!r}")
        self._checked.put(thread_id, recorded)

    async def claim(self, thread_id: str, resource_id: str) -> None:
        """Record ``resource_id`` as the thread's owner, or refuse another resource.

        Raises:
            ThreadOwnerError: another resource owns the thread.
            CorruptDataError: the thread record is not a hash, or its owner not a resource id.
        """
        key = self.keys.thread(thread_id)
        try:
            status, recorded = await self._claim(keys=[key], args=[resource_id, now_iso()])
        except redis_exc.ResponseError as e:
            if not is_wrong_type(e):
                raise
            raise CorruptDataError(f"{key} is not a thread record (a hash): the owner cannot be read") from e
        if status == "owner":
            raise ThreadOwnerError(
                f"thread {thread_id!r} belongs to resource {owner_record(key, recorded)!r}, not {resource_id!r}"
            )
        self._checked.put(thread_id, resource_id)  # ours from now on: an owner never changes


def owner_record(key: str, owner: str) -> str:
    """A thread record's owner as read from ``key``, refused unless it is a resource id."""
    try:
        return validate_id(owner, "resource id")
    except InvalidInputError as e:
        raise CorruptDataError(f"{key} field resource is not a resource id: {e}") from e

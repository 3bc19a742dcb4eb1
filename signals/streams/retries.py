"""Answering a retried write: what an idempotency key already used says, checked.

A write with an idempotency key that was already used is a retry: it gets the version
the first attempt made, without writing again, even when the lane moved on since (a
retry is the same request as the first attempt, which ``if_version`` or the schema might
refuse now). The store (:class:`~signals.streams.store.WorkingMemoryStore`) mixes this in
and provides the reads it needs.
"""

from __future__ import annotations

from typing import cast

from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.errors import CorruptDataError, IdempotencyKeyReusedError, RedisUnavailableError, WmSignalsError
from signals.streams.client import Client
from signals.streams.documents import Document
from signals.streams.durability import Durability, require_replicas
from signals.streams.idempotency import parse_stored
from signals.streams.keys import Keys
from signals.streams.write_script import LaneRef, WriteScript

__all__ = ("RetryAnswers",)

log = get_logger(__name__)


class RetryAnswers:
    """The retry half of the store's writes; the store provides what is declared here."""

    redis: Client
    keys: Keys
    write_script: WriteScript

    async def _read(self, lane: str) -> Document | None:
        raise NotImplementedError

    async def thread_owner(self, thread_id: str) -> str | None:
        raise NotImplementedError

    @property
    def durability(self) -> Durability | None:
        raise NotImplementedError

    async def _check_replicated(self, ref: LaneRef, version: int, acked: object,
                                idempotency_key: str | None = None, stored: str = "") -> None:
        """Under a durability setting, :func:`~signals.streams.durability.require_replicas`
        for this write (a ``dup``, ``acked`` None, confirms its idempotency key first)."""
        if self.durability is not None:
            key = self.keys.idempotency(ref.lane, idempotency_key) if idempotency_key is not None else None
            await require_replicas(self.redis, self.durability, ref.lane, version, acked, key=key, stored=stored)

    async def _retried(self, ref: LaneRef, owner: str, idempotency_key: str | None, fingerprint: str) -> int | None:
        """The version a used ``idempotency_key`` made, when this is its retry; ``None``
        when the key is new (the write script checks it again, atomically, with the write).

        Checked before the write is computed: a retry is the same request as the first
        attempt, which ``if_version`` or the schema may refuse now that the lane moved on
        (another writer's change), and it must still answer with the key's version. A
        thread's owner is checked first, as the write script does. ``None`` too without a key."""
        if idempotency_key is None:
            return None
        key = self.keys.idempotency(ref.lane, idempotency_key)
        try:
            stored = await self.redis.get(key)
        except redis_exc.ResponseError as e:  # WRONGTYPE: the write script names the key
            log.debug("wm.idempotency_key_unreadable", key=key, error=str(e))
            return None
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"reading {key}: {e}") from e
        if stored is None:
            return None
        if owner and ref.thread_id and not await self._owner_matches(ref, owner):
            return None
        return await self._answer_retry(ref, idempotency_key, cast(str, stored), fingerprint)

    async def _owner_matches(self, ref: LaneRef, owner: str) -> bool:
        """Refuse a thread write naming another resource than the thread's owner; ``False``
        when the owner record cannot be read (the write script then names the fault)."""
        try:
            recorded = await self.thread_owner(ref.thread_id or "")
        except redis_exc.ResponseError as e:  # WRONGTYPE: refused, naming the key, by the write script
            log.debug("wm.thread_owner_unreadable", thread=ref.thread_id, error=str(e))
            return False
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"reading the owner of thread {ref.thread_id!r}: {e}") from e
        if recorded is not None and recorded != owner:  # the script's own refusal of another resource's write
            raise cast(WmSignalsError, self.write_script.refusal(ref, "owner", recorded, None))
        return True

    async def _answer_retry(self, ref: LaneRef, idempotency_key: str | None, stored: str, fingerprint: str) -> int:
        """A used idempotency key's answer: its version, confirmed under a durability
        setting; :class:`IdempotencyKeyReusedError` when another request used it.

        The key is a writer's key, and any writer of the namespace may set it: a version
        the lane has not reached (or 0) was made by no write. Answering it would report a
        write that never happened as done, so it is :class:`CorruptDataError`, naming the
        key (the key is set with its write, atomically, so a genuine one never runs ahead
        of the document read after it). A forged version the lane has reached, with the
        right fingerprint, cannot be told from a retry: an idempotency key is as private
        as its name."""
        what = f"idempotency key {idempotency_key!r} of {ref.lane}"
        done, made_by = parse_stored(stored, what)
        if made_by and fingerprint and made_by != fingerprint:
            raise IdempotencyKeyReusedError(
                f"{what} was used for another write (it made document version {done}); a retry must repeat its "
                "request, and a new write needs a new key: nothing was written",
                version=done)
        document = await self._read(ref.lane)
        reached = document.version if document is not None else 0
        if not 1 <= done <= reached:
            raise CorruptDataError(
                f"{what} says it made document version {done}, but the lane is at document version {reached}: no "
                f"write made it (the key, {self.keys.idempotency(ref.lane, idempotency_key or '')}, was set by "
                "hand); nothing was written: write with a new key, or delete that one")
        await self._check_replicated(ref, done, None, idempotency_key, stored)
        return done

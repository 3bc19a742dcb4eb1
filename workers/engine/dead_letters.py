"""A worker's failures and dead letters: count an event's failed attempts, and move an
event to its partition's dead-letter stream (with the reason) once it is poison or has
failed ``max_attempts`` times. Whole-server errors are raised, never counted against an
event: the supervisor backs off and retries them.
"""

from __future__ import annotations

import structlog
from redis import exceptions as redis_exc

from signals.core._time import now_iso
from signals.core.codec import FIELD, encode_json
from signals.core.models import DeadLetter
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import is_whole_server
from signals.streams.scripts import ServerScript
from workers.engine.commit import BatchStats
from workers.engine.counters import METRICS
from workers.engine.events import text
from workers.engine.lane_state import Pending
from workers.engine.reconcile import CATCH_UP_ID

__all__ = ("DeadLetters",)

log = structlog.get_logger(__name__)


class DeadLetters:
    """Failure counts and dead letters of one worker's partitions."""

    def __init__(self, redis: Client, keys: Keys, *, max_attempts: int, maxlen: int) -> None:
        self.redis, self.keys = redis, keys
        self.max_attempts, self.maxlen = max_attempts, maxlen
        self._script = ServerScript(redis, "dead_letter")

    async def failed(self, entry: Pending, error: Exception, stats: BatchStats) -> None:
        """Count a processing failure; dead-letter the event after ``max_attempts`` (a
        reconciliation's catch-up, which stands for no entry, is neither: see
        :data:`~workers.engine.reconcile.CATCH_UP_ID`)."""
        if is_whole_server(error):
            raise error
        if entry.entry_id == CATCH_UP_ID:
            log.warning("worker.catch_up_failed", lane=entry.event.lane, error=f"{type(error).__name__}: {text(error)}")
            return
        try:
            attempts = int(await self.redis.hincrby(self.keys.failures(entry.partition), entry.entry_id, 1))
        except (redis_exc.ResponseError, ValueError) as e:  # a failure count that cannot be kept
            if is_whole_server(e):
                raise
            attempts = self.max_attempts
        log.warning("worker.event_failed", entry_id=entry.entry_id, attempts=attempts,
                    error=f"{type(error).__name__}: {text(error)}")
        if attempts >= self.max_attempts and await self.send(
                entry.partition, entry.entry_id, {FIELD: encode_json(entry.event)},
                f"failed {attempts} times: {type(error).__name__}: {text(error)}", attempts):
            stats.dead_letters += 1
        elif attempts < self.max_attempts:
            stats.retried += 1

    async def send(self, partition: int, entry_id: str, fields: dict[str, str], error: str, attempts: int) -> bool:
        """Move an entry to its partition's dead-letter stream; ``False`` when Redis refused
        (a dead-letter stream of another type, say): the entry then stays pending, is
        reclaimed later, and no other entry waits for it."""
        if entry_id == CATCH_UP_ID:  # a reconciliation's catch-up: no event to keep
            log.warning("worker.catch_up_refused", partition=partition, reason=error)
            return False
        letter = DeadLetter(stream=self.keys.writes(partition), entry_id=entry_id, fields=fields,
                            error=error, attempts=attempts, at=now_iso())
        try:
            await self._script(
                keys=[self.keys.writes(partition), self.keys.dead_letters(partition), self.keys.failures(partition)],
                args=[GROUP, entry_id, encode_json(letter), self.maxlen],
            )
        except redis_exc.ResponseError as e:
            if is_whole_server(e):
                raise
            log.error("worker.dead_letter_failed", partition=partition, entry_id=entry_id, reason=error,  # noqa: TRY400
                      error=text(e))
            return False
        log.warning("worker.dead_lettered", partition=partition, entry_id=entry_id, error=error)
        METRICS.dead_lettered(error)
        return True

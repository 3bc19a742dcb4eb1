"""Dead letters: list, show, requeue (exactly once) and drop. Used by ``wm-signals dlq``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import msgspec
from redis import exceptions as redis_exc

from signals.core.codec import FIELD, decode_dead_letter, decode_write
from signals.core.lane import is_stream_id
from signals.core.models import DeadLetter
from signals.errors import CorruptDataError, InvalidInputError
from signals.streams.client import Client, Entry, xrange
from signals.streams.keys import Keys
from signals.streams.redis_errors import is_wrong_type
from signals.streams.scripts import ServerScript

__all__ = ("KEPT_CHARS", "DeadLetterEntry", "DeadLetters")

#: A dead letter keeps at most this many characters of each field of its entry.
KEPT_CHARS = 70_000


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """A dead letter with where it lives; ``letter`` is ``None`` for an entry of the
    dead-letter stream that is not one (then ``problem`` says why: it can still be dropped
    by its id)."""

    partition: int
    id: str
    letter: DeadLetter | None
    problem: str | None = None


class DeadLetters:
    """The dead-letter streams of a namespace."""

    def __init__(self, redis: Client, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._requeue = ServerScript(redis, "requeue")

    async def list(self, *, limit: int = 1000) -> list[DeadLetterEntry]:
        """Dead letters of every partition, the oldest ``limit`` of each partition, partition by
        partition; an entry that does not decode is listed too, with ``letter=None`` and the
        problem, so that the operator sees the id that ``drop`` needs.

        The limit is per partition: one limit over the whole namespace would be filled by the
        first partitions, so a writer whose junk events filled its partition's dead-letter
        stream would hide every later partition's dead letters. :meth:`lengths` says how many each
        partition holds."""
        out: list[DeadLetterEntry] = []
        for partition in range(self.keys.partitions):
            for entry_id, fields in await self._range(partition, count=limit):
                try:
                    out.append(DeadLetterEntry(partition, entry_id, decode_dead_letter(fields[FIELD])))
                except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as e:
                    problem = f"no {FIELD} field" if isinstance(e, KeyError) else str(e)
                    out.append(DeadLetterEntry(partition, entry_id, None, f"not a dead letter: {problem}"))
        return out

    async def lengths(self) -> tuple[int, ...]:
        """How many entries each partition's dead-letter stream holds (0 for none), in
        partition order; a key of another type is :class:`CorruptDataError` naming it."""
        out = [0] * self.keys.partitions
        for partition in range(self.keys.partitions):
            key = self.keys.dead_letters(partition)
            try:
                out[partition] = int(await self.redis.xlen(key))
            except redis_exc.ResponseError as e:
                if not is_wrong_type(e):
                    raise
                raise CorruptDataError(f"{key} is not a stream") from e
        return tuple(out)

    async def _find(self, dead_letter_id: str, partition: int | None = None) -> tuple[int, str, dict[str, str]]:
        """Where a dead letter is, and its raw fields (checked by the caller): in
        ``partition``, or in the one partition that holds the id.

        Ids are per partition stream: dead letters of several partitions made in the same
        millisecond (one batch, or a writer's junk beside a genuine letter) share one, so
        the first partition's would be taken, shown, requeued or dropped in place of the
        one asked for: an id that more than one partition holds needs ``partition``.
        """
        if not is_stream_id(dead_letter_id):
            raise InvalidInputError(f"dead letter id {dead_letter_id[:40]!r} is not a stream id (<ms>-<seq>)")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                      or not 0 <= partition < self.keys.partitions):
            raise InvalidInputError(f"partition is 0 to {self.keys.partitions - 1}, not {partition!r}")
        found: list[tuple[int, str, dict[str, str]]] = []
        for p in range(self.keys.partitions) if partition is None else (partition,):
            entries = await self._range(p, start=dead_letter_id, end=dead_letter_id)
            if entries:
                found.append((p, entries[0][0], entries[0][1]))
        if not found:
            where = "" if partition is None else f" in partition {partition}"
            raise InvalidInputError(f"no dead letter {dead_letter_id!r}{where}")
        if len(found) > 1:
            partitions = ", ".join(str(p) for p, _, _ in found)
            raise InvalidInputError(f"dead letter id {dead_letter_id!r} is in partitions {partitions}: name the "
                                    "partition (--partition N; 'dlq list' shows each letter's)")
        return found[0]

    async def _range(self, partition: int, *, start: str = "-", end: str = "+",
                     count: int | None = None) -> Sequence[Entry]:
        """XRANGE of a partition's dead-letter stream; a key of another type is
        :class:`CorruptDataError` naming it."""
        key = self.keys.dead_letters(partition)
        try:
            return await xrange(self.redis, key, start=start, end=end, count=count)
        except redis_exc.ResponseError as e:
            if not is_wrong_type(e):
                raise
            raise CorruptDataError(f"{key} is not a stream") from e

    async def get(self, dead_letter_id: str, partition: int | None = None) -> DeadLetterEntry:
        """One dead letter by id (and ``partition``, needed when several hold the id: see :meth:`_find`).

        Raises:
            InvalidInputError: no such dead letter, or an id that is not a stream id.
            CorruptDataError: the entry is not a dead letter (``drop`` still removes it).
        """
        partition, entry_id, fields = await self._find(dead_letter_id, partition)
        try:
            letter = decode_dead_letter(fields[FIELD])
        except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptDataError(f"entry {entry_id} of partition {partition} is not a dead letter: {e!r}") from e
        return DeadLetterEntry(partition, entry_id, letter)

    async def requeue(self, dead_letter_id: str, partition: int | None = None) -> str:
        """Append the event back to its partition stream and delete the dead letter, once.

        Returns the new write-stream entry id.

        Raises:
            InvalidInputError: no such dead letter (already requeued or dropped).
        """
        entry = await self.get(dead_letter_id, partition)
        letter = cast(DeadLetter, entry.letter)  # get() refuses an entry that is not a dead letter
        pairs = [x for kv in letter.fields.items() for x in kv]
        if not pairs:
            raise InvalidInputError(f"dead letter {dead_letter_id!r} holds no event fields to requeue")
        try:
            decode_write(letter.fields.get(FIELD, ""))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:  # it would only come back as a dead letter
            raise InvalidInputError(
                f"dead letter {dead_letter_id!r} cannot be requeued: its event does not decode ({e}); a dead "
                f"letter keeps at most {KEPT_CHARS:,} characters of a field, so an oversized event never does. "
                "Drop it; writing the lane again brings its signals up to date") from e
        new_id = await self._requeue(keys=[self.keys.dead_letters(entry.partition),
                                           self.keys.writes(entry.partition)],
                                     args=[entry.id, *pairs])
        if not new_id:
            raise InvalidInputError(f"dead letter {dead_letter_id!r} was already requeued or dropped")
        return str(new_id)

    async def drop(self, dead_letter_id: str, partition: int | None = None) -> None:
        """Delete a dead letter, even one that does not decode (junk is what one drops)."""
        partition, entry_id, _ = await self._find(dead_letter_id, partition)
        await self.redis.xdel(self.keys.dead_letters(partition), entry_id)

"""Write events as a worker reads them: decode one entry and check it on its own.

Nothing read from a write stream is trusted. :class:`EventDecoder` refuses (raises on) an
entry that is poison by itself: over the size bound, not a write event, a previous-event
link that is not a stream id, a version outside 1..2**53, a lane that does not match its
scope and ids or does not belong to the partition it is read from. Whether an event is
genuine (on its lane's chain of writes) is the commit protocol's question
(:mod:`workers.engine.commit`), not this module's.
"""

from __future__ import annotations

from signals.core.codec import FIELD, decode_write
from signals.core.lane import is_stream_id
from signals.core.memory import MAX_EVENT_CHARS
from signals.core.models import WriteEvent
from signals.core.wire import MAX_VERSION, make_lane
from signals.streams.deadletters import KEPT_CHARS
from signals.streams.keys import Keys, validate_id

__all__ = ("PREV_FIELD", "REQUEUED_FIELD", "EventDecoder", "printable", "text")

# MAX_EVENT_CHARS (signals.core.memory): the largest write event decoded (an honest one
# holds one document, 64 KiB by default; writers refuse a larger one), and the largest
# document a worker reads to catch a lane up (a writer's own max_bytes setting is not a
# limit on what another writer stores by hand).
#: The write-event field naming the lane's previous event (set by the write script).
PREV_FIELD = "p"
#: The field of an event put back by ``dlq requeue`` (requeue.lua): the dead letter's id.
REQUEUED_FIELD = "r"


class EventDecoder:
    """Decodes and checks write events; remembers (bounded by ``capacity``) the lanes whose
    ids and partition it has checked, so that each is checked once."""

    def __init__(self, keys: Keys, capacity: int) -> None:
        self.keys = keys
        self.capacity = capacity
        self._lanes: dict[str, int] = {}  # lane -> its partition, for lanes whose id passed validate_id

    def decode(self, fields: dict[str, str], partition: int) -> tuple[WriteEvent, str | None, bool]:
        """The event of one entry read from ``partition``'s stream, its chain link (the
        previous event's id, if any) and whether ``dlq requeue`` put it back; raises
        ``KeyError``, ``ValueError``, ``TypeError``, msgspec's errors or a
        ``WmSignalsError`` on poison."""
        raw = fields.get(FIELD)
        if raw is None:  # the dead letter's reason names what is missing (a KeyError said only 'e')
            raise ValueError(f"no {FIELD!r} field (the event's JSON); fields: {', '.join(sorted(fields))[:200]}")
        if len(raw) > MAX_EVENT_CHARS:  # bounded work: an honest event holds one document
            raise ValueError(f"the event is {len(raw):,} characters, over {MAX_EVENT_CHARS:,}")
        event = decode_write(raw)
        prev = fields.get(PREV_FIELD)
        if prev and not is_stream_id(prev):
            raise ValueError(f"field {PREV_FIELD} is {prev[:40]!r}, not a stream id")
        if not 1 <= event.version <= MAX_VERSION:
            raise ValueError(f"version {event.version} is outside 1..2**53")
        owner = event.resource_id if event.scope == "resource" else event.thread_id
        if not owner or event.lane != make_lane(event.scope, owner):
            raise ValueError(f"lane {event.lane[:80]!r} does not match its scope and ids")
        if self._lanes.get(event.lane) != partition:  # each lane's id and partition checked once
            validate_id(owner, "the event's " + event.scope + " id")
            if self.keys.partition(event.lane) != partition:
                raise ValueError(f"lane {event.lane[:80]!r} does not belong to partition {partition}")
            if len(self._lanes) >= self.capacity:
                self._lanes.clear()
            self._lanes[event.lane] = partition
        return event, prev, REQUEUED_FIELD in fields


def printable(fields: dict[str, str]) -> dict[str, str]:
    """An entry's fields as they can be stored in a dead letter: valid text (bytes that
    were not UTF-8 shown as ``\\xNN``), bounded."""
    return {text(k)[:200]: text(v)[:KEPT_CHARS] for k, v in list(fields.items())[:20]}


def text(value: object) -> str:
    """``str(value)`` as valid UTF-8 (lone surrogates from undecodable bytes escaped)."""
    return str(value).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

"""Stream hygiene a worker runs between batches: bounded write streams.

Write streams are trimmed below their oldest unacknowledged entry (or, with nothing
pending, past the last delivered one), so an event is removed only once every consumer
of the group has acknowledged it. A stream that has run out of ids (a hand-made entry
with the largest one) is emptied and numbered from the start again (see ``_restart``).
Signal streams are trimmed elsewhere, by the commit script, and only at snapshot
boundaries.

Nothing here is trusted either: a write stream is where writers add entries, with ids of
their choosing (``XADD`` takes an explicit id). A stream the trim cannot handle is skipped
with a warning naming it, and the others are still trimmed; only whole-server conditions
and a missing permission (the deployment's fault, not a lane's) reach the caller.
"""

from __future__ import annotations

import re

import structlog
from redis import exceptions as redis_exc

from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import is_whole_server

__all__ = ("id_after", "trim_write_streams")

log = structlog.get_logger(__name__)

_MAX_PART = 2**64 - 1  # both halves of a stream id are unsigned 64-bit numbers
_ID = re.compile(r"[0-9]+-[0-9]+")


async def trim_write_streams(redis: Client, keys: Keys) -> int:
    """Trim each write stream below its oldest unacknowledged entry; returns entries removed."""
    removed = 0
    for stream in keys.all_writes():
        try:
            removed += await _trim(redis, stream)
        except redis_exc.ResponseError as e:
            if is_whole_server(e) or isinstance(e, redis_exc.NoPermissionError):
                raise
            log.warning("worker.trim_skipped", stream=stream, error=str(e))
    return removed


async def _trim(redis: Client, stream: str) -> int:
    if await redis.type(stream) != "stream":  # absent, or another type (the reader reports it)
        return 0
    groups = await redis.xinfo_groups(stream)
    group = next((g for g in groups if g["name"] == GROUP), None)
    if group is None:
        return 0
    summary = await redis.xpending(stream, GROUP)
    if summary["pending"]:
        min_id = summary["min"]
    else:  # everything delivered is acknowledged: trim past the last delivered entry
        last = group["last-delivered-id"]
        min_id = id_after(last)
        if min_id is None:
            return await _restart(redis, stream, last)
    return int(await redis.xtrim(stream, minid=min_id, approximate=False))


async def _restart(redis: Client, stream: str, last: str) -> int:
    """Empty a write stream whose last delivered entry has the largest id there is, and
    let it number its entries from the start again.

    Only a hand-made entry can have that id (a writer's ``XADD`` with an explicit id); from
    then on Redis refuses every new entry of the stream ("exhausted the last possible ID"),
    so every lane of its partition would stop taking writes. With nothing pending every
    entry has been processed (the hostile one dead-lettered), so none is lost: the entries
    go, the stream's last id and the group's go back to ``0-0``, and the next write gets an
    id from the clock again, above every genuine id before (the documents' chains keep
    linking to those; a link to a trimmed entry is what any trim leaves).
    """
    if not _ID.fullmatch(last):
        return 0
    # Redis 7 keeps the largest deleted id, which XSETID must not go below unless told;
    # Redis 6.2 knows neither option and refuses the call's arity (the transaction then
    # runs nothing: EXECABORT), so it is made again in 6.2's words.
    try:
        removed = await _restart_call(redis, stream, "ENTRIESADDED", 0, "MAXDELETEDID", "0-0")
    except redis_exc.ResponseError as e:
        if "wrong number of arguments" not in str(e).lower():
            raise
        removed = await _restart_call(redis, stream)
    log.warning("worker.write_stream_restarted", stream=stream, last_id=last,
                note="its last entry had the largest stream id (added by hand); its entries were all processed")
    return removed


async def _restart_call(redis: Client, stream: str, *options: str | int) -> int:
    """Empty ``stream`` and set its last id and its group's to ``0-0``, in one transaction
    (``options``: XSETID's); returns the entries removed."""
    pipe = redis.pipeline(transaction=True)
    pipe.xtrim(stream, maxlen=0, approximate=False)
    pipe.execute_command("XSETID", stream, "0-0", *options)
    pipe.execute_command("XGROUP", "SETID", stream, GROUP, "0-0")
    removed, _, _ = await pipe.execute()
    return int(removed)


def id_after(entry_id: str) -> str | None:
    """The stream id right after ``entry_id`` (``None`` after the largest one, or when
    ``entry_id`` is not a stream id)."""
    if not _ID.fullmatch(entry_id):
        return None
    m, s = (int(part) for part in entry_id.split("-"))
    if s < _MAX_PART:
        return f"{m}-{s + 1}"
    return f"{m + 1}-0" if m < _MAX_PART else None

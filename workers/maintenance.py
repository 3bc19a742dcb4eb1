"""Stream hygiene a worker runs between batches: bounded write streams.

Write streams are trimmed below their oldest unacknowledged entry (or, with nothing
pending, past the last delivered one), so an event is removed only once every consumer
of the group has acknowledged it. Signal streams are trimmed elsewhere, by the commit
script, and only at snapshot boundaries.
"""

from __future__ import annotations

from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys

__all__ = ("trim_write_streams",)


async def trim_write_streams(redis: Client, keys: Keys) -> int:
    """Trim each write stream below its oldest unacknowledged entry; returns entries removed."""
    removed = 0
    for stream in keys.all_writes():
        if await redis.type(stream) != "stream":  # absent, or another type (the reader reports it)
            continue
        groups = await redis.xinfo_groups(stream)
        group = next((g for g in groups if g["name"] == GROUP), None)
        if group is None:
            continue
        summary = await redis.xpending(stream, GROUP)
        if summary["pending"]:
            min_id = summary["min"]
        else:
            last = group["last-delivered-id"]
            ms, _, seq = last.partition("-")
            min_id = f"{ms}-{int(seq or 0) + 1}"
        removed += await redis.xtrim(stream, minid=min_id, approximate=False)
    return removed

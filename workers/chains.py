"""The links of lanes' write chains a worker has found by walking them, kept between
batches so that later events are placed without walking again.

A chain walk (:func:`workers.lane_state.walk_chains`, or the commit script's check of a
steady-state lane) goes from a document's event down to a batch's, and every id it
passes is genuine (each names the one before it, field ``p``). A later batch whose events
are among those ids is placed from them, and its steady-state check may stop at the
newest of them (the lane's head) instead of walking to the batch. What is kept is
bounded: past the tracking cache's size everything is dropped, and a lost link is
walked again (one round trip), never trusted without a walk.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from workers.lane_state import Pending

__all__ = ("ChainLinks",)


class ChainLinks:
    """Per lane: the links found by walks (id -> the id before it) and the newest id of
    them (where the links start)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.known: dict[str, dict[str, str]] = {}
        self.heads: dict[str, str] = {}

    def links(self, lane: str) -> dict[str, str] | None:
        """The lane's known links, if any."""
        return self.known.get(lane)

    def head_for(self, lane: str, eid: str) -> str | None:
        """The lane's head, when ``eid`` (the newest event of its batch) is among its known
        links: a steady-state check may then stop there."""
        known = self.known.get(lane)
        return self.heads.get(lane) if known and eid in known else None

    def committed(self, lane: str, entries: Iterable[Pending], walked: list[str]) -> None:
        """After a commit: forget the committed events' links (no longer needed to place
        later events) and remember those a steady-state check walked (the next events).

        The check reports the ids it walked, newest first, not the stop it reached (the
        batch's newest event or the head): the last one is left unlinked, and a later walk
        on the stream links it (one step)."""
        known = self.known.get(lane)
        if known is not None:
            for e in entries:
                known.pop(e.entry_id, None)
            if not known:
                del self.known[lane]
                self.heads.pop(lane, None)
        if walked:  # genuine: the walk went from the document's event down to the batch's
            self.known.setdefault(lane, {}).update(itertools.pairwise(walked))
            self.heads[lane] = walked[0]
        if len(self.known) > self.capacity:  # bounded: a lost path is walked again
            self.known.clear()
            self.heads.clear()

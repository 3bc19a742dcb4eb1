"""The steady-state planner is the careful one where it applies (no Redis).

``plan_steady`` skips the checks ``plan_lane`` makes because, against the document
``steady_document`` returns, they cannot fail. These tests hold the two equal on seeded
random batches, and check what ``steady_document`` refuses.
"""

from __future__ import annotations

import random

from signals.core.lane import LaneDocument, LaneOptions, LaneTracking
from signals.core.models import WriteEvent
from workers.engine.commit import plan_lane, plan_steady, steady_document
from workers.engine.lane_state import LaneState, Pending

LANE = "r:u"


def _event(version: int, data: str, *, owner: str = "u", fmt: str = "markdown") -> WriteEvent:
    return WriteEvent(lane=LANE, scope="resource", format=fmt, version=version, data=data,  # type: ignore[arg-type]
                      op="replace", resource_id=owner)


def _batch(rng: random.Random, tracking: LaneTracking, size: int) -> list[Pending]:
    lines = [f"- fact {i}" for i in range(rng.randint(1, 12))]
    entries, prev, version = [], tracking.write_event, tracking.write_version
    for n in range(size):
        if rng.random() < 0.7:  # else an exact repeat (deduplicated)
            lines[rng.randrange(len(lines))] = f"- changed {rng.randint(0, 99)}"
        version += rng.choice((1, 1, 1, 2))
        entry_id = f"5-{n + 10}"
        entries.append(Pending(0, entry_id, _event(version, "\n".join(lines)), prev))
        prev = entry_id
    return entries


def test_plan_steady_equals_plan_lane_against_the_steady_document() -> None:
    """Seeded random batches (repeats, gaps in versions, a snapshot every few signals, a
    lane never signalled, a delta base unknown): same signals, acknowledgements, final
    tracking and counters, and nothing refused."""
    rng = random.Random(7)
    for case in range(300):
        options = LaneOptions(snapshot_every=rng.choice((2, 5, 20)), policy=rng.choice(("compact", "mastra")))
        fresh = case % 5 == 0
        tracking = LaneTracking() if fresh else LaneTracking(
            version=3, cache_key="sha256:" + "0" * 64, mode="delta", write_version=4,
            value=None if case % 7 == 0 else "- fact 0", since_snapshot=rng.randint(1, 4), tail="2-1",
            write_event="1-4")
        tracking = LaneTracking(write_event="1-1") if fresh else tracking
        entries = _batch(rng, tracking, rng.randint(1, 8))
        doc = steady_document(LANE, entries, tracking)
        assert doc is not None
        careful = plan_lane(LANE, LaneState(doc=doc, tracking=tracking), entries, options=options, now="t",
                            signer=None)
        steady = plan_steady(LANE, doc, tracking, entries, options=options, now="t", signer=None)
        assert careful is not None
        commit, poison = careful
        assert poison == []
        assert (steady.signals, steady.macs, steady.snapshots, steady.acks, steady.final, steady.stats) == (
            commit.signals, commit.macs, commit.snapshots, commit.acks, commit.final, commit.stats), case
        assert [e.entry_id for e in steady.entries] == [e.entry_id for e in commit.entries]


def test_steady_document_refuses_what_does_not_extend_the_chain() -> None:
    """A batch is in the steady state only if it follows the tracked event link by link,
    with increasing versions of one format and owner; the document is at its newest."""
    tracking = LaneTracking(version=1, cache_key="sha256:" + "0" * 64, mode="snapshot", write_version=1,
                            value="x", since_snapshot=1, tail="2-1", write_event="1-1")
    good = [Pending(0, "1-2", _event(2, "a"), "1-1"), Pending(0, "1-3", _event(3, "b"), "1-2")]
    assert steady_document(LANE, good, tracking) == LaneDocument(LANE, None, 3, "markdown", "resource", "u", None,
                                                                 "1-3")
    assert steady_document(LANE, good, LaneTracking(version=1, write_version=1)) is None  # no tracked event
    broken = [good[0], Pending(0, "1-3", _event(3, "b"), "1-1")]  # two events name the same predecessor
    assert steady_document(LANE, broken, tracking) is None
    stale = [Pending(0, "1-2", _event(1, "a"), "1-1")]  # not past the tracked write version
    assert steady_document(LANE, stale, tracking) is None
    mixed = [good[0], Pending(0, "1-3", _event(3, "{}", fmt="json"), "1-2")]
    assert steady_document(LANE, mixed, tracking) is None
    owners = [good[0], Pending(0, "1-3", _event(3, "b", owner="v"), "1-2")]
    assert steady_document(LANE, owners, tracking) is None


def test_commit_calls_merge_light_partitions_and_split_heavy_ones() -> None:
    """On one server, partitions share a script call until it holds MERGE_EVENTS events
    (a partition is never split); on a cluster each partition is a call of its own."""
    from workers.engine.commit import LaneCommit  # noqa: PLC0415
    from workers.engine.commit_call import MERGE_EVENTS, _calls  # noqa: PLC0415
    from workers.engine.lane_state import LaneState  # noqa: PLC0415

    def commit(events: int) -> LaneCommit:
        return LaneCommit("r:x", LaneState(), [], acks=["1-1"] * events)

    order = [(0, [commit(0)]), (1, [commit(3)]), (2, [commit(5)]), (3, [commit(MERGE_EVENTS)]), (4, [commit(1)])]
    assert [[p for p, _ in group] for group in _calls(order, merge=True)] == [[0, 1, 2], [3], [4]]
    assert [[p for p, _ in group] for group in _calls(order, merge=False)] == [[0], [1], [2], [3], [4]]

"""How a batch is split into chunk commits, and the chain links kept between batches (no Redis)."""

from __future__ import annotations

import random

from signals.core.models import WriteEvent
from workers.engine import chunking
from workers.engine.chains import ChainLinks
from workers.engine.lane_state import Pending


def _pending(partition: int, n: int, lane: str = "r:u") -> Pending:
    event = WriteEvent(lane=lane, scope="resource", format="markdown", version=n + 1, data="x", op="replace",
                       resource_id="u")
    return Pending(partition, f"{n + 1}-0", event)


def _lanes(rng: random.Random, count: int) -> list[tuple[str, list[Pending]]]:
    lanes = []
    for k in range(count):
        partition = rng.randrange(16)
        lanes.append((f"r:u{k}", [_pending(partition, n, f"r:u{k}") for n in range(rng.randint(1, 9))]))
    return lanes


def test_chunks_keep_partitions_whole_and_every_lane_once() -> None:
    """Seeded batches: every lane lands in exactly one chunk, no partition spans two
    chunks, at most MAX_CHUNKS chunks, and a batch not worth chunks stays one."""
    rng = random.Random(7)
    for _ in range(200):
        lanes = _lanes(rng, rng.randint(1, 120))
        out = chunking.chunks(lanes)
        assert sorted(name for chunk in out for name, _ in chunk) == sorted(name for name, _ in lanes)
        assert len(out) <= chunking.MAX_CHUNKS
        owners: dict[int, int] = {}
        for n, chunk in enumerate(out):
            for _, entries in chunk:
                assert owners.setdefault(entries[0].partition, n) == n, "a partition split over chunks"
        if not chunking.chunked(lanes):
            assert len(out) == 1


def test_a_batch_of_twice_the_chunk_size_is_chunked() -> None:
    """The threshold: 2 * CHUNK_EVENTS events over two partitions make two chunks."""
    half = chunking.CHUNK_EVENTS
    lanes = [(lane, [_pending(p, n, lane) for n in range(half)]) for p, lane in enumerate(("r:a", "r:b"))]
    assert chunking.chunked(lanes)
    assert len(chunking.chunks(lanes)) == 2
    assert not chunking.chunked([lanes[0]])


def test_chain_links_forget_committed_events_and_remember_the_walk() -> None:
    """A commit drops its events' links and keeps those its check walked (newest first);
    the head is offered only for a batch whose newest event is a known link."""
    links = ChainLinks(capacity=10)
    links.committed("r:u", [], ["5-0", "4-0", "3-0"])
    assert links.links("r:u") == {"5-0": "4-0", "4-0": "3-0"}
    assert links.head_for("r:u", "4-0") == "5-0"
    assert links.head_for("r:u", "9-0") is None
    links.committed("r:u", [_pending(0, 4), _pending(0, 3)], [])  # entries 5-0 and 4-0
    assert links.links("r:u") is None
    assert links.head_for("r:u", "4-0") is None


def test_chain_links_are_bounded() -> None:
    """Past the capacity every lane's links go (a lost link is walked again)."""
    links = ChainLinks(capacity=3)
    for k in range(4):
        links.committed(f"r:u{k}", [], ["2-0", "1-0"])
    assert links.known == {}
    assert links.heads == {}

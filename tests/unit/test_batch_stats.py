"""BatchStats: the worker's counters."""

from __future__ import annotations

import dataclasses

from workers.engine.commit import BatchStats


def test_add_sums_every_counter() -> None:
    """Each counter is summed, whatever its place (zeros left alone, none forgotten)."""
    names = [f.name for f in dataclasses.fields(BatchStats)]
    total, other = BatchStats(), BatchStats(**{name: n + 1 for n, name in enumerate(names)})
    total.add(other)
    total.add(BatchStats(**{names[0]: 5}))
    total.add(BatchStats())
    assert dataclasses.asdict(total) == {name: n + 1 + (5 if n == 0 else 0) for n, name in enumerate(names)}

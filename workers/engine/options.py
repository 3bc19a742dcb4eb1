"""The worker engine's options: one plain object that owns every default of the engine.

The engine takes a :class:`ConsumerOptions` and nothing else of configuration (no argparse,
no pydantic-settings); the process runtime builds it from the settings
(:func:`workers.runtime.worker.consumer_options`), leaving out what was not set.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from signals.core.lane import LaneOptions
from signals.core.retention import Retention

__all__ = ("ConsumerOptions", "default_consumer_name")


def default_consumer_name() -> str:
    """``<hostname>-<pid>``: unique per process, stable for its lifetime."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """How a worker reads and commits."""

    lane: LaneOptions = field(default_factory=LaneOptions)
    batch: int = 500
    block_ms: int = 100
    retention: Retention = field(default_factory=Retention)
    claim_idle_ms: int = 15_000
    max_attempts: int = 3
    dead_letter_maxlen: int = 100_000
    tracking_cache: int = 20_000
    #: ``(index, count)``: read the partitions ``p`` with ``p % count == index`` (the
    #: processes of ``worker --processes N`` split the partitions, so that no two of them
    #: commit one lane at once); every partition by default.
    shard: tuple[int, int] = (0, 1)
    #: A lane whose last signal is older than this (and than the retention's age) is
    #: compacted to one snapshot by the maintenance (see :mod:`workers.engine.compaction`).
    compact_after_ms: int = 86_400_000
    #: Lanes the maintenance looks at per pass for compaction (0: no compaction).
    compact_batch: int = 500

"""A bounded least-recently-used map, for caches that only save round trips.

Pure: no I/O, no locking (callers run on one event loop). It does not expire entries by
age; it only keeps the ``capacity`` most recently put or read ones.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ("LRU",)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``capacity`` entries; putting one more evicts the least recently used.

    :meth:`put` and :meth:`get` make an entry the most recent; :meth:`peek` reads without
    changing the order.
    """

    __slots__ = ("_items", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recent), or ``None``."""
        if key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key]

    def peek(self, key: K) -> V | None:
        """The value of ``key``, or ``None``; the order is left as it is."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` as the most recent entry, evicting the oldest beyond ``capacity``."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def discard(self, key: K) -> None:
        """Drop ``key`` if present."""
        self._items.pop(key, None)

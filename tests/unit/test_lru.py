"""The bounded LRU behind the store's and the worker's caches."""

from __future__ import annotations

from signals.core.lru import LRU


def _filled(*keys: str, capacity: int = 3) -> LRU[str, int]:
    lru: LRU[str, int] = LRU(capacity)
    for number, key in enumerate(keys):
        lru.put(key, number)
    return lru


def test_put_beyond_capacity_evicts_the_least_recent() -> None:
    """The oldest entry goes first once there are more than ``capacity``."""
    lru = _filled("a", "b", "c", "d")
    assert len(lru) == 3
    assert lru.peek("a") is None
    assert [lru.peek(k) for k in "bcd"] == [1, 2, 3]


def test_get_makes_an_entry_the_most_recent() -> None:
    """A read entry survives the next eviction."""
    lru = _filled("a", "b", "c")
    assert lru.get("a") == 0
    lru.put("d", 3)
    assert lru.peek("a") == 0 and lru.peek("b") is None


def test_peek_leaves_the_order_alone() -> None:
    """A peeked entry is still the next to go."""
    lru = _filled("a", "b", "c")
    assert lru.peek("a") == 0
    lru.put("d", 3)
    assert lru.peek("a") is None


def test_put_of_a_known_key_replaces_it_and_makes_it_recent() -> None:
    """Re-putting a key updates its value without growing the map."""
    lru = _filled("a", "b", "c")
    lru.put("a", 10)
    lru.put("d", 3)
    assert len(lru) == 3 and lru.peek("a") == 10 and lru.peek("b") is None


def test_missing_keys_read_as_none_and_discard_is_quiet() -> None:
    """``get``/``peek`` of an absent key are ``None``; ``discard`` of one does nothing."""
    lru = _filled("a")
    assert lru.get("x") is None and lru.peek("x") is None
    lru.discard("x")
    lru.discard("a")
    assert len(lru) == 0


def test_a_lowered_capacity_applies_at_the_next_put() -> None:
    """Shrinking ``capacity`` evicts the oldest entries when the next one is put."""
    lru = _filled("a", "b", "c")
    lru.capacity = 1
    lru.put("d", 3)
    assert len(lru) == 1 and lru.peek("d") == 3


def test_zero_capacity_keeps_nothing() -> None:
    """With ``capacity`` 0 every put is evicted at once (a cache turned off)."""
    lru = _filled("a", capacity=0)
    assert len(lru) == 0

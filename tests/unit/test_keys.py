"""Key builders that must agree with each other."""

from __future__ import annotations

from fnmatch import fnmatchcase

from hypothesis import given
from hypothesis import strategies as st

from signals.streams.acl import KINDS
from signals.streams.keys import Keys


@given(lane=st.text(min_size=1, max_size=40), partitions=st.integers(1, 4096))
def test_worker_keys_are_the_three_lane_keys(lane: str, partitions: int) -> None:
    """The commit script's per-lane keys, built together, are the ones built one by one."""
    keys = Keys("ns", partitions)
    assert keys.worker_keys(lane) == (keys.track(lane), keys.signals(lane), keys.snapshots(lane))


_NAMESPACE = st.text("abcAZ09_.:-", min_size=1, max_size=12)
_ID = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="{}"), min_size=1, max_size=12)


def _every_key(keys: Keys, lane: str, instance: str) -> list[str]:
    return [keys.doc(lane), keys.track(lane), keys.signals(lane), keys.snapshots(lane),
            keys.idempotency(lane, instance), keys.thread(instance), keys.deliveries(instance),
            keys.writes(0), keys.dead_letters(0), keys.failures(0), keys.lanes(0),
            keys.config(), keys.heartbeat(instance)]


#: the words of the namespace-level keys, as a longer namespace's next segment: where a
#: prefix collision would be
_SUFFIX = st.one_of(st.sampled_from(["hb", "config", "hb:x", "config:x", "p0"]), _NAMESPACE)


@given(outer=_NAMESPACE, suffix=_SUFFIX, lane=_ID, instance=_ID)
def test_no_acl_pattern_reaches_into_a_namespace_it_prefixes(outer: str, suffix: str, lane: str,
                                                              instance: str) -> None:
    """A namespace is the tenant boundary: no ACL glob of ``wm`` matches a key of ``wm:hb``
    (or of any namespace it prefixes), and no glob of the longer one matches a key of the
    shorter (the heartbeat glob was ``wm:hb:*``: the workers of ``wm`` could write every key
    of the namespace ``wm:hb``)."""
    a, b = Keys(outer), Keys(f"{outer}:{suffix}")
    for mine, theirs in ((a, b), (b, a)):
        patterns = [mine.pattern(kind) for kind in KINDS]
        for key in _every_key(theirs, f"r:{lane}", instance):
            assert not [p for p in patterns if fnmatchcase(key, p)], key

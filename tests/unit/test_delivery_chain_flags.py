"""Which records :func:`~signals.streams.delivery_chain.check_chain` names as at fault
(``LogIntegrity.flagged``, what a reader marks where it shows them), without Redis."""

from __future__ import annotations

import msgspec

from signals.core.models import Attributes, Delivery
from signals.streams.delivery_chain import ChainState, check_chain, link


def _log(count: int, key: bytes | None = None) -> list[tuple[str, Delivery]]:
    """``count`` records of one window, chained as an agent chains them, with entry ids ``n-0``."""
    state = ChainState(key)
    return [(f"{n}-0", link(state, Delivery(thread_id="t", step=n, lane="r:u", version=n, mode="snapshot",
                                             reason="new", cache_key="sha256:x", contents="x",
                                             attributes=Attributes("markdown", "resource"), window="w")))
            for n in range(1, count + 1)]


def test_a_whole_log_flags_nothing() -> None:
    integrity = check_chain(_log(5), entries_added=5, retention=100)
    assert integrity.complete and integrity.flagged == ()


def test_the_retentions_trim_flags_nothing() -> None:
    """The oldest records trimmed by the retention (the log holds at least its retention): not complete, no fault."""
    integrity = check_chain(_log(10)[4:], entries_added=10, retention=6)
    assert not integrity.complete and not integrity.tampered
    assert integrity.flagged == ()


def test_a_cut_start_flags_the_first_record_left() -> None:
    integrity = check_chain(_log(10)[4:], entries_added=10, retention=100)
    assert integrity.tampered
    assert integrity.flagged == (("5-0", "its window's first retained record is its #5: "
                                          "the records before it were removed"),)


def test_a_gap_flags_the_record_after_it() -> None:
    records = _log(6)
    integrity = check_chain(records[:2] + records[4:], entries_added=6, retention=100)
    assert ("5-0", "record #5 follows #2 of its window: 2 record(s) before it were removed") in integrity.flagged
    assert {entry for entry, _ in integrity.flagged} == {"5-0"}


def test_a_forged_record_and_an_unchained_one_are_flagged() -> None:
    records = _log(3)
    forged = msgspec.structs.replace(records[-1][1], step=4, seq=4, chain="h:" + "0" * 64)
    unchained = msgspec.structs.replace(records[-1][1], step=5, seq=None, chain=None)
    integrity = check_chain([*records, ("4-0", forged), ("5-0", unchained)], entries_added=5, retention=100)
    assert integrity.flagged == (
        ("4-0", "does not chain to the record before it: changed, or made by someone else"),
        ("5-0", "carries no chain: nothing proves an agent wrote it here"))


def test_with_the_key_records_chained_without_it_are_flagged() -> None:
    key = b"k" * 32
    signed, unsigned = _log(2, key), _log(3)[2:]
    integrity = check_chain(signed + unsigned, entries_added=3, retention=100, key=key)
    assert integrity.tampered
    assert ("3-0", "not signed with the signing key") in integrity.flagged
    assert {entry for entry, _ in integrity.flagged} == {"3-0"}

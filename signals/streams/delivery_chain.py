"""The delivery log's chain: records that say what came before them, and the check that a
log's history is whole.

A role that may append to a delivery log may also trim it (``XADD ... MAXLEN 0`` is an
append to the ACL and a trim to Redis), and may append records of its own. So each record
an agent writes carries, per window (one agent process's tracker):

- ``seq``: its number in the window (1, 2, 3...), and
- ``chain``: a digest of the window's previous record's chain and this record's own
  JSON (without ``chain``): ``h:<sha256 hex>``, or with a signing key ``k:<HMAC-SHA256
  hex>``, which no one without the key can make.

:func:`check_chain` says whether a log is whole: every window's records numbered from 1
without a gap and each chain recomputing; the stream's own count of the entries ever
added to it (``XINFO STREAM``'s ``entries-added``, which no append can lower) equal to
the records there are, unless the log is longer than its retention (the retention's
approximate trim removed the oldest; the windows then begin later, and the log is
reported as not complete, never as whole). Records without a chain (no ``seq``)
are read as delivery records and reported as unchained. Two things keep a log from
being reported whole without making it tampered: a server that does not report
``entries-added`` (Redis before 7.0: a removal cannot be ruled out), and signed chains
(``k:``) checked without the signing key (anyone may write ``k:`` and any hex).

What it does not do: it reads nothing itself; :class:`~signals.streams.deliveries.DeliveryLog`
reads the records and ``XINFO STREAM``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from signals.core.codec import encode_json
from signals.core.models import Delivery

__all__ = ("ChainState", "LogIntegrity", "check_chain", "link")

#: The chain value before a window's first record.
GENESIS = ""


def _digest(key: bytes | None, previous: str, body: str) -> str:
    data = previous.encode() + b"\n" + body.encode("utf-8", "surrogateescape")
    if key:
        return "k:" + hmac.new(key, data, hashlib.sha256).hexdigest()
    return "h:" + hashlib.sha256(data).hexdigest()


@dataclass(slots=True)
class ChainState:
    """An appender's place in each of its windows' chains (kept in memory: a window is
    one process's, and starts at its first record)."""

    key: bytes | None = None
    windows: dict[str, tuple[int, str]] = field(default_factory=dict)


def link(state: ChainState, record: Delivery) -> Delivery:
    """``record`` numbered and chained after its window's previous record (``state`` moves on)."""
    window = record.window or ""
    seq, previous = state.windows.get(window, (0, GENESIS))
    numbered = msgspec.structs.replace(record, seq=seq + 1, chain=None)
    chained = msgspec.structs.replace(numbered, chain=_digest(state.key, previous, encode_json(numbered)))
    state.windows[window] = (seq + 1, chained.chain or "")
    return chained


@dataclass(frozen=True, slots=True)
class LogIntegrity:
    """Whether a delivery log's history is whole.

    Attributes:
        complete: every record is there, from each window's first on, and none was added
            that is not the agents'.
        tampered: the log shows a removal or an addition that is not its retention's
            (a cut, a gap, a record whose chain does not recompute, a record made without
            the signing key): what it holds is not what the model saw.
        problems: what is wrong, one line each (empty when complete).
        flagged: the records at fault: ``(entry id, what is wrong with it)``, one pair per
            fault (a record with two faults is named twice), for a reader to mark them where
            it shows them. The first retained record of a window whose start the retention
            trimmed is not at fault; a removal with no record after it (an emptied log)
            flags none: ``problems`` says it.
    """

    complete: bool
    tampered: bool
    problems: tuple[str, ...]
    flagged: tuple[tuple[str, str], ...] = ()


def check_chain(records: Sequence[tuple[str, Delivery]], *, entries_added: int | None, retention: int,
                key: bytes | None = None, verify_keys: Sequence[bytes] = (), others: int = 0) -> LogIntegrity:
    """Check a log's records (oldest first) against their chains and the stream's count of
    entries ever added (``None``: Redis before 7.0 does not tell). ``others``: the entries
    the stream holds besides ``records`` (entries that are not records, which the caller
    reports): they count as held, not as removed. See the module header."""
    problems: list[str] = []
    tampered = False
    windows: dict[str, tuple[int, str]] = {}
    unchained = 0
    late_start: list[str] = []
    flagged: list[tuple[str, str]] = []
    late_flags: list[tuple[str, str]] = []  # at fault only when the removal was not the retention's
    for entry_id, record in records:
        if record.seq is None or record.chain is None:
            unchained += 1
            flagged.append((entry_id, "carries no chain: nothing proves an agent wrote it here"))
            continue
        window = record.window or ""
        seq, previous = windows.get(window, (0, None))
        if previous is None:
            previous = GENESIS
            if record.seq != 1:
                late_start.append(f"window {window or '(none)'} begins at its record #{record.seq} ({entry_id})")
                late_flags.append((entry_id, f"its window's first retained record is its #{record.seq}: "
                                             "the records before it were removed"))
                seq, previous = record.seq - 1, None
        elif record.seq != seq + 1:
            tampered = True
            problems.append(f"entry {entry_id}: window {window or '(none)'} record #{record.seq} follows #{seq}: "
                            f"{'records are missing' if record.seq > seq + 1 else 'a record repeats a number'}")
            flagged.append((entry_id, f"record #{record.seq} follows #{seq} of its window: "
                                      + (f"{record.seq - seq - 1} record(s) before it were removed"
                                         if record.seq > seq + 1 else "it repeats a record's number")))
        body = encode_json(msgspec.structs.replace(record, chain=None))
        if previous is not None and not _chain_ok(record.chain, previous, body, key, verify_keys):
            tampered = True
            problems.append(f"entry {entry_id}: its chain does not recompute "
                            + ("with the signing key (not written by an agent holding it)" if key else
                               "(the record was changed, or made by someone else)"))
            flagged.append((entry_id, "does not chain to the record before it: changed, or made by someone else"))
        windows[window] = (record.seq, record.chain)
    if key and any(r.chain and not r.chain.startswith("k:") for _, r in records):
        tampered = True
        problems.append("records not signed with the signing key are in the log")
        flagged += [(entry_id, "not signed with the signing key") for entry_id, r in records
                    if r.chain and not r.chain.startswith("k:")]
    problems += _unverified(records, unchained, key)
    cut = _removals(len(records) + others, entries_added, retention, late_start)
    if cut[0]:
        flagged += late_flags
    return LogIntegrity(not (problems or cut[1]), tampered or cut[0], (*problems, *cut[1]), tuple(flagged))


def _unverified(records: Sequence[tuple[str, Delivery]], unchained: int, key: bytes | None) -> list[str]:
    """What keeps records from being checked: no chain, or a signed one and no key to check it."""
    problems = []
    if unchained:
        problems.append(f"{unchained} record(s) carry no chain (written before chained logs): their history "
                        "cannot be proven whole")
    signed = 0 if key else sum(1 for _, r in records if r.chain and r.chain.startswith("k:"))
    if signed:
        problems.append(f"{signed} record(s) are signed and no signing key was given to check them (the UI's "
                        "or replay's --signing-key-file): their chains cannot be verified")
    return problems


def _removals(held: int, entries_added: int | None, retention: int, late_start: list[str]) -> tuple[bool, list[str]]:
    """Whether entries were removed other than by retention, and what to say of removals."""
    problems: list[str] = []
    tampered = False
    if entries_added is None:  # a cut leaves nothing to see: what is held cannot be told whole
        problems.append("the server does not report how many entries were ever added to the log (XINFO STREAM "
                        "has no entries-added before Redis 7.0): removals cannot be ruled out")
        if late_start:  # the retention trims only a log longer than itself
            problems += late_start
            tampered = held < retention
        return tampered, problems
    removed = entries_added - held
    if removed > 0:
        by_retention = held >= retention
        tampered = not by_retention
        problems.append(f"{removed} entr{'y was' if removed == 1 else 'ies were'} removed from the log "
                        + ("(its retention trims the oldest)" if by_retention else
                           f"while it holds fewer than its retention of {retention} records: not by its "
                           "retention (a trim by a role that may append, or a deletion)"))
    if late_start:
        problems += late_start
        tampered = tampered or removed <= 0  # a window that begins late with nothing removed: made so
    return tampered, problems


def _chain_ok(chain: str, previous: str, body: str, key: bytes | None, verify_keys: Sequence[bytes] = ()) -> bool:
    if chain.startswith("k:") and not key:
        return True  # signed, and this reader holds no key: check_chain says the chain is not verified
    if not chain.startswith("k:"):
        return hmac.compare_digest(chain, _digest(None, previous, body))
    return any(hmac.compare_digest(chain, _digest(k, previous, body)) for k in (key, *verify_keys) if k)

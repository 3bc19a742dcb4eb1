"""Verify a lane against the truth: its signal chain, and its latest signal against the
stored document. Read-only.

:func:`check_document` compares the latest signal with the stored document (the truth the
chain is meant to deliver): a well-formed chain whose last signal was forged, or whose
text differs from the document, fails; a worker that is behind is reported as such.
:func:`verify_lane` reads the document, the worker's progress and the chain (in that
order, retrying if the stream moved meanwhile) and does all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signals.core.cachekey import js_trim
from signals.core.lane import WRITE_VERSION_FIELD, is_stream_id
from signals.core.models import Signal
from signals.core.signing import Signer
from signals.core.wire import parse_version
from signals.errors import CorruptDataError, InvalidInputError, VerifyError
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.replay import (
    Materialised,
    _text,
    materialise,
    raw_command,
    read_signals,
)

__all__ = ("DocumentState", "VerifyReport", "check_document", "read_document_state", "read_verifiable", "verify_lane")


@dataclass(frozen=True, slots=True)
class DocumentState:
    """The truth a lane's signals are checked against, read after the signals.

    Attributes:
        lane: the lane.
        version: the stored document's version (``None``: no document).
        data: the stored document's text (``None``: no document).
        processed: the document version the workers have processed (tracking ``wv``).
        tail: the id of the signal stream's last entry when the document was read.
        event_gone: the document is ahead of what the workers processed and its own write
            event (its ``eid``) is not in the write stream (trimmed by a role that may
            append): no worker will read it; a worker's reconciliation signals the lane.
    """

    lane: str
    version: int | None
    data: str | None
    processed: int
    tail: str | None
    event_gone: bool = False


def _version(raw: object, what: str) -> int:
    try:
        return parse_version(raw, what)
    except CorruptDataError as e:  # verification reports it as a failed check
        raise VerifyError(str(e)) from e


async def _command(redis: Client, key: str, *args: str | int) -> Any:
    try:
        return await raw_command(redis, key, list(args), kind="the type wm-signals keeps there")
    except CorruptDataError as e:  # verification reports it as a failed check
        raise VerifyError(str(e)) from e


async def read_document_state(redis: Client, keys: Keys, lane: str) -> DocumentState:
    """The stored document, the workers' progress and the stream's tail, in that order.

    The order makes :func:`check_document` sound against concurrent writers and workers:
    a signal committed after the history was read moves the tail (the commit writes the
    signal and the progress at once), so a comparison is only made when the history read
    is still the whole history.

    Raises:
        VerifyError: the document hash or the tracking hash holds something no writer or
            worker stores (a version that is not an integer, text that is not UTF-8).
    """
    doc_key, track_key, stream = keys.doc(lane), keys.track(lane), keys.signals(lane)
    raw_data, raw_version, raw_eid = await _command(redis, doc_key, "HMGET", doc_key, "data", "version", "eid")
    version = None if raw_version is None else _version(raw_version, f"{doc_key} field version")
    data = None if raw_data is None else _text(raw_data)
    if raw_data is not None and data is None:
        raise VerifyError(f"{doc_key} field data is not UTF-8 text")
    processed_raw = await _command(redis, track_key, "HGET", track_key, WRITE_VERSION_FIELD)
    processed = 0 if processed_raw is None else _version(processed_raw, f"{track_key} field {WRITE_VERSION_FIELD}")
    tail = await _command(redis, stream, "XREVRANGE", stream, "+", "-", "COUNT", 1)
    eid = None if raw_eid is None else _text(raw_eid)
    gone = False
    if version is not None and processed < version and eid and is_stream_id(eid):
        writes = keys.writes(keys.partition(lane))
        gone = not await _command(redis, writes, "XRANGE", writes, eid, eid)
    return DocumentState(lane, version, data, processed, _text(tail[0][0]) if tail else None, gone)


def check_document(last: Materialised, state: DocumentState) -> str:
    """Check the lane's latest signal against the stored document; returns a one-line note.

    Rules (``W`` the signal's writeVersion, ``D`` the document's version, ``P`` the
    version the workers have processed):

    * the signal must carry a writeVersion, and ``W <= D``; the lane must have a document;
    * ``W == D``: its rebuilt text must equal the document trimmed with ``js_trim``;
    * ``W < D`` and ``P >= D`` (caught up): the writes after ``W`` produced no signal, so
      they left the text unchanged (dedup): the text must still equal the document, except
      that an empty document never has a signal;
    * ``W < D`` and ``P < D``: the workers are behind: that is reported, not a failure,
      and the text is not compared;
    * the stream changed after the history was read: not compared (reported).

    Raises:
        VerifyError: the signal disagrees with the document (names the entry).
    """
    s = last.signal
    where = f"entry {last.entry_id} (version {s.version}, {s.mode})"
    if state.tail != last.entry_id:
        return "the lane changed while being read: the latest signal was not compared with the document"
    if state.version is None or state.data is None:
        raise VerifyError(f"{where}: the lane has no stored document, so no worker signalled this text")
    doc = state.version
    if s.write_version is None:
        raise VerifyError(f"{where}: no writeVersion, so it is no worker's signal of the stored document")
    if s.write_version > doc:
        raise VerifyError(f"{where}: writeVersion {s.write_version} is beyond the document's version {doc}")
    text = js_trim(state.data)
    if s.write_version == doc:
        if last.value != text:
            raise VerifyError(f"{where}: its text differs from the stored document (version {doc})")
        return f"latest signal v{s.version} matches the stored document (version {doc})"
    if state.processed < doc:
        return _behind(state, doc, s)
    if not text:
        return f"document version {doc} is empty (empty data has no signal); latest signal v{s.version} not compared"
    if last.value != text:
        raise VerifyError(f"{where}: its text differs from the stored document (version {doc}, which the workers "
                          f"have processed up to {state.processed})")
    return (f"latest signal v{s.version} matches the stored document (version {doc}; writes "
            f"{s.write_version + 1}..{doc} left the text unchanged)")


def _behind(state: DocumentState, doc: int, s: Signal) -> str:
    """The note on a lane whose workers are behind its document; a failure when its write
    event is gone from the write stream (no worker will read it)."""
    if state.event_gone:
        raise VerifyError(f"the document is at version {doc} and the workers processed up to {state.processed}, and "
                          "the document's write event is gone from the write stream (trimmed): the model does not "
                          f"see version {doc} until a worker's reconciliation signals the lane (at its next "
                          "maintenance pass); if this stays, no worker is running")
    return (f"workers behind: document at version {doc}, processed up to {state.processed}; latest signal "
            f"v{s.version} is from write version {s.write_version}: not compared with the document")


async def read_verifiable(
    redis: Client, keys: Keys, lane: str, *, signer: Signer | None = None, attempts: int = 5
) -> tuple[list[tuple[str, Signal]], DocumentState]:
    """The lane's history and the document state read just after it, retried while the
    stream moves between the two reads (a busy lane), at most ``attempts`` times."""
    for _ in range(attempts - 1):
        signals = await read_signals(redis, keys, lane, signer=signer)
        state = await read_document_state(redis, keys, lane)
        if state.tail == (signals[-1][0] if signals else None):
            return signals, state
    signals = await read_signals(redis, keys, lane, signer=signer)
    return signals, await read_document_state(redis, keys, lane)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :func:`verify_lane` checked."""

    signals: int
    first_version: int
    last_version: int
    document: str


async def verify_lane(redis: Client, keys: Keys, lane: str, *, signer: Signer | None = None) -> VerifyReport:
    """Verify a lane end to end: every entry, the chain, every cacheKey, and the latest
    signal against the stored document (:func:`check_document`).

    Raises:
        InvalidInputError: the lane has no retained signals.
        VerifyError: the first problem found, naming the entry.
    """
    signals, state = await read_verifiable(redis, keys, lane, signer=signer)
    if not signals:
        raise InvalidInputError(f"no signals retained for lane {lane!r}")
    items = list(materialise(signals, lane=lane))
    note = check_document(items[-1], state)
    return VerifyReport(len(items), items[0].signal.version, items[-1].signal.version, note)


"""A lane's signal numbering in the pipeline: tracking state and one step of it. Pure.

The worker owns a lane's signals: it numbers them 1, 2, 3... and emits nothing for an
unchanged document (dedup by cacheKey). The lane's signal stream always holds its last
snapshot, so the decision runs with the snapshot "in the window"; the delta base is the
last signal's full text. Every ``snapshot_every``-th signal is a snapshot instead of a
delta (no extra signal), which bounds how far a subscriber that starts from the stream's
oldest retained snapshot must replay. Agent loops re-inject snapshots into their own
windows; that is a delivery, not a new lane version (see ``signals.core.window``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

import msgspec

from signals.core._time import now_iso
from signals.core.codec import invalid_utf8_at
from signals.core.models import STATE_ID, TAG_NAME, Format, Scope, Signal, WriteEvent
from signals.core.processor import DEFAULT_MAX_DIFF_EDITS, Policy, decide
from signals.core.tokens import TokenCounter, approx_tokens
from signals.core.wire import lane_owner_id, lane_scope, parse_version
from signals.errors import CorruptDataError

__all__ = (
    "DOCUMENT_FIELDS", "TRACKING_FIELDS", "VERSION_FIELD", "WRITE_VERSION_FIELD",
    "LaneDocument", "LaneOptions", "LaneTracking", "advance", "is_stream_id",
)


#: The tracking hash's field holding the lane's last signal version.
VERSION_FIELD = "v"
#: The tracking hash's field holding the last document version processed (what progress
#: and verification read on its own).
WRITE_VERSION_FIELD = "wv"
#: The tracking hash's field names, in one place: the read (``HMGET``), the parse and the
#: commit script (which stores the fields it is given by name) all use this tuple.
TRACKING_FIELDS = (VERSION_FIELD, "ck", "mode", WRITE_VERSION_FIELD, "n", "tail", "we", "kid")
#: The document hash fields a worker reads (the write script stores them).
DOCUMENT_FIELDS = ("data", "version", "format", "scope", "eid")
#: What the worker reads of a document to place a batch on its chain (no text).
HEAD_FIELDS = ("version", "eid", "format")
_CACHE_KEY = re.compile(r"sha256:[0-9a-f]{64}")
_KEY_ID = re.compile(r"([0-9a-f]{16})?")  # empty: unsigned, or not recorded
_CK_PREFIX = "sha256:"
_U64_DIGITS = 20  # 2**64 - 1 has 20 digits


def is_stream_id(value: str) -> bool:
    """Whether ``value`` is a Redis stream id (``<ms>-<seq>``, each part a 64-bit unsigned integer).

    On every write event's chain link: string methods, not a regular expression (2.5x
    faster); a part of fewer than 20 digits is below 2**64 without converting it.
    """
    ms, sep, seq = value.partition("-")
    if not (sep and value.isascii() and ms.isdigit() and seq.isdigit()):
        return False
    if len(ms) < _U64_DIGITS and len(seq) < _U64_DIGITS:
        return True
    return len(ms) <= _U64_DIGITS and len(seq) <= _U64_DIGITS and int(ms) < 2**64 and int(seq) < 2**64


class LaneTracking(msgspec.Struct, frozen=True, gc=False):
    """What the worker remembers of a lane (stored in Redis, not in the worker).

    Attributes:
        version: the lane's last signal version (0: no signal yet).
        cache_key: the cacheKey of the last signal.
        mode: the mode of the last signal.
        write_version: the last document version processed (signal or not).
        value: the full text after the last signal: the next delta's base (kept by the
            worker, not stored in the tracking hash). ``None`` when it could not be
            established from the stream: the next signal is then a snapshot.
        since_snapshot: signals since (and including) the last snapshot.
        tail: the stream id of the lane's last signal: the commit script checks that the
            signal stream still ends there, and appends a snapshot instead of a delta when
            it does not (the stream was deleted, trimmed or appended to by someone else).
        write_event: the write-stream id of the last genuine write event processed: the
            anchor of the lane's event chain (see :class:`LaneDocument`).
        key_id: the id of the key that signed the last signal
            (:attr:`signals.core.signing.Signer.key_id`; empty: unsigned, or not recorded):
            a worker whose signing key differs makes the lane's next signal a snapshot.

    A msgspec Struct with ``gc=False`` (it holds only ints and strings, so it can never be
    part of a reference cycle): the worker caches thousands of them, and untracked objects
    keep the cyclic collector's pauses out of the signal latency.
    """

    version: int = 0
    cache_key: str = ""
    mode: str = ""
    write_version: int = 0
    value: str | None = ""
    since_snapshot: int = 0
    tail: str = ""
    write_event: str = ""
    key_id: str = ""

    @classmethod
    def parse(cls, fields: list[str | None], where: str) -> LaneTracking:
        """From ``HMGET trk`` + :data:`TRACKING_FIELDS`, checked field by field.

        Raises:
            CorruptDataError: a field is not what the worker writes (names the field).
        """
        raw = dict(zip(TRACKING_FIELDS, fields, strict=True))
        if all(value is None for value in fields):
            return cls()  # a lane the workers never committed
        missing = [name for name in (VERSION_FIELD, WRITE_VERSION_FIELD, "n") if raw[name] is None]
        if missing:  # a partial hash would restart the lane's versions or forget what was processed
            raise CorruptDataError(f"{where} lacks field(s) {', '.join(missing)}")
        version = parse_version(raw[VERSION_FIELD] or "0", f"{where} field {VERSION_FIELD}")
        write_version = parse_version(raw[WRITE_VERSION_FIELD] or "0", f"{where} field {WRITE_VERSION_FIELD}")
        since = parse_version(raw["n"] or "0", f"{where} field n")
        ck, mode, tail, we = raw["ck"] or "", raw["mode"] or "", raw["tail"] or "", raw["we"] or ""
        if ck and not ck.startswith(_CK_PREFIX):  # stored without its constant prefix (see fields)
            ck = _CK_PREFIX + ck
        if version and not _CACHE_KEY.fullmatch(ck):
            raise CorruptDataError(f"{where} field ck is {ck[:80]!r}, not a cacheKey")
        if mode not in (("snapshot", "delta") if version else ("",)):
            raise CorruptDataError(f"{where} field mode is {mode[:40]!r}")
        for name, value in (("tail", tail), ("we", we)):
            if value and not is_stream_id(value):
                raise CorruptDataError(f"{where} field {name} is {value[:40]!r}, not a stream id")
        kid = raw["kid"] or ""
        if not _KEY_ID.fullmatch(kid):
            raise CorruptDataError(f"{where} field kid is {kid[:40]!r}, not a key id")
        return cls(version, ck, mode, write_version, None, since, tail, we, kid)

    def fields(self) -> list[str | int]:
        """The tracking hash as the commit script stores it, as HSET's name/value pairs, but
        for ``tail`` (the script adds the id of the last signal it appended). ``value`` is
        not stored: it is the last signal's ``value``, so Redis holds each text once.

        The cacheKey is stored without its ``sha256:`` prefix: 64 characters, so that the
        hash keeps Redis's compact encoding (a listpack holds values of up to
        ``hash-max-listpack-value``, 64 bytes by default; one longer value turns the whole
        hash into a hash table, about 400 bytes more per lane). :meth:`parse` takes both."""
        ck = self.cache_key[len(_CK_PREFIX):] if self.cache_key.startswith(_CK_PREFIX) else self.cache_key
        return [VERSION_FIELD, self.version, "ck", ck, "mode", self.mode, WRITE_VERSION_FIELD, self.write_version,
                "n", self.since_snapshot, "we", self.write_event, "kid", self.key_id]


class LaneDocument(msgspec.Struct, frozen=True, gc=False):
    """A lane's stored document as the worker reads it: the only source of signal text.

    Events are checked against it: the write script records in ``eid`` the id of the
    event it appended, and gives each event the id of the one before it (field ``p``), so
    a lane's genuine events form a chain anchored here and in the worker's tracking. An
    event's ``data`` reaches a model only when the event is on that chain; the document's
    own ``data`` is the text of its current version. Format, scope and owner come from
    the document hash and the thread record, which only writers can change.
    """

    lane: str
    data: str | None
    version: int
    format: Format
    scope: Scope
    resource_id: str | None
    thread_id: str | None
    eid: str = ""

    @classmethod
    def parse(cls, lane: str, fields: list[str | None], owner: str | None, where: str) -> LaneDocument | None:
        """From ``HMGET doc`` + :data:`DOCUMENT_FIELDS` and a thread lane's owner record;
        ``None`` when the lane has no document.

        Raises:
            CorruptDataError: a field is missing or not what the write script stores.
        """
        data, version, fmt, scope, eid = fields
        if version is None and data is None:
            return None
        if eid and not is_stream_id(eid):
            raise CorruptDataError(f"{where} field eid is {eid[:40]!r}, not a stream id")
        number = parse_version(version, f"{where} field version")
        if data is None:
            raise CorruptDataError(f"{where} has version {number} but no data")
        if invalid_utf8_at(data) is not None or (owner is not None and invalid_utf8_at(owner) is not None):
            raise CorruptDataError(f"{where} (or its thread's owner) is not valid UTF-8")
        if fmt not in ("markdown", "json"):
            raise CorruptDataError(f"{where} field format is {(fmt or '')[:40]!r}")
        doc_format = cast(Format, fmt)
        expected = lane_scope(lane)
        if scope is not None and scope != expected:  # absent: the lane's prefix says
            raise CorruptDataError(f"{where} field scope is {(scope or '')[:40]!r}, the lane is {expected} scope")
        if expected == "resource":
            return cls(lane, data, number, doc_format, "resource", lane_owner_id(lane), None, eid or "")
        return cls(lane, data, number, doc_format, "thread", owner, lane_owner_id(lane), eid or "")

    @classmethod
    def from_head(cls, lane: str, fields: list[str | None], where: str) -> LaneDocument | None:
        """From a document hash's :data:`HEAD_FIELDS` (version, event id, format: no text,
        no thread owner); ``None`` when the lane has no document.

        Raises:
            CorruptDataError: a field is not what the write script stores.
        """
        version, eid, fmt = fields
        if version is None:
            return None
        if eid is None or not is_stream_id(eid) or fmt not in ("markdown", "json"):
            raise CorruptDataError(f"{where} fields eid and format are {str(eid)[:40]!r} and {str(fmt)[:40]!r}")
        number = parse_version(version, f"{where} field version")
        if lane_scope(lane) == "resource":
            return cls(lane, None, number, cast(Format, fmt), "resource", lane_owner_id(lane), None, eid)
        return cls(lane, None, number, cast(Format, fmt), "thread", None, lane_owner_id(lane), eid)

    def event(self) -> WriteEvent:
        """The document as a write event (what :func:`advance` consumes); needs its text."""
        if self.data is None:
            raise CorruptDataError(f"{self.lane}: the document's text was not read")
        return WriteEvent(lane=self.lane, scope=self.scope, format=self.format, version=self.version,
                          data=self.data, op="replace", resource_id=self.resource_id, thread_id=self.thread_id)


@dataclass(frozen=True, slots=True)
class LaneOptions:
    """How a worker shapes a lane's signals."""

    policy: Policy = "compact"
    snapshot_every: int = 20
    omit_delta_value: bool = True
    max_diff_edits: int | None = DEFAULT_MAX_DIFF_EDITS
    """Past this many line edits the worker emits a snapshot instead of a delta (bounded
    work per write, see :func:`signals.core.processor.decide`); ``None``: no budget."""
    count_tokens: TokenCounter = approx_tokens
    """The ``compact`` policy's size test counts tokens with it (see :mod:`signals.core.tokens`)."""


def advance(
    tracking: LaneTracking, event: WriteEvent, options: LaneOptions, *, now: str | None = None,
    force_snapshot: bool = False,
) -> tuple[LaneTracking, Signal | None]:
    """Process one write event: the new tracking and the signal to emit, if any.

    ``now`` is the ``emittedAt`` stamp (a batch shares one); the current time by default.
    ``force_snapshot`` (or a tracking whose ``value`` is unknown) makes the signal a
    snapshot: the worker's repair of a lane whose stream it cannot build a delta on.

    An event at or below the processed write version is a duplicate or was superseded
    by a newer write already signalled: nothing is emitted for it.
    """
    if event.version <= tracking.write_version:
        return tracking, None
    has = tracking.version > 0 and tracking.value is not None
    proposal = decide(
        data=event.data,
        fmt=event.format,
        scope=event.scope,
        has_snapshot=has,
        current_cache_key=(tracking.cache_key or None) if has else None,
        prior=tracking.value,
        policy=options.policy,
        force_snapshot=force_snapshot or tracking.since_snapshot >= options.snapshot_every,
        max_diff_edits=options.max_diff_edits,
        count_tokens=options.count_tokens,
    )
    if proposal is None:
        return msgspec.structs.replace(tracking, write_version=event.version), None
    version = tracking.version + 1
    delta = proposal.mode == "delta"
    signal = Signal(
        id=STATE_ID,
        mode=proposal.mode,
        cache_key=proposal.cache_key,
        tag_name=TAG_NAME,
        contents=proposal.contents,
        delta=proposal.delta,
        value=None if delta and options.omit_delta_value else proposal.value,
        attributes=proposal.attributes,
        version=version,
        lane=event.lane,
        resource_id=event.resource_id,
        thread_id=event.thread_id if event.scope == "thread" else None,
        emitted_at=now or now_iso(),
        base_version=tracking.version if delta else None,
        write_version=event.version,
        policy=None if options.policy == "mastra" else options.policy,
    )
    new = LaneTracking(
        version=version,
        cache_key=proposal.cache_key,
        mode=proposal.mode,
        write_version=event.version,
        value=proposal.value,
        since_snapshot=tracking.since_snapshot + 1 if delta else 1,
    )
    return new, signal

"""Wire types: frozen msgspec Structs with camelCase JSON names.

Readable by any Redis client in any language. Field order is part of the wire format
(the Mastra fields come first, in Mastra's key order); new fields get defaults and go at
the end; unknown fields are ignored on decode so that old readers survive new writers.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = (
    "Attributes",
    "DeadLetter",
    "Delivery",
    "Format",
    "Mode",
    "Reason",
    "Scope",
    "Signal",
    "WriteEvent",
)

Format = Literal["markdown", "json"]
Scope = Literal["resource", "thread"]
Mode = Literal["snapshot", "delta"]
PatchKind = Literal["unified-diff", "json-merge-patch"]
Reason = Literal["bootstrap", "new", "reinject", "reset"]
"""Why a working-memory message was put into a window: the first snapshot, new lane signals
on an intact chain, or a fresh snapshot after the window lost its chain."""

#: The ``id`` of every working-memory state signal.
STATE_ID = "working-memory"
#: The ``tagName`` of every signal: the XML tag the model reads it in (``<working-memory ...>``).
TAG_NAME = "working-memory"


class Attributes(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """The markup attributes: ``format``, ``scope`` and, on a delta, the ``patch`` kind."""

    format: Format
    scope: Scope
    patch: PatchKind | None = None


class Signal(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True, rename="camel"):
    """A ``working-memory`` state signal, byte-compatible with Mastra's for its own fields.

    ``value`` is the full text after the signal; on a delta it may be left out of the
    stream (a subscriber rebuilds it). ``base_version`` is the lane version a delta
    applies to; ``write_version`` is the document version that produced the signal.
    ``policy`` names the worker policy that produced the signal when it is not ``mastra``
    (``mastra`` signals leave it out, byte for byte Mastra's): an agent loop coalesces the
    catch-up of ``compact`` signals by default (see :mod:`signals.core.window`).
    """

    id: str
    mode: Mode
    cache_key: str
    tag_name: str
    contents: str
    delta: str | None = None
    value: str | None = None
    attributes: Attributes
    version: int
    lane: str
    resource_id: str | None = None
    thread_id: str | None = None
    emitted_at: str | None = None
    base_version: int | None = None
    write_version: int | None = None
    policy: str | None = None


class WriteEvent(msgspec.Struct, frozen=True, gc=False, kw_only=True, rename="camel"):
    """One committed working-memory write, appended to the lane's partition write stream.

    ``data`` is the whole stored document after the write (not the caller's input), so
    that a worker needs nothing else to compute the signal, and a requeued or replayed
    event is self-contained.
    """

    lane: str
    scope: Scope
    format: Format
    version: int
    data: str
    op: Literal["replace", "merge", "create"]
    resource_id: str | None = None
    thread_id: str | None = None
    written_at: str | None = None
    idempotency_key: str | None = None


class Delivery(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True, rename="camel"):
    """One working-memory message an agent loop put into its model's context window.

    What the delivery log keeps of an :class:`~signals.core.window.Injection` (built by
    :meth:`~signals.core.window.Injection.delivery`): the window's message id and the
    full text after the version are not logged; the thread, the lane and the time are.

    ``base_version`` is set on a coalesced catch-up delta only: the version the patch
    applies to, so the record carries versions ``base_version + 1 .. version`` at once
    (a plain delta applies to ``version - 1``, and a record without the field is one).
    ``window`` names the window (one agent process's tracker, see
    :attr:`signals.core.window.WindowTracker.window_id`) that made the step: a thread's log
    holds the windows of successive processes (the field is optional: a record without it
    names no window).
    ``seq`` and ``chain`` link the record to its window's previous one (see
    :mod:`signals.streams.delivery_chain`; a record without them carries no chain).
    """

    thread_id: str
    step: int
    lane: str
    version: int
    mode: Mode
    reason: Reason
    cache_key: str
    contents: str
    attributes: Attributes
    at: str | None = None
    base_version: int | None = None
    window: str | None = None
    seq: int | None = None
    chain: str | None = None


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An event a worker gave up on, with the reason, kept for inspection and requeue."""

    stream: str
    entry_id: str
    fields: dict[str, str]
    error: str
    attempts: int
    at: str | None = None

"""Snapshot + deltas -> text: the one fold every reader of a signal chain uses. Pure.

A snapshot's contents is the text; a delta's contents applied to the text of the version
it names (:func:`signals.core.processor.apply_delta`) is the next text; the text must hash
to the link's cacheKey (:func:`key_problem`, the one cacheKey check of a rebuilt text).
The replay and its verification, a live subscription, the delivery log and an agent's
window all fold this way; what they differ in is what a link that does not rebuild means
to them, an explicit choice made at each call:

* ``strict`` (replay, verification, the delivery log, a window's own chain): the link
  raises :class:`~signals.errors.CorruptDataError` saying why; the caller names the entry
  (and may turn it into its own error, as replay does into ``VerifyError``);
* lenient (a live subscription): the link is handed back as a :class:`Refused` with the
  reason, the text stays unchanged; the caller logs, counts and skips it.

What it does not do: no I/O, no version bookkeeping (which text a delta applies to is
the caller's: the previous version, a coalesced delta's base, a log's version map).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple, Protocol, overload

from signals.core.cachekey import cache_key
from signals.core.models import Attributes, Mode
from signals.core.processor import apply_delta
from signals.errors import CorruptDataError, InvalidInputError

__all__ = ("NO_SNAPSHOT", "Link", "Refused", "fold", "key_problem", "next_text")

#: Why a delta rebuilds nothing when no text comes before it.
NO_SNAPSHOT = "a delta with no snapshot before it"


class Link(Protocol):
    """One link of a chain: a signal, a delivery record or a window's injection."""

    @property
    def mode(self) -> Mode: ...
    @property
    def contents(self) -> str: ...
    @property
    def attributes(self) -> Attributes: ...
    @property
    def cache_key(self) -> str: ...


class Refused(NamedTuple):
    """A link that does not rebuild a text (a lenient fold's answer): ``reason`` says why."""

    reason: str


def key_problem(link: Link, text: str) -> str | None:
    """``None`` when ``text`` hashes to ``link``'s cacheKey, else what is wrong."""
    if cache_key(link.attributes.format, text) != link.cache_key:
        return "cacheKey does not match the rebuilt text"
    return None


@overload
def next_text(prior: str | None, link: Link, *, strict: Literal[True], check_key: bool = True) -> str: ...
@overload
def next_text(prior: str | None, link: Link, *, strict: Literal[False], check_key: bool = True) -> str | Refused: ...
@overload
def next_text(prior: str | None, link: Link, *, strict: bool, check_key: bool = True) -> str | Refused: ...
def next_text(prior: str | None, link: Link, *, strict: bool, check_key: bool = True) -> str | Refused:
    """The text after ``link``: its contents for a snapshot, its patch applied to ``prior``
    (the text of the version it names; ``None`` when there is none) for a delta; with
    ``check_key``, the text must hash to the link's cacheKey.

    Raises:
        CorruptDataError: (``strict`` only) a delta with no text before it, a delta that
            does not apply, or a text that does not match the cacheKey (says which).
    """
    if link.mode == "snapshot":
        text = link.contents
    elif prior is None:
        return _refuse(NO_SNAPSHOT, strict=strict)
    else:
        try:
            text = apply_delta(prior, link.contents, link.attributes.patch)
        except (InvalidInputError, RecursionError) as e:  # PatchError is an InvalidInputError
            return _refuse(f"delta does not apply: {e}", strict=strict)
    reason = key_problem(link, text) if check_key else None
    return text if reason is None else _refuse(reason, strict=strict)


def _refuse(reason: str, *, strict: bool) -> Refused:
    if strict:
        raise CorruptDataError(reason)
    return Refused(reason)


def fold(links: Iterable[Link], *, strict: bool, check_key: bool = True) -> str | None:
    """The text a chain rebuilds, each link applied to the text before it (``None`` for no
    links). Strict: the first link that does not rebuild raises
    :class:`~signals.errors.CorruptDataError`; lenient: it is skipped and the text stays
    what the links before it rebuilt.
    """
    text: str | None = None
    for link in links:
        step = next_text(text, link, strict=strict, check_key=check_key)
        if not isinstance(step, Refused):
            text = step
    return text

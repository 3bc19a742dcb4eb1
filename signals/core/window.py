"""Context-window tracking for one agent loop and one lane. Pure: no I/O.

The agent loop keeps this object beside its message list. Each working-memory message
it is given has an ``id``; at every model step the loop tells :meth:`WindowTracker.step`
which of those ids its window still holds, and gets back the messages to add (and the
ids of stale ones it may drop). The rules:

* the model can rebuild version R when the window holds a snapshot of some version S and
  every delta S+1..R after it (:meth:`WindowTracker.rebuildable`);
* new lane signals R+1..L are added as they are (reason ``new``) when all of them are
  known and the chain is intact;
* when the window no longer holds a usable chain (the loop trimmed the snapshot, or a
  delta in between), a fresh snapshot of the latest version is added instead (reason
  ``reinject``; ``bootstrap`` the first time), and the held deltas that no longer apply
  to any held snapshot are reported as ``drop``: they cost tokens and would put their
  version into the window twice;
* nothing is added when nothing changed. A version is never added while a copy of it
  is held.

Re-injection is a delivery of an existing lane version into this window, not a new
lane version (the worker alone numbers a lane's versions, see :mod:`signals.core.lane`);
every addition is reported so that it can be logged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from signals.core.cachekey import cache_key
from signals.core.models import Attributes, Delivery, Mode, Reason, Signal
from signals.core.processor import apply_delta
from signals.core.render import chat_message, signal_markup
from signals.core.tokens import approx_tokens
from signals.errors import InvalidInputError

__all__ = ("Injection", "StepResult", "WindowTracker", "trim_window")


@dataclass(frozen=True, slots=True)
class Injection:
    """One working-memory message put into the window: the one record of it.

    The loop sends :attr:`message` and keeps :attr:`id`; the delivery log keeps
    :meth:`delivery` of it. ``contents`` is what the model reads (a whole text or a
    patch, per ``mode``); ``value`` is the full text at ``version``.
    """

    id: str
    step: int
    version: int
    mode: Mode
    reason: Reason
    cache_key: str
    contents: str
    attributes: Attributes
    value: str

    @property
    def markup(self) -> str:
        """The ``<working-memory ...>`` markup the model reads."""
        return signal_markup(self.contents, self.attributes)

    @property
    def message(self) -> dict[str, str]:
        """A ``user``-role chat message holding the markup (Mastra's delivery)."""
        return chat_message(self.markup)

    def delivery(self, *, thread_id: str, lane: str, at: str | None) -> Delivery:
        """The delivery-log record of this message (the wire form; ``id`` and ``value`` stay here)."""
        return Delivery(thread_id=thread_id, step=self.step, lane=lane, version=self.version, mode=self.mode,
                        reason=self.reason, cache_key=self.cache_key, contents=self.contents,
                        attributes=self.attributes, at=at)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What the loop should do with its window at this step."""

    step: int
    add: tuple[Injection, ...] = ()
    drop: tuple[str, ...] = ()


@dataclass(slots=True)
class WindowTracker:
    """Tracks which lane versions one agent's window holds; decides what to add.

    Args:
        lane: the lane's id (used in message ids).
    """

    lane: str
    _injected: dict[str, Injection] = field(default_factory=dict)
    _known: dict[int, tuple[Signal, str]] = field(default_factory=dict)
    _latest: int = 0
    _steps: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _delivered: bool = False

    def offer(self, signal: Signal, value: str) -> None:
        """Make a lane signal (with the full text after it) known to the tracker."""
        if signal.version <= 0:
            raise InvalidInputError("a lane signal has a positive version")
        self._known[signal.version] = (signal, value)
        self._latest = max(self._latest, signal.version)

    def injection(self, message_id: str) -> Injection | None:
        """The injection behind a message id, if this tracker made it."""
        return self._injected.get(message_id)

    def _chain(self, held: list[Injection]) -> tuple[int | None, set[str]]:
        """The rebuildable version and the ids of the held injections on that chain."""
        snapshots = sorted((i for i in held if i.mode == "snapshot"), key=lambda i: i.version)
        if not snapshots:
            return None, set()
        deltas = {i.version: i for i in held if i.mode == "delta"}
        base = snapshots[-1]
        on_chain = {base.id}
        version = base.version
        while version + 1 in deltas:
            version += 1
            on_chain.add(deltas[version].id)
        return version, on_chain

    def rebuildable(self, held_ids: set[str] | list[str]) -> int | None:
        """The version the model can rebuild from the held messages (``None``: none)."""
        held = [self._injected[i] for i in held_ids if i in self._injected]
        return self._chain(held)[0]

    def rebuild(self, held_ids: set[str] | list[str]) -> str | None:
        """The working memory the model can rebuild: last held snapshot plus deltas after it."""
        held = [self._injected[i] for i in held_ids if i in self._injected]
        version, on_chain = self._chain(held)
        if version is None:
            return None
        chain = sorted((i for i in held if i.id in on_chain), key=lambda i: i.version)
        text = chain[0].contents
        for inj in chain[1:]:
            text = apply_delta(text, inj.contents, inj.attributes.patch)
        return text

    def step(self, held_ids: set[str] | list[str]) -> StepResult:
        """Decide what to add to the window before the next model call."""
        self._steps += 1
        step = self._steps
        held_set = set(held_ids)
        # a message trimmed out of the window never comes back: forget it
        self._injected = {i: inj for i, inj in self._injected.items() if i in held_set}
        held = list(self._injected.values())
        version, on_chain = self._chain(held)
        latest = self._latest
        if latest in (0, version):
            return StepResult(step)
        needed = range((version or 0) + 1, latest + 1)
        add: list[Injection] = []
        drop: tuple[str, ...] = ()
        if version is not None and all(v in self._known for v in needed):
            for v in needed:
                signal, value = self._known[v]
                add.append(self._inject(step, signal, value, "new"))
        else:
            signal, value = self._known[latest]
            reason: Reason = "reinject" if self._delivered else "bootstrap"
            add.append(self._inject(step, signal, value, reason))
            # deltas off any held chain are useless now and would repeat versions
            drop = tuple(sorted(i.id for i in held if i.mode == "delta" and i.id not in on_chain))
        for v in [v for v in self._known if v < latest]:
            del self._known[v]
        self._delivered = True
        return StepResult(step, tuple(add), drop)

    def _new_id(self, version: int) -> str:
        return f"wm:{self.lane}:v{version}:{next(self._ids)}"

    def _inject(self, step: int, signal: Signal, value: str, reason: Reason) -> Injection:
        """Put ``signal``'s version into the window: a delta as it came (only as a ``new``
        signal on an intact chain), anything else as a snapshot of its full text."""
        if reason == "new" and signal.mode == "delta":
            mode: Mode = "delta"
            key, contents, attrs = signal.cache_key, signal.contents, signal.attributes
        else:
            mode = "snapshot"
            attrs = Attributes(format=signal.attributes.format, scope=signal.attributes.scope)
            key, contents = cache_key(attrs.format, value), value
        inj = Injection(id=self._new_id(signal.version), step=step, version=signal.version, mode=mode,
                        reason=reason, cache_key=key, contents=contents, attributes=attrs, value=value)
        self._injected[inj.id] = inj
        return inj


def trim_window(
    window: list[tuple[str | None, str]], *, max_messages: int | None = None, max_tokens: int | None = None
) -> list[tuple[str | None, str]]:
    """Trim a window of ``(message id, text)`` oldest first: to ``max_messages``, then until
    the texts fit ``max_tokens`` (the newest message always stays). The two trimming
    policies agent loops commonly use; the tracker copes with any other."""
    if max_messages is not None:
        window = window[-max_messages:]
    if max_tokens is not None:
        sizes = [approx_tokens(text) for _, text in window]
        total, start = sum(sizes), 0
        while start < len(window) - 1 and total > max_tokens:
            total -= sizes[start]
            start += 1
        window = window[start:]
    return window

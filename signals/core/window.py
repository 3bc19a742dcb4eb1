"""Context-window tracking for one agent loop and one lane. Pure: no I/O.

The agent loop keeps this object beside its message list. Each working-memory message
it is given has an ``id``; at every model step the loop tells :meth:`WindowTracker.step`
which of those ids its window still holds, and gets back the messages to add (and the
ids of stale ones it may drop). The rules:

* the model can rebuild version R when the window holds a snapshot of some version S and
  every delta S+1..R after it (:meth:`WindowTracker.rebuildable`);
* new lane signals R+1..L are added as they are (reason ``new``) when all of them are
  known and the chain is intact;
* when the window holds no usable chain (the loop trimmed the snapshot, or a delta in
  between), a fresh snapshot of the latest version is added instead (reason
  ``reinject``; ``bootstrap`` the first time), and the held deltas that apply to no
  held snapshot are reported as ``drop``: they cost tokens and would put their
  version into the window twice;
* nothing is added when nothing changed. A version is never added while a copy of it
  is held;
* after the lane's history was lost (:meth:`WindowTracker.restart`: the subscription
  restarted from the lane's current chain, whose versions may be lower than those held),
  every message held is reported as ``drop`` (the memory it carries is not the lane's
  any more) and the next addition is a snapshot of the latest version with reason ``reset``.

**Coalesced catch-up.** When more than one lane version is missing after the held chain
(a burst of writes between two model calls) and the latest is known, a tracker that
coalesces adds ONE message taking the model from the version it holds to the latest:
a delta computed from the held text to the latest text (a hunks-only unified diff for
Markdown, under the diff budget; for JSON under ``compact`` an RFC 7396 merge patch; under
``mastra`` a JSON lane gets a snapshot) or a snapshot of the latest when that is fewer
tokens. It does so only when the message is fewer tokens than the per-signal messages
would be (when those are all known), so coalescing never sends more. The coalesced delta
is an :class:`Injection` whose ``base_version`` names the version it applies to: it holds
every version ``base_version + 1 .. version`` (for the no-duplicate rule, and in
:meth:`Injection.versions`), and :meth:`WindowTracker.rebuild` applies it to the text at
``base_version``. Trimming it loses all of its versions at once: the next step catches up
again from what is still held. Its markup is the contract's, unchanged
(``<working-memory format=... scope=... patch="unified-diff">``): the model needs the
state, not the range, so the range is logged (``Delivery.base_version``), not rendered.

Whether a tracker coalesces: ``coalesce=True``/``False``, or ``None`` (the default):
coalesce when the latest signal says the worker ran the ``compact`` policy
(``Signal.policy``); ``mastra`` signals carry no policy and keep Mastra's one message per
signal, byte for byte.

Re-injection is a delivery of an existing lane version into this window, not a new
lane version (the worker alone numbers a lane's versions, see :mod:`signals.core.lane`);
every addition is reported so that it can be logged.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import secrets
from dataclasses import dataclass, field

from signals.core.cachekey import cache_key
from signals.core.fold import fold
from signals.core.models import Attributes, Delivery, Mode, Reason, Signal
from signals.core.processor import DEFAULT_MAX_DIFF_EDITS, apply_delta, decide
from signals.core.render import chat_message, signal_markup
from signals.core.tokens import TokenCounter, approx_tokens
from signals.errors import InvalidInputError

__all__ = ("MAX_RESUME_STEP", "WINDOW_ID", "Injection", "StepResult", "WindowTracker", "trim_window")

#: The highest step a window resumes after (:meth:`WindowTracker.resume`): no window makes
#: 2**52 model calls, so a log whose last step is past it is forged, and resuming there
#: would soon number steps beyond what the log's readers accept (2**53 - 1).
MAX_RESUME_STEP = 2**52
#: What a window's name (:attr:`WindowTracker.window_id`) may be.
WINDOW_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, slots=True)
class Injection:
    """One working-memory message put into the window: the one record of it.

    The loop sends :attr:`message` and keeps :attr:`id`; the delivery log keeps
    :meth:`delivery` of it. ``contents`` is what the model reads (a whole text or a
    patch, per ``mode``); ``value`` is the full text at ``version``. ``base_version`` is
    set on a coalesced catch-up delta only: the version its patch applies to (a plain
    delta applies to ``version - 1``).
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
    base_version: int | None = None

    @property
    def base(self) -> int:
        """The version a delta applies to (``version - 1`` unless coalesced)."""
        return self.version - 1 if self.base_version is None else self.base_version

    @property
    def versions(self) -> range:
        """The lane versions this message holds: its version, or a coalesced delta's range."""
        return range(self.base + 1 if self.mode == "delta" else self.version, self.version + 1)

    @property
    def markup(self) -> str:
        """The ``<working-memory ...>`` markup the model reads."""
        return signal_markup(self.contents, self.attributes)

    @property
    def message(self) -> dict[str, str]:
        """A ``user``-role chat message holding the markup (Mastra's delivery)."""
        return chat_message(self.markup)

    def delivery(self, *, thread_id: str, lane: str, at: str | None, window: str | None = None) -> Delivery:
        """The delivery-log record of this message (the wire form; ``id`` and ``value`` stay
        here), made in ``window`` (:attr:`WindowTracker.window_id`)."""
        return Delivery(thread_id=thread_id, step=self.step, lane=lane, version=self.version, mode=self.mode,
                        reason=self.reason, cache_key=self.cache_key, contents=self.contents,
                        attributes=self.attributes, at=at, base_version=self.base_version, window=window)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What the loop should do with its window at this step (``window``: the tracker's
    :attr:`WindowTracker.window_id`, which the delivery log records)."""

    step: int
    add: tuple[Injection, ...] = ()
    drop: tuple[str, ...] = ()
    window: str | None = None


@dataclass(slots=True)
class WindowTracker:
    """Tracks which lane versions one agent's window holds; decides what to add.

    Args:
        lane: the lane's id (used in message ids).
        coalesce: catch up on a burst with one message (see the module docstring);
            ``None``: when the latest signal was made by the ``compact`` policy.
        count_tokens: the token counter that compares a coalesced message with the
            per-signal messages and with a snapshot.
        max_diff_edits: the diff budget of a coalesced Markdown delta (see
            :func:`signals.core.processor.decide`); past it, a snapshot.
    """

    lane: str
    coalesce: bool | None = None
    count_tokens: TokenCounter = approx_tokens
    max_diff_edits: int | None = DEFAULT_MAX_DIFF_EDITS
    _injected: dict[str, Injection] = field(default_factory=dict)
    _known: dict[int, tuple[Signal, str]] = field(default_factory=dict)
    _latest: int = 0
    _steps: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    window_id: str = field(default_factory=lambda: secrets.token_hex(4))
    """This window's name (random unless given: letters, digits, ``.``, ``_``, ``-``, up to
    64): in every message id, so a tracker of another process on the same lane (a restart)
    never makes an id that a message of this one, still in a loop's history, carries; and
    in every delivery-log record, so a thread's log tells the windows of successive
    processes apart (:meth:`signals.streams.deliveries.DeliveryLog.view_at`)."""
    _sent: int = 0  # the highest version delivered into this window so far
    _restarted: bool = False  # the lane restarted since the last addition: the next one is a ``reset``

    def __post_init__(self) -> None:
        if self.coalesce not in (None, True, False):  # a string such as "false" is truthy
            raise InvalidInputError(f"coalesce is True, False or None, not {self.coalesce!r}")
        if not callable(self.count_tokens):
            raise InvalidInputError(f"count_tokens is a function of a text, not {self.count_tokens!r}")
        if not (isinstance(self.window_id, str) and WINDOW_ID.fullmatch(self.window_id)):
            raise InvalidInputError(f"window_id is 1 to 64 letters, digits, '.', '_' or '-', not {self.window_id!r}")

    @property
    def steps(self) -> int:
        """The number of the last step (0 before any)."""
        return self._steps

    def resume(self, step: int) -> None:
        """Number this window's steps after ``step``: the last one an earlier process
        logged for the same conversation (:meth:`signals.streams.deliveries.DeliveryLog.last_step`),
        so that the delivery log's step numbers stay those of one window at a time. The
        window itself starts empty: what the earlier process delivered is not held here.
        """
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_RESUME_STEP:
            raise InvalidInputError(f"resume takes a step number from 0 to {MAX_RESUME_STEP}, not {step!r}")
        self._steps = max(self._steps, step)

    def restart(self) -> None:
        """Forget every lane version known and every message held: the lane's history was
        lost and starts again (see :mod:`signals.streams.subscribe`). Held messages of this
        tracker are reported as ``drop`` from the next step on (as any message of this lane
        it does not hold); the next addition is a snapshot with reason ``reset``."""
        self._injected.clear()
        self._known.clear()
        self._latest = 0
        self._restarted = True

    def offer(self, signal: Signal, value: str) -> None:
        """Make a lane signal (with the full text after it) known to the tracker."""
        if signal.version <= 0:
            raise InvalidInputError("a lane signal has a positive version")
        self._known[signal.version] = (signal, value)
        self._latest = max(self._latest, signal.version)

    def injection(self, message_id: str) -> Injection | None:
        """The injection behind a message id, if this tracker made it."""
        return self._injected.get(message_id)

    def _chain(self, held: list[Injection]) -> list[Injection]:
        """The held chain the model rebuilds from, in order: the held snapshot of the
        highest version, then each held delta that applies to the version reached so far
        (a coalesced delta applies to its ``base_version``). Empty when no snapshot is held."""
        snapshots = [i for i in held if i.mode == "snapshot"]
        if not snapshots:
            return []
        by_base: dict[int, Injection] = {}
        for inj in held:
            if inj.mode == "delta" and (inj.base not in by_base or by_base[inj.base].version < inj.version):
                by_base[inj.base] = inj
        chain = [max(snapshots, key=lambda i: i.version)]
        while chain[-1].version in by_base:
            chain.append(by_base[chain[-1].version])
        return chain

    def _held(self, held_ids: set[str] | list[str]) -> list[Injection]:
        return [self._injected[i] for i in held_ids if i in self._injected]

    def rebuildable(self, held_ids: set[str] | list[str]) -> int | None:
        """The version the model can rebuild from the held messages (``None``: none)."""
        chain = self._chain(self._held(held_ids))
        return chain[-1].version if chain else None

    def rebuild(self, held_ids: set[str] | list[str]) -> str | None:
        """The working memory the model can rebuild: last held snapshot plus the deltas
        chained after it (a coalesced delta applied to the text at its base version)."""
        # strict: the tracker built this chain, so a link that does not rebuild is a defect to raise
        return fold(self._chain(self._held(held_ids)), strict=True)

    def step(self, held_ids: set[str] | list[str]) -> StepResult:
        """Decide what to add to the window before the next model call.

        A held id of this lane's working-memory messages that this tracker does not hold
        (a message of an earlier process's window that the loop kept over a restart, or one
        this tracker was told was trimmed) is reported as ``drop`` at every step until it is
        gone: the chain does not count it, so the model would hold its version twice.
        """
        self._steps += 1
        step = self._steps
        held_set = set(held_ids)
        stale = self._not_ours(held_set)
        # a message trimmed out of the window never comes back: forget it
        self._injected = {i: inj for i, inj in self._injected.items() if i in held_set}
        held = list(self._injected.values())
        chain = self._chain(held)
        version = chain[-1].version if chain else None
        latest = self._latest
        if latest in (0, version):
            return StepResult(step, drop=stale, window=self.window_id)
        needed = range((version or 0) + 1, latest + 1)
        on_chain = {i.id for i in chain}
        # deltas off the held chain are useless now and would repeat versions
        off_chain = tuple(sorted(i.id for i in held if i.mode == "delta" and i.id not in on_chain))
        per_signal = ([self._build(step, *self._known[v], "new") for v in needed]
                      if version is not None and all(v in self._known for v in needed) else None)
        add: list[Injection] | None = per_signal
        drop: tuple[str, ...] = ()
        if chain and len(needed) > 1 and latest in self._known and self._coalescing(latest):
            caught_up = self._catch_up(step, chain[-1], latest)
            if per_signal is None or self._tokens([caught_up]) < self._tokens(per_signal):
                add, drop = [caught_up], off_chain
        if add is None:
            signal, value = self._known[latest]
            reason: Reason = "reset" if self._restarted else "reinject" if self._sent else "bootstrap"
            add, drop = [self._build(step, signal, value, reason)], off_chain
        for v in [v for v in self._known if v < latest]:
            del self._known[v]
        self._sent = latest if self._restarted else max(self._sent, latest)
        self._restarted = False
        return StepResult(step, tuple(self._register(inj) for inj in add), stale + drop, self.window_id)

    def _not_ours(self, held: set[str]) -> tuple[str, ...]:
        """The held ids that name a working-memory message of this lane (the form
        :meth:`_register` gives: ``wm:<lane>:v<version>:<window>.<n>``) this tracker does not hold."""
        own = re.compile(rf"wm:{re.escape(self.lane)}:v[0-9]+:{WINDOW_ID.pattern}\.[0-9]+")
        return tuple(sorted(i for i in held if i not in self._injected and isinstance(i, str) and own.fullmatch(i)))

    def _coalescing(self, latest: int) -> bool:
        if self.coalesce is not None:
            return self.coalesce
        return self._known[latest][0].policy == "compact"

    def _tokens(self, injections: list[Injection]) -> int:
        return sum(self.count_tokens(inj.markup) for inj in injections)

    def _catch_up(self, step: int, held: Injection, latest: int) -> Injection:
        """One message from ``held`` (the end of the held chain) to ``latest``: a delta
        under the lane's policy, or a snapshot of the latest text when that is fewer tokens.

        The delta is checked by applying it: anything that does not rebuild the latest
        text exactly (it cannot happen; a guard, not a path) becomes the snapshot.
        """
        signal, value = self._known[latest]
        reason: Reason = "new" if held.version >= self._sent else "reinject"
        snapshot = self._build(step, signal, value, reason, as_snapshot=True)
        attrs = signal.attributes
        proposal = decide(data=value, fmt=attrs.format, scope=attrs.scope, has_snapshot=True,
                          current_cache_key=None, prior=held.value,
                          policy="compact" if signal.policy == "compact" else "mastra",
                          max_diff_edits=self.max_diff_edits, count_tokens=self.count_tokens)
        if proposal is None or proposal.mode != "delta" or proposal.value != value:
            return snapshot
        try:
            rebuilt = apply_delta(held.value, proposal.contents, proposal.attributes.patch)
        except InvalidInputError:
            return snapshot
        if rebuilt != value:
            return snapshot
        delta = Injection(id="", step=step, version=latest, mode="delta", reason=reason,
                          cache_key=proposal.cache_key, contents=proposal.contents,
                          attributes=proposal.attributes, value=value, base_version=held.version)
        return delta if self._tokens([delta]) < self._tokens([snapshot]) else snapshot

    def _build(self, step: int, signal: Signal, value: str, reason: Reason, *, as_snapshot: bool = False) -> Injection:
        """``signal``'s version as a message: a delta as it came (only as a ``new`` signal
        on an intact chain), anything else as a snapshot of its full text. Not yet in the
        window (:meth:`_register` gives it its id)."""
        if reason == "new" and signal.mode == "delta" and not as_snapshot:
            mode: Mode = "delta"
            key, contents, attrs = signal.cache_key, signal.contents, signal.attributes
        else:
            mode = "snapshot"
            attrs = Attributes(format=signal.attributes.format, scope=signal.attributes.scope)
            key, contents = cache_key(attrs.format, value), value
        return Injection(id="", step=step, version=signal.version, mode=mode, reason=reason, cache_key=key,
                         contents=contents, attributes=attrs, value=value)

    def _register(self, inj: Injection) -> Injection:
        """Give ``inj`` its message id and hold it."""
        inj = dataclasses.replace(inj, id=f"wm:{self.lane}:v{inj.version}:{self.window_id}.{next(self._ids)}")
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

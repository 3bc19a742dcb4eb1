"""The windows every framework adapter is thin over. No framework imports.

An adapter converts its framework's messages to and from whatever it likes (a
:class:`~signals.integrations._core.MessageCodec`); this module decides, once for all of
them, which working-memory messages the next model call sees and where. It drives
:class:`~signals.agent.AgentWorkingMemory` (subscription, window tracker, delivery log,
tool) and nothing here reads Redis itself.

Contract
--------
**The framework's message list is the context window.** Frameworks own their history and
trim it themselves; the core only ever looks at the list the framework is about to send.
Two ways a framework can treat what a hook inserts, one class for each:

* :class:`PersistentWindow` (the inserted messages persist in the framework's history:
  a hand-rolled Anthropic or OpenAI Chat loop that keeps the list ``prepare`` returns,
  LangChain ``before_model`` state updates). At every call the core recognises the
  working-memory blocks still in the list *by content* (each block is the exact markup
  of one :class:`~signals.core.window.Injection` this window made), tells the tracker
  which ones are still held, removes the ones it says to drop (and any working-memory
  block it did not make: one restored from a history saved by another process, or typed
  by a user, since nobody can know which version it holds and keeping it could put a
  version into the window twice), and appends the new ones at the end. A held block the
  framework moved out of its injection order (a reordered history) is removed
  too and counts as dropped: the model reads blocks in list order. When the same
  markup is held twice (a delta A->B, B->A, A->B chain repeats a patch) occurrences are
  paired with injections newest first, since trimming removes the oldest.
* :class:`EphemeralWindow` (a hook changes what ONE model call sees and nothing of it is
  kept: OpenAI Agents ``call_model_input_filter``, LangChain ``wrap_model_call``, ADK
  ``before_model_callback``). The core keeps its working-memory messages itself and
  re-inserts them on every call right after the conversation message they followed when
  they were added (their *anchor*), so the prompt prefix stays byte-stable for provider
  prompt caches and the model sees them where it saw them first. Conversation messages
  are matched across calls by :meth:`~signals.integrations._core.MessageCodec.identity`: the previous call's list is
  aligned with this call's (the longest tail of the previous list found as a contiguous
  run of this one, so duplicates and new messages in front, such as a summary, are
  handled). A message the framework trimmed, or rewrote so that its identity changed,
  counts as gone together with everything before it; a working-memory message whose
  anchor is gone counts as dropped, exactly as if the framework had trimmed it. Working-
  memory blocks found in the framework's list are foreign here and are stripped.

In both, the tracker then re-injects a snapshot of the latest version when the window no
longer holds a usable chain and reports orphaned deltas to drop, as
:class:`~signals.core.window.WindowTracker` does for our own loop: the model can rebuild
the lane's latest version from what it receives, and no version is held twice.

**Placement.** New working-memory messages go at the end of the list, after the newest
conversation message, as user-role messages (Mastra's delivery). That is after the tool
results of the last tool call, never between an assistant's tool call and its results,
which is where the APIs require them (OpenAI Chat: ``tool`` messages directly follow the
assistant's ``tool_calls``; Anthropic: ``tool_result`` blocks first in the user turn).
A codec may merge the blocks into the anchor message instead (:meth:`~signals.integrations._core.MessageCodec.join`;
the Anthropic codec appends them as text blocks after the ``tool_result`` blocks of the
same user turn). One block per injection, so each is byte-equal to its delivery-log record.

**Push, not refresh.** Every ``prepare`` polls the lane (a non-blocking read): memory
written by another process between two model calls reaches the next model call. Nothing
is cached across calls but the window's own bookkeeping.

**Deliveries.** Under state signals (default) the system prompt is never touched (it
stays byte-identical across calls); under ``system-message`` delivery
:attr:`Prepared.system` carries Mastra's system message for this call (read fresh from
the store at this call) and no state signal is inserted; the adapter puts it beside the
agent's own instructions (:func:`~signals.integrations._core.combine_instructions` for APIs with one system string).
Read-only agents (``AgentWorkingMemory(read_only=True)``) get no tool
(:func:`~signals.integrations._core.tool_spec` returns ``None``) and read-only instructions.

One window per conversation, and calls are sequential (a framework's loop makes them so):
a window is the bookkeeping of one model's context, not a shared object.

**Limits (by design).** What the core recognises and governs is a whole working-memory
message or block, byte for byte as rendered. Text that merely resembles one reaches the
model as what it is: a user's message that holds a markup with anything around it
(a trailing newline, a second text part), a markup inside a tool's result (Anthropic
``tool_result`` content, an OpenAI ``tool`` message, a fetched web page), or a text part
of a multi-part message the codec does not split. The core cannot tell a user's or a
tool's imitation from memory without rewriting their words, so it does neither: the
guarantee is that nothing *presented as* working memory (a block the core places, or
keeps) comes from anywhere but a signal the subscription verified, and that an exact
block the window did not make is removed. Instructions that tell the model where its
working memory comes from are the application's to write. Two windows on one thread
(two agents, two adapters) are two contexts: each keeps its own invariant, but both
append to the same thread's delivery log (see :mod:`signals.streams.deliveries`).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from signals.agent import AgentWorkingMemory, ModelCallResult
from signals.errors import InvalidInputError
from signals.integrations._core import MessageCodec

__all__ = ("EphemeralWindow", "PersistentWindow", "Prepared")

M = TypeVar("M")

V = TypeVar("V")


def _check_messages(messages: object) -> None:
    """Refuse what is not a list of messages (``InvalidInputError`` naming it): a string or a
    dict would be read item by item, and a ``None`` message dropped without a word."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"the messages must be a list of messages, not {type(messages).__name__}")
    for index, message in enumerate(messages):
        if message is None:
            raise InvalidInputError(f"message {index} of the list is None, not a message")


class _Memo(Generic[M, V]):
    """A codec function's results for the objects of the last call, reused when the same object comes back.

    Frameworks hand the same message objects to call after call; the core reads every
    message before every call, so this keeps a long history cheap (measured: 800 messages,
    2 ms a call without it, 0.7 ms with it). It holds the last call's objects (so their
    ids cannot be reused) and only those. A message mutated in place keeps its identity
    (its anchor stays in place, which is where the model saw the working memory).
    """

    def __init__(self, fn: Callable[[M], V], keep: Callable[[V], bool] = lambda _: True) -> None:
        self.fn = fn
        self.keep = keep
        self._last: dict[int, tuple[M, V]] = {}

    def map(self, messages: Sequence[M]) -> list[V]:
        last: dict[int, tuple[M, V]] = self._last
        now: dict[int, tuple[M, V]] = {}
        out: list[V] = []
        for message in messages:
            hit = last.get(id(message))
            value = hit[1] if hit is not None and hit[0] is message else self.fn(message)
            if self.keep(value):
                now[id(message)] = (message, value)
            out.append(value)
        self._last = now
        return out


def _plain(parts: tuple[object, list[str]]) -> bool:
    """Remember a split only when it found no working memory: the message is then its own
    conversation part, so a caller mutating it in place is seen; a split that built a new
    part is redone on every call."""
    return not parts[1]


@dataclass(frozen=True, slots=True)
class Prepared(Generic[M]):
    """One model call's input: the messages to send and what the window did.

    ``result`` is the :class:`~signals.agent.ModelCallResult` of the call (its ``step``
    numbers the delivery-log records of ``add``); ``system`` is the system-message
    delivery's text for this call (``None`` under state signals).
    """

    messages: list[M]
    result: ModelCallResult

    @property
    def system(self) -> str | None:
        """The working-memory system text to send with this call (system-message delivery)."""
        return self.result.system["content"] if self.result.system else None


class _Window(Generic[M]):
    """What both windows share: the agent, the codec, the memoised split, a lazy start."""

    def __init__(self, agent: AgentWorkingMemory, codec: MessageCodec[M]) -> None:
        self.agent = agent
        self.codec = codec
        self._split: _Memo[M, tuple[M | None, list[str]]] = _Memo(codec.split, _plain)
        self._started = False

    async def _start(self) -> None:
        if not self._started:
            await self.agent.start()
            self._started = True


class PersistentWindow(_Window[M]):
    """Working memory in a message list the caller keeps (the inserted messages persist).

    Call :meth:`prepare` before every model call with the list as the framework (or the
    loop) holds it, trimmed however it likes, and keep the list it returns as the history.
    """

    def __init__(self, agent: AgentWorkingMemory, codec: MessageCodec[M]) -> None:
        super().__init__(agent, codec)
        self._held: dict[str, str] = {}  # injection id -> markup, in insertion order

    async def prepare(self, messages: Sequence[M]) -> Prepared[M]:
        """The list to send (and keep): held blocks kept, dropped and foreign ones removed, new ones appended.

        Raises:
            InvalidInputError: ``messages`` is not a list of messages.
        """
        _check_messages(messages)
        await self._start()
        parts = self._split.map(messages)
        owners = self._in_order(self._match([markups for _, markups in parts]))
        result = await self.agent.before_model_call(set(owners.values()))
        keep = {i for i in owners.values() if i not in result.drop}
        self._held = {i: self._held[i] for i in self._held if i in keep}
        out: list[M] = []
        for index, (message, (conv, markups)) in enumerate(zip(messages, parts, strict=True)):
            kept = [m for b, m in enumerate(markups) if owners.get((index, b)) in keep]
            last = index == len(messages) - 1
            new = [inj.markup for inj in result.add] if last else []
            if not new and len(kept) == len(markups):
                out.append(message)
            else:
                out += self.codec.join(conv, kept + new)
        if not messages:
            out = [self.codec.build(inj.markup) for inj in result.add]
        self._held.update((inj.id, inj.markup) for inj in result.add)
        return Prepared(out, result)

    def _in_order(self, owners: dict[tuple[int, int], str]) -> dict[tuple[int, int], str]:
        """The matched blocks that stand in their injection order; the others are not held.

        A model reads the last snapshot and the deltas after it, in list order, while the
        tracker reasons from what is held: a history that moved a block (a delta before
        its snapshot, a snapshot after newer deltas) would leave the model unable to
        rebuild what the tracker thinks it holds. Walking from the newest position, a
        block is kept only when its injection precedes that of every block kept after it; a block
        out of place is removed from the list and counts as dropped (the tracker then
        catches up or re-injects).
        """
        order = {inj_id: n for n, inj_id in enumerate(self._held)}
        kept: dict[tuple[int, int], str] = {}
        low = len(order)
        for position in sorted(owners, reverse=True):
            n = order[owners[position]]
            if n < low:
                kept[position], low = owners[position], n
        return kept

    def _match(self, blocks: list[list[str]]) -> dict[tuple[int, int], str]:
        """Pair the list's working-memory blocks with held injections, newest first."""
        by_markup: dict[str, list[str]] = {}
        for inj_id, markup in self._held.items():
            by_markup.setdefault(markup, []).append(inj_id)
        owners: dict[tuple[int, int], str] = {}
        for index in range(len(blocks) - 1, -1, -1):
            for b in range(len(blocks[index]) - 1, -1, -1):
                candidates = by_markup.get(blocks[index][b])
                if candidates:
                    owners[(index, b)] = candidates.pop()
        return owners


@dataclass(frozen=True, slots=True)
class _Placed:
    inj_id: str
    markup: str
    anchor: int  # index of the conversation message it follows in the last call's list; -1: the start


class EphemeralWindow(_Window[M]):
    """Working memory re-inserted into every call's input (nothing inserted persists).

    Call :meth:`prepare` in the framework's per-call hook with the conversation as the
    framework is about to send it; send :attr:`Prepared.messages` and keep nothing.
    """

    def __init__(self, agent: AgentWorkingMemory, codec: MessageCodec[M]) -> None:
        super().__init__(agent, codec)
        self._prev: list[Hashable] = []  # identities of the last call's conversation messages
        self._placed: list[_Placed] = []  # in insertion order
        self._identity: _Memo[M, Hashable] = _Memo(codec.identity)

    async def prepare(self, messages: Sequence[M]) -> Prepared[M]:
        """The input for this call: the conversation with the window's messages at their anchors.

        Raises:
            InvalidInputError: ``messages`` is not a list of messages.
        """
        _check_messages(messages)
        await self._start()
        conversation = [conv for conv, _ in self._split.map(messages) if conv is not None]
        ids = self._identity.map(conversation)
        placed = self._reanchor(ids)
        # the bookkeeping changes only once the lane is read: a failed call leaves it unchanged
        result = await self.agent.before_model_call({p.inj_id for p in placed})
        dropped = set(result.drop)
        anchor = len(conversation) - 1
        placed = [p for p in placed if p.inj_id not in dropped]
        placed += [_Placed(inj.id, inj.markup, anchor) for inj in result.add]
        self._placed, self._prev = placed, ids
        after: dict[int, list[str]] = {}
        for p in self._placed:
            after.setdefault(p.anchor, []).append(p.markup)
        out = [self.codec.build(m) for m in after.get(-1, [])]
        for index, message in enumerate(conversation):
            markups = after.get(index)
            if markups:
                out += self.codec.join(message, markups)
            else:
                out.append(message)
        return Prepared(out, result)

    def _reanchor(self, ids: list[Hashable]) -> list[_Placed]:
        """The placed messages with anchors moved from the last call's list to this one;
        a message whose anchor is gone is left out (it counts as dropped)."""
        if not self._placed:
            return []
        trimmed, start = _align(self._prev, ids)
        kept: list[_Placed] = []
        for p in self._placed:
            if p.anchor == -1:
                if trimmed == 0 and start == 0:
                    kept.append(p)
            elif p.anchor >= trimmed:
                kept.append(_Placed(p.inj_id, p.markup, start + p.anchor - trimmed))
        return kept


def _align(prev: list[Hashable], cur: list[Hashable]) -> tuple[int, int]:
    """``(d, s)``: the fewest leading messages ``d`` of ``prev`` to forget so that the rest of
    ``prev`` is a contiguous run of ``cur`` starting at ``s`` (the earliest such ``s``);
    ``(len(prev), 0)`` when none is.

    Quick in the usual cases (trimmed from the front, appended at the end): a ``d`` is only
    tried where ``prev[d]`` occurs in ``cur``. Repeated messages ("ok", "continue") make
    that try many places, each a comparison of the whole rest; past a budget of a few
    comparisons per message it hands over to :func:`_align_linear`, so no history costs
    more than linear work (trying every place is cubic: seconds before every call for
    1,600 messages).
    """
    positions: dict[Hashable, list[int]] = {}
    for index, ident in enumerate(cur):
        positions.setdefault(ident, []).append(index)
    budget = 4 * (len(prev) + len(cur)) + 64
    for d, ident in enumerate(prev):
        rest = len(prev) - d
        for s in positions.get(ident, ()):
            if s + rest > len(cur):
                break  # positions ascend: no later one fits either
            budget -= rest
            if budget < 0:
                return _align_linear(prev, cur)
            if cur[s:s + rest] == prev[d:]:
                return d, s
    return len(prev), 0


_APART = object()  # equal to no identity: keeps the two lists apart in _align_linear


def _align_linear(prev: list[Hashable], cur: list[Hashable]) -> tuple[int, int]:
    """:func:`_align` in linear time: the longest suffix of ``prev`` found in ``cur`` is the
    longest prefix of ``prev`` reversed found in ``cur`` reversed (the Z-function of the two
    reversed lists joined; among equal lengths the occurrence nearest the end of the
    reversed ``cur``, which is the earliest ``s``)."""
    head = prev[::-1]
    seq: list[object] = [*head, _APART, *cur[::-1]]
    z = [0] * len(seq)
    left = right = 0
    for i in range(1, len(seq)):
        if i < right:
            z[i] = min(right - i, z[i - left])
        while i + z[i] < len(seq) and seq[z[i]] == seq[i + z[i]]:
            z[i] += 1
        if i + z[i] > right:
            left, right = i, i + z[i]
    best, at = 0, 0
    for j in range(len(cur)):
        if z[len(head) + 1 + j] >= best and z[len(head) + 1 + j] > 0:
            best, at = z[len(head) + 1 + j], j
    if best == 0:
        return len(prev), 0
    return len(prev) - best, len(cur) - at - best

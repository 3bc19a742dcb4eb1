"""One object per agent loop: subscription + window tracking + delivery log + the tool.

Usage, inside the loop, before every model call::

    wm = AgentWorkingMemory(redis, keys, resource_id="u1", thread_id="t1")
    await wm.start()
    ...
    result = await wm.before_model_call(held_ids)   # ids of wm messages still in the window
    for inj in result.add: messages.append(inj.message); held_ids.add(inj.id)
    for mid in result.drop: remove that message; held_ids.discard(mid)

With ``delivery="system-message"`` it gives Mastra's default delivery instead (see
:mod:`signals.core.system_message`): every :meth:`AgentWorkingMemory.before_model_call`
returns the whole working memory, with its update instructions (a read-only agent gets
the data only), as one ``system`` message in :attr:`ModelCallResult.system`, read from
the stored document at that call; ``add`` and ``drop`` are empty and no state signal is
read. The loop puts that message in place of the previous call's system message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.core.cachekey import cache_key, js_trim
from signals.core.memory import MAX_DOCUMENT_CHARS, WorkingMemoryConfig
from signals.core.models import Attributes, Reason
from signals.core.signing import Signer
from signals.core.system_message import TemplateProvider, working_memory_system_message
from signals.core.tokens import TokenCounter, approx_tokens
from signals.core.window import Injection, StepResult, WindowTracker
from signals.errors import ConcurrentUseError, CorruptDataError, InvalidInputError
from signals.streams.client import Client
from signals.streams.deliveries import DeliveryLog
from signals.streams.documents import Document
from signals.streams.keys import Keys, lane_id, validate_id
from signals.streams.redis_errors import acl_refused
from signals.streams.replay import Materialised
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from signals.tool import handle_tool_call, tool_definition

__all__ = ("AgentWorkingMemory", "ModelCallResult")

logger = get_logger(__name__)

DeliveryMethod = Literal["state-signals", "system-message"]


@dataclass(frozen=True, slots=True)
class ModelCallResult(StepResult):
    """What :meth:`AgentWorkingMemory.before_model_call` returns.

    With state-signal delivery: the step's ``add`` and ``drop`` (see
    :class:`~signals.core.window.StepResult`) and ``system`` ``None``. With system-message
    delivery: ``system`` is the ``{"role": "system", "content": ...}`` message carrying
    the whole working memory at this call (it replaces the previous call's), and ``add``
    and ``drop`` are empty (no lane signal is delivered).
    """

    system: dict[str, str] | None = None


class AgentWorkingMemory:
    """Everything an agent loop needs for one thread's working memory.

    Args:
        redis: a redis.asyncio client.
        keys: the deployment's key layout.
        resource_id: the user.
        thread_id: the conversation (needed for the delivery log and thread scope).
        config: working-memory shape (scope, template or schema).
        read_only: no tool, read-only system message, no writes.
        delivery: ``state-signals`` (default) or ``system-message`` (the whole memory as
            one system message on every call; see :class:`ModelCallResult`).
        log_deliveries: record every addition in the thread's delivery log. With
            system-message delivery the log gets a ``snapshot`` record of the document
            (its trimmed text, and the document's version: this delivery reads no lane
            signal, so there is no lane version to name) the first time a system message carries it
            (reason ``bootstrap``) and whenever the text it carries changes (``new``);
            a call that resends the same text adds nothing, so ``DeliveryLog.view_at``
            still answers what the model saw at a step.
        template_provider: the template for the system-message delivery, per request.
        signer: when given, only signals with a valid MAC reach the model (see
            :mod:`signals.core.signing`); any other entry is skipped and logged.
        coalesce: when several new signals arrive between two model calls, add ONE
            catch-up message from the held version to the latest (see
            :mod:`signals.core.window`). ``None`` (the default): coalesce signals of the
            ``compact`` policy (the workers' default), keep one message per signal for
            ``mastra`` (Mastra's behaviour); ``True``/``False`` force it either way.
            A catch-up costs one diff of the document on the calling thread, bounded by
            the diff budget (:data:`~signals.core.processor.DEFAULT_MAX_DIFF_EDITS` edits,
            tens of milliseconds at worst for a 64 KiB document), once per burst.
        count_tokens: the token counter the coalescing choice uses (UTF-8 bytes / 4 by
            default; :func:`signals.tokenizers.token_counter` gives ``cl100k``).

    Nothing read from the signal stream is trusted: the subscription delivers only
    signals it has verified (decoded, of this lane, chained, cacheKey matching; MAC'd
    when a signer is given) and skips the rest with a warning log event, so a junk or
    forged entry never reaches the window and never stops the loop. After a delta that
    does not chain it waits for the lane's next snapshot (see :mod:`signals.streams.subscribe`).
    """

    def __init__(
        self,
        redis: Client,
        keys: Keys,
        *,
        resource_id: str,
        thread_id: str | None = None,
        config: WorkingMemoryConfig | None = None,
        read_only: bool = False,
        delivery: DeliveryMethod = "state-signals",
        log_deliveries: bool = True,
        template_provider: TemplateProvider | None = None,
        signer: Signer | None = None,
        coalesce: bool | None = None,
        count_tokens: TokenCounter = approx_tokens,
    ) -> None:
        if delivery not in ("state-signals", "system-message"):
            raise InvalidInputError(f"delivery must be 'state-signals' or 'system-message', not {delivery!r}")
        if not isinstance(keys, Keys):
            raise InvalidInputError(f"keys must be a Keys (namespace and partitions), not {keys!r:.40}")
        if config is not None and not isinstance(config, WorkingMemoryConfig):
            raise InvalidInputError(f"config must be a WorkingMemoryConfig, not {type(config).__name__}")
        if thread_id is not None:  # "" made a loop with no delivery log that claimed the thread named ""
            validate_id(thread_id, "thread id")
        self.config = config or WorkingMemoryConfig()
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.read_only = read_only
        self.delivery = delivery
        self.template_provider = template_provider
        self.lane = lane_id(self.config.scope, resource_id, thread_id)
        self.store = WorkingMemoryStore(redis, keys=keys, config=self.config, read_only=read_only)
        self.subscription = Subscription(redis, keys, self.lane, signer=signer)
        self.window = WindowTracker(self.lane, coalesce=coalesce, count_tokens=count_tokens)
        self.log = (DeliveryLog(redis, keys, key=signer.key if signer else None)
                    if (log_deliveries and thread_id) else None)
        self._steps = 0  # system-message delivery: its own step count (the tracker is unused)
        self._logged_key: str | None = None  # system-message delivery: the cacheKey last logged
        self._resumed = False  # steps numbered after the delivery log's last record (start or first call)
        self._resuming = anyio.Lock()
        self._calling = False  # a before_model_call is running (a second one at once is refused)

    async def start(self) -> list[Materialised]:
        """Read the lane's current state (call once before the first model call).

        With a delivery log, steps are numbered after the log's last record (an earlier
        process's, after a restart: see :meth:`DeliveryLog.last_step`; from 0, with a
        warning, when the log's key is not a stream: each call's recording then fails
        naming it, until it is repaired; the first model call does this when ``start`` was
        not called). The window starts empty: the first call delivers a snapshot. With
        system-message delivery there is no signal to read ahead: returns ``[]``.

        Raises:
            ThreadOwnerError: ``thread_id`` belongs to another resource than ``resource_id``
                (in either scope: nothing of that thread is read for this loop's model, and
                nothing is added to its delivery log). :meth:`before_model_call` raises it
                too when ``start`` was not called.
        """
        await self._resume_steps()
        if self.delivery == "system-message":
            return []
        return await self._take(self.subscription.bootstrap())

    @property
    def last_step(self) -> int:
        """The step number of the last model call (:meth:`before_model_call`; after a
        restart, numbered on from the delivery log's last record), 0 before any."""
        return self._steps if self.delivery == "system-message" else self.window.steps

    async def _resume_steps(self) -> None:
        """Check the thread's owner, then number this process's steps after the delivery
        log's last record (once; a refused owner is checked again at the next call)."""
        if self._resumed:  # every model call after the first: no lock taken
            return
        async with self._resuming:  # a call made while start() resumes waits for it
            if self._resumed:
                return
            if self.thread_id is not None:  # before anything is read for the model or logged
                await self._own_thread(self.thread_id)
            if self.log is not None and self.thread_id is not None:
                try:
                    last = await self.log.last_step(self.thread_id)  # a Redis error: not resumed, tried again
                except CorruptDataError as e:  # the key is not a stream: recording names it, at each call
                    logger.warning("agent.delivery_log_unreadable", thread_id=self.thread_id, problem=str(e))
                    last = 0
                self.window.resume(last)
                self._steps = max(self._steps, last)
            self._resumed = True

    async def _own_thread(self, thread_id: str) -> None:
        """Refuse a thread another resource owns. A loop that may write claims an unowned
        thread for its resource (its conversation is its user's from the first call): no
        other resource's write can claim it later, and the owner is not read again. A
        read-only loop (or one whose Redis user may not create thread records) only checks,
        and :meth:`poll` checks again at every call until the thread has an owner."""
        if not self.read_only:
            try:
                await self.store.threads.claim(thread_id, self.resource_id)
            except redis_exc.ResponseError as e:
                if not acl_refused(e):
                    raise
                logger.debug("agent.thread_not_claimed", thread_id=thread_id, reason=str(e))  # a reader's user
            else:
                return
        await self.store.check_owner(thread_id, self.resource_id)

    def _offer(self, items: Iterable[Materialised]) -> None:
        for item in items:
            self.window.offer(item.signal, item.value)

    async def poll(self, block_ms: int | None = None) -> list[Materialised]:
        """Take in the lane's new signals, all of them however many (non-blocking unless
        ``block_ms``: see :meth:`Subscription.catch_up <signals.streams.subscribe.Subscription.catch_up>`).

        With system-message delivery no signal is read: returns ``[]``.

        Raises:
            ThreadOwnerError: the thread belongs to another resource. A thread with no owner
                when the loop started is checked again at every poll until it has one: the
                first write claims it, and another resource's write made this loop deliver
                that resource's memory (and log it in the thread's delivery log).
        """
        if self.delivery == "system-message":
            return []
        if self.thread_id is not None:  # at every read: a thread unowned at start may have been claimed since
            await self.store.check_owner(self.thread_id, self.resource_id)  # no round trip once it is ours
        return await self._take(self.subscription.catch_up(block_ms))

    async def _take(self, read: Awaitable[list[Materialised]]) -> list[Materialised]:
        """Offer what a read of the subscription delivers to the window; when the
        subscription restarted after a data loss (its generation changed), the window
        starts again first (see :meth:`WindowTracker.restart`)."""
        generation = self.subscription.generation
        items = await read
        if self.subscription.generation != generation:
            self.window.restart()
        self._offer(items)
        return items

    async def before_model_call(self, held_ids: Iterable[str]) -> ModelCallResult:
        """What to put into the window before the next model call, logged.

        State signals: new signals, window check, the messages to add (and drop).
        System message: the whole working memory as ``system`` (``held_ids`` unused).

        One call at a time: the object tracks one model's context window, so a call made
        while another has not returned is refused
        (:class:`~signals.errors.ConcurrentUseError`) rather than
        serialised: the second call's ``held_ids`` could not include what the first adds,
        so it would be given the same versions again. Concurrent model contexts (parallel
        sub-agents) each need their own object.

        Raises:
            InvalidInputError: ``held_ids`` is not a collection of message ids (strings): a
                bare id string would be read as its characters, so the loop would re-send what it holds.
            ConcurrentUseError: another ``before_model_call`` of this object is running.
        """
        if self._calling:
            raise ConcurrentUseError(
                f"before_model_call on lane {self.lane} while another call on this AgentWorkingMemory is running: "
                "one object tracks one model's context window, whose calls come one after the other; give each "
                "concurrent model context its own AgentWorkingMemory")
        self._calling = True
        try:
            return await self._model_call(held_ids)
        finally:
            self._calling = False

    async def _model_call(self, held_ids: Iterable[str]) -> ModelCallResult:
        await self._resume_steps()  # when start() was not called
        if self.delivery == "system-message":
            return await self._system_call()
        held = _held_ids(held_ids)
        await self.poll()
        result = self.window.step(held)
        if self.log is not None and self.thread_id is not None and result.add:
            await self.log.record(self.thread_id, self.lane, result)
        return ModelCallResult(result.step, result.add, result.drop, result.window)

    async def _document(self) -> Document | None:
        """The stored document, for a system message: one over
        :data:`~signals.core.memory.MAX_DOCUMENT_CHARS` is refused (a writer may store one
        by hand, or with a ``max_bytes`` of its own: no worker signals it, and no delivery
        puts it in front of a model whole)."""
        doc = await self.store.get(self.resource_id, self.thread_id)
        if doc is not None and len(doc.data) > MAX_DOCUMENT_CHARS:
            raise CorruptDataError(f"{self.store.keys.doc(self.lane)} holds {len(doc.data):,} characters, over the "
                                   f"{MAX_DOCUMENT_CHARS:,} a delivery takes (the workers' bound)")
        return doc

    async def _system_call(self) -> ModelCallResult:
        self._steps += 1
        doc = await self._document()
        if doc is not None:
            await self._log_system(doc)
        return ModelCallResult(self._steps, window=self.window.window_id, system=self._render_system(doc))

    async def _log_system(self, doc: Document) -> None:
        """Log the document a system message carries when its text differs from the last logged."""
        if self.log is None or self.thread_id is None:
            return
        text = js_trim(doc.data)
        key = cache_key(doc.format, text)
        if key == self._logged_key:
            return
        reason: Reason = "bootstrap" if self._logged_key is None else "new"
        sent = Injection(id=f"wm:{self.lane}:system:{self._steps}", step=self._steps, version=doc.version,
                         mode="snapshot", reason=reason, cache_key=key, contents=text,
                         attributes=Attributes(format=doc.format, scope=self.config.scope), value=text)
        await self.log.record(self.thread_id, self.lane, StepResult(self._steps, (sent,), window=self.window.window_id))
        self._logged_key = key

    def _render_system(self, doc: Document | None) -> dict[str, str]:
        return working_memory_system_message(self.config, doc.data if doc else None,
                                             read_only=self.read_only,
                                             template_provider=self.template_provider)

    async def system_message(self) -> dict[str, str]:
        """The system message with the whole working memory and its instructions, now.

        Available in either delivery (the token benchmark's baseline); not logged.
        """
        return self._render_system(await self._document())

    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions to offer the model (none when read-only)."""
        definition = tool_definition(self.config, read_only=self.read_only)
        return [definition] if definition else []

    async def call_tool(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Handle the model's ``setWorkingMemory`` call; errors come back as a tool result.

        ``arguments`` is the call's JSON object, as a dict or as JSON text; anything else a
        loop hands over (``None``, a number, a list) is answered with an error naming it.
        """
        if self.read_only:
            return {"success": False, "error": "working memory is read-only for this agent"}
        if not isinstance(arguments, (dict, str)):
            return {"success": False,
                    "error": f"the tool arguments must be a JSON object, got {type(arguments).__name__}"}
        return await handle_tool_call(self.store, arguments, resource_id=self.resource_id,
                                      thread_id=self.thread_id)


def _held_ids(held_ids: object) -> set[str]:
    """The message ids a loop holds, checked: an iterable of strings (not one string)."""
    if isinstance(held_ids, (str, bytes)) or not isinstance(held_ids, Iterable):
        raise InvalidInputError(f"held_ids must be a collection of message ids (strings), not "
                                f"{type(held_ids).__name__}")
    held = set()
    for item in held_ids:
        if not isinstance(item, str):
            raise InvalidInputError(f"held_ids must hold message ids (strings), not {type(item).__name__}")
        held.add(item)
    return held

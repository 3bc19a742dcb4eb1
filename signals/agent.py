"""One object per agent loop: subscription + window tracking + delivery log + the tool.

Usage, inside the loop, before every model call::

    wm = AgentWorkingMemory(redis, keys, resource_id="u1", thread_id="t1")
    await wm.start()
    ...
    result = await wm.before_model_call(held_ids)   # ids of wm messages still in the window
    for inj in result.add: messages.append(inj.message); held_ids.add(inj.id)
    for mid in result.drop: remove that message; held_ids.discard(mid)

With ``delivery="system-message"`` it instead returns the working memory as one system
message each call (Mastra's default path, see :mod:`signals.system_message`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from signals._util import Client
from signals.deliveries import DeliveryLog
from signals.keys import Keys, lane_id
from signals.memory import WorkingMemoryConfig
from signals.replay import Materialised
from signals.signing import Signer
from signals.store import WorkingMemoryStore
from signals.subscribe import Subscription
from signals.system_message import TemplateProvider, working_memory_system_message
from signals.tool import handle_tool_call, tool_definition
from signals.window import StepResult, WindowTracker

__all__ = ("AgentWorkingMemory",)


class AgentWorkingMemory:
    """Everything an agent loop needs for one thread's working memory.

    Args:
        redis: a redis.asyncio client.
        keys: the deployment's key layout.
        resource_id: the user.
        thread_id: the conversation (needed for the delivery log and thread scope).
        config: working-memory shape (scope, template or schema).
        read_only: no tool, read-only system message, no writes.
        delivery: ``state-signals`` (default) or ``system-message``.
        log_deliveries: record every addition in the thread's delivery log.
        template_provider: the template for the system-message delivery, per request.
        signer: when given, only signals with a valid MAC reach the model (see
            :mod:`signals.signing`); any other entry is skipped and logged.

    Nothing read from the signal stream is trusted: the subscription delivers only
    signals it has verified (decoded, of this lane, chained, cacheKey matching; MAC'd
    when a signer is given) and skips the rest with a warning log event, so a junk or
    forged entry never reaches the window and never stops the loop. After a delta that
    does not chain it waits for the lane's next snapshot (see :mod:`signals.subscribe`).
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
        delivery: Literal["state-signals", "system-message"] = "state-signals",
        log_deliveries: bool = True,
        template_provider: TemplateProvider | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.config = config or WorkingMemoryConfig()
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.read_only = read_only
        self.delivery = delivery
        self.template_provider = template_provider
        self.lane = lane_id(self.config.scope, resource_id, thread_id)
        self.store = WorkingMemoryStore(redis, keys=keys, config=self.config, read_only=read_only)
        self.subscription = Subscription(redis, keys, self.lane, signer=signer)
        self.window = WindowTracker(self.lane)
        self.log = DeliveryLog(redis, keys) if (log_deliveries and thread_id) else None

    async def start(self) -> list[Materialised]:
        """Read the lane's current state (call once before the first model call)."""
        items = await self.subscription.bootstrap()
        self._offer(items)
        return items

    def _offer(self, items: Iterable[Materialised]) -> None:
        for item in items:
            self.window.offer(item.signal, item.value)

    async def poll(self, block_ms: int | None = None) -> list[Materialised]:
        """Take in the lane's new signals (non-blocking unless ``block_ms``)."""
        items = await self.subscription.poll(block_ms)
        self._offer(items)
        return items

    async def before_model_call(self, held_ids: Iterable[str]) -> StepResult:
        """New signals, window check, the messages to add (and drop), logged."""
        await self.poll()
        result = self.window.step(set(held_ids))
        if self.log is not None and self.thread_id is not None and result.add:
            await self.log.record(self.thread_id, self.lane, result)
        return result

    async def system_message(self) -> dict[str, str]:
        """The system-message delivery: the whole working memory with its instructions."""
        doc = await self.store.get(self.resource_id, self.thread_id)
        return working_memory_system_message(self.config, doc.data if doc else None,
                                             read_only=self.read_only,
                                             template_provider=self.template_provider)

    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions to offer the model (none when read-only)."""
        definition = tool_definition(self.config, read_only=self.read_only)
        return [definition] if definition else []

    async def call_tool(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Handle the model's ``setWorkingMemory`` call; errors come back as a tool result."""
        if self.read_only:
            return {"success": False, "error": "working memory is read-only for this agent"}
        return await handle_tool_call(self.store, arguments, resource_id=self.resource_id,
                                      thread_id=self.thread_id)

"""Working memory for LangChain 1.x agents: one middleware (``pip install 'wm-signals[langchain]'``).

Usage, one :class:`WorkingMemoryMiddleware` per conversation (its agent serves that thread)::

    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from signals import AgentWorkingMemory
    from signals.integrations.langchain import WorkingMemoryMiddleware

    wm = WorkingMemoryMiddleware(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1"))
    agent = create_agent(model, system_prompt="You are a helpful assistant.",
                         middleware=[SummarizationMiddleware(summary_model, trigger=("messages", 20)), wm],
                         checkpointer=checkpointer)
    await agent.ainvoke({"messages": [HumanMessage(prompt)]}, {"configurable": {"thread_id": "chat-1"}})

What it does, on ``langchain`` >= 1.5 / ``langchain-core`` >= 1.8 (``create_agent`` with
``AgentMiddleware``):

* ``awrap_model_call`` runs the shared core's
  :class:`~signals.integrations._windows.EphemeralWindow` over ``request.messages`` (the
  graph state's messages, after every ``before_model`` middleware: summarisation or any
  trimming that rewrites the state) and hands the model a request with the working-memory
  messages in it. Nothing of it is written to the graph state: the checkpointed history
  never holds a working-memory message, and the window keeps its own. Each block is
  re-inserted on every call right after the conversation message it followed on its
  injection (matched across calls by the message ``id`` LangGraph gives every state message),
  so the prompt prefix stays byte-stable for provider caches. When the state's trimming
  removes that message, the block counts as dropped: the core re-injects the latest
  snapshot and drops the deltas left without one.
* Put it **last** in ``middleware=``: the last middleware's ``wrap_model_call`` is the
  innermost, so it sees the request as the model will (after other middlewares' request
  edits, such as a ``wrap_model_call`` trimming).
* New blocks are ``HumanMessage`` s after the newest message (after the ``ToolMessage`` s of
  the last tool call: never between an ``AIMessage``'s ``tool_calls`` and their results).
* The ``setWorkingMemory`` tool is registered by the middleware itself (its ``tools``);
  a read-only agent gets none.
* ``delivery="system-message"``: Mastra's whole-memory text is appended to the request's
  system message for that call (the agent's ``system_prompt`` stays its prefix); nothing
  else is inserted.

Only the async path exists (``ainvoke``/``astream``): the working memory is read from Redis
with redis.asyncio, and a sync ``invoke`` raises LangChain's own ``NotImplementedError``
naming ``awrap_model_call``. LangGraph's ``create_react_agent(pre_model_hook=...)`` is
deprecated and not supported.

Guarantees where LangChain keeps history outside our reach: the state's messages (and any
checkpoint) never contain a block of ours; a working-memory block found there (put there by
hand, or by another tool) is not passed to the model, since nobody can know which version
it holds. The window lives in this middleware object: a new process, or a new middleware
for the same thread, starts a fresh window and delivers a snapshot at its first call.
Under state signals the system message is never touched (byte-identical on every call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from signals.agent import AgentWorkingMemory
from signals.errors import InvalidInputError
from signals.integrations._core import (
    MessageCodec,
    combine_instructions,
    content_identity,
    is_working_memory_system_text,
    is_working_memory_text,
    tool_spec,
)
from signals.integrations._windows import EphemeralWindow

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.config import get_config
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("signals.integrations.langchain needs LangChain: pip install 'wm-signals[langchain]'") from e

__all__ = ("WorkingMemoryMiddleware", "is_working_memory_message", "working_memory_tool")


def _text_of(block: Any) -> str | None:
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and block.get("type") == "text":
        text = block.get("text")
        return text if isinstance(text, str) else None
    return None


def is_working_memory_message(message: BaseMessage | Any) -> bool:
    """True for a message that carries only working memory: a ``HumanMessage`` whose text is
    one state-signal block, or a ``SystemMessage`` that is the system-message delivery's text."""
    if not isinstance(message, BaseMessage):
        return False
    content = message.content
    texts = [content] if isinstance(content, str) else [_text_of(b) for b in content]
    if not texts or any(t is None for t in texts):
        return False
    if isinstance(message, HumanMessage):
        return all(is_working_memory_text(t) for t in texts if t is not None)
    if isinstance(message, SystemMessage):
        return all(is_working_memory_system_text(t) for t in texts if t is not None)
    return False


class _Codec(MessageCodec[BaseMessage]):
    """LangChain messages for the core: one block per ``HumanMessage``; identity is the message id."""

    def split(self, message: BaseMessage) -> tuple[BaseMessage | None, list[str]]:
        if not isinstance(message, HumanMessage):
            return message, []
        content = message.content
        if isinstance(content, str):
            return (None, [content]) if is_working_memory_text(content) else (message, [])
        markups = [t for b in content if (t := _text_of(b)) is not None and is_working_memory_text(t)]
        if not markups:
            return message, []
        rest = [b for b in content if _text_of(b) not in markups]
        return (message.model_copy(update={"content": rest}) if rest else None), markups

    def build(self, markup: str) -> BaseMessage:
        return HumanMessage(content=markup)

    def identity(self, message: BaseMessage) -> Hashable:
        # LangGraph's add_messages gives every state message an id; a message without one
        # (a request built by another middleware) is matched by its content
        return ("id", message.id) if message.id else content_identity(message)


def working_memory_tool(memory: AgentWorkingMemory, *, check: Callable[[], None] | None = None) -> BaseTool | None:
    """The ``setWorkingMemory`` tool as a LangChain ``StructuredTool`` (``None`` when read-only).

    Async only (``ainvoke``), like the middleware. A refused write comes back to the model
    as the tool's result, never as an exception. ``check`` runs before every write (the
    middleware's thread binding).
    """
    spec = tool_spec(memory)
    if spec is None:
        return None

    async def set_working_memory(**arguments: Any) -> dict[str, Any]:
        if check is not None:
            check()
        return await memory.call_tool(arguments)

    return StructuredTool(name=spec.name, description=spec.description, args_schema=spec.parameters,
                          coroutine=set_working_memory)


class WorkingMemoryMiddleware(AgentMiddleware):
    """The ``create_agent`` middleware of one conversation's working memory (see the module docstring).

    Args:
        memory: the conversation's :class:`~signals.agent.AgentWorkingMemory` (its
            ``delivery`` and ``read_only`` choose what the middleware does).

    With a checkpointer the middleware serves the first LangGraph thread
    (``configurable.thread_id``) it sees and refuses any other with
    :class:`~signals.errors.InvalidInputError`: one window is one model's context, and
    another thread's model must never be handed this conversation's memory.
    """

    def __init__(self, memory: AgentWorkingMemory) -> None:
        super().__init__()
        self.memory = memory
        self._thread: str | None = None
        self.window: EphemeralWindow[BaseMessage] = EphemeralWindow(memory, _Codec())
        tool = working_memory_tool(memory, check=self._check_thread)
        self.tools: Sequence[BaseTool] = [tool] if tool is not None else []

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """Send the model the conversation with this window's working-memory messages in it."""
        self._check_thread()
        prepared = await self.window.prepare(request.messages)
        overrides: dict[str, Any] = {"messages": prepared.messages}
        if prepared.system is not None:
            overrides["system_message"] = _with_system(request.system_message, prepared.system)
        return await handler(request.override(**overrides))


    def _check_thread(self) -> None:
        try:
            thread = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:  # called outside a LangGraph run: nothing to bind to
            return
        if thread is None:
            return
        if self._thread is None:
            self._thread = str(thread)
        elif str(thread) != self._thread:
            raise InvalidInputError(f"this WorkingMemoryMiddleware serves LangGraph thread {self._thread!r}, "
                                    f"not {thread!r}: make one per conversation")


def _with_system(message: SystemMessage | None, system: str) -> SystemMessage:
    """The agent's system message followed by the working-memory text (a new text block when
    the agent's is made of blocks, so that its own blocks stay a byte-stable prefix)."""
    if message is None:
        return SystemMessage(content=system)
    if isinstance(message.content, str):
        return message.model_copy(update={"content": combine_instructions(message.content, system)})
    return message.model_copy(update={"content": [*message.content, {"type": "text", "text": system}]})

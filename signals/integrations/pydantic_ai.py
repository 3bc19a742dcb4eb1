"""Working memory for PydanticAI v2 agents: one capability (``pip install 'wm-signals[pydantic-ai]'``).

Usage, one :class:`WorkingMemory` per conversation (PydanticAI takes capabilities per run)::

    from pydantic_ai import Agent
    from signals import AgentWorkingMemory
    from signals.integrations.pydantic_ai import WorkingMemory

    wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1"))
    agent = Agent(model, instructions="You are a helpful assistant.")
    history = None
    for prompt in prompts:
        result = await agent.run(prompt, message_history=history, capabilities=[trim_history, wm])
        history = result.all_messages()

Pass it per run (``agent.run(..., capabilities=[wm])``), never in ``Agent(capabilities=...)``
of an agent that serves several conversations: one window is one conversation's context.

What it does, through the capability hooks of ``pydantic-ai-slim`` >= 2.68 (v2 removed
``Agent(history_processors=...)``: its replacement, ``ProcessHistory``, is a capability
like this one):

* ``before_model_request`` (once per model request, before any attempt) runs the shared
  core's :class:`~signals.integrations._windows.PersistentWindow` over the request's messages
  and writes the result both into the request and into the run's history
  (``RunContext.messages``), as ``ProcessHistory`` does. The working-memory blocks are
  therefore part of ``result.all_messages()``: the history an application stores and
  passes back as ``message_history`` holds them, and the prompt prefix grows append-only
  (PydanticAI's prompt-cache guidance). Put this capability **after** any capability that
  trims history (a ``ProcessHistory`` keeping the last N messages, a summariser): it then
  sees what the model is about to receive, and when the trimming dropped the snapshot it
  re-injects the latest snapshot and removes the deltas left without one. A change an
  earlier capability made to the request only (PydanticAI's ``FileUnderstanding`` swaps
  files for descriptions that way) stays out of the history: then only the window's own
  outcome (blocks kept, dropped, added) is carried into ``RunContext.messages``.
* New blocks are ``UserPromptPart`` s appended to the last ``ModelRequest`` (after its
  ``ToolReturnPart`` s: PydanticAI also sorts tool results first when it merges requests).
  PydanticAI merges adjacent requests before sending them, and at the start of every run
  it merges them in the stored history too, so a block is recognised by its text, part
  by part (:func:`~signals.integrations._core.is_working_memory_text`), never by the
  message that holds it.
* The ``setWorkingMemory`` tool comes with the capability (its toolset); a read-only agent
  gets no tool at all.
* ``delivery="system-message"`` (on the :class:`~signals.agent.AgentWorkingMemory`) adds
  Mastra's whole-memory system message as one more (dynamic) instruction part of each
  request, after the agent's own instructions; no block goes into the history then.

Guarantees where PydanticAI keeps history outside our reach: a history saved by another
process (or edited by hand) may hold working-memory blocks this window did not make; they
are removed at the next request and the window bootstraps with a fresh snapshot, since
nobody can know which version such a block holds. Blocks in a history passed to a run
without this capability are left alone (nothing of ours runs there). Under state signals
the agent's instructions are never touched, so the system prompt is byte-identical on
every call.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from signals.agent import AgentWorkingMemory
from signals.integrations._core import MessageCodec, is_working_memory_system_text, is_working_memory_text, tool_spec
from signals.integrations._windows import PersistentWindow

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        InstructionPart,
        ModelMessage,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        UserPromptPart,
    )
    from pydantic_ai.tools import RunContext, Tool
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_core import SchemaValidator, core_schema
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("signals.integrations.pydantic_ai needs PydanticAI: pip install 'wm-signals[pydantic-ai]'") from e

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

__all__ = ("WorkingMemory", "is_working_memory_message", "is_working_memory_part", "strip_working_memory",
           "working_memory_tool")


def is_working_memory_part(part: Any) -> bool:
    """True for a part that carries working memory: a state-signal block (``UserPromptPart``)
    or the system-message delivery's text (``SystemPromptPart`` or ``InstructionPart``)."""
    if isinstance(part, UserPromptPart):
        return isinstance(part.content, str) and is_working_memory_text(part.content)
    if isinstance(part, SystemPromptPart | InstructionPart):
        return is_working_memory_system_text(part.content)
    return False


def is_working_memory_message(message: ModelMessage | Any) -> bool:
    """True for a ``ModelRequest`` made only of working-memory parts (or for such a part itself).

    PydanticAI merges adjacent requests, so a working-memory block may share a request with
    the user's prompt or tool results: a summariser or memory extractor should skip the
    parts for which :func:`is_working_memory_part` is true, and whole messages for which
    this is.
    """
    if isinstance(message, ModelRequest):
        return bool(message.parts) and all(is_working_memory_part(p) for p in message.parts)
    if isinstance(message, ModelResponse):
        return False
    return is_working_memory_part(message)


def strip_working_memory(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The history without its working-memory blocks (a request made only of them is left out),
    e.g. for a summariser or a memory extractor that must not read them as user speech."""
    codec = _Codec()
    return [conversation for conversation, _ in map(codec.split, messages) if conversation is not None]


class _Codec(MessageCodec[ModelMessage]):
    """PydanticAI messages for the core: blocks are ``UserPromptPart`` s inside a ``ModelRequest``."""

    def split(self, message: ModelMessage) -> tuple[ModelMessage | None, list[str]]:
        if not isinstance(message, ModelRequest):
            return message, []
        markups = [p.content for p in message.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)
                   and is_working_memory_text(p.content)]
        if not markups:
            return message, []
        rest = [p for p in message.parts if not (isinstance(p, UserPromptPart) and p.content in markups)]
        return (dataclasses.replace(message, parts=rest) if rest else None), markups

    def build(self, markup: str) -> ModelMessage:
        return ModelRequest(parts=[UserPromptPart(markup)])

    def join(self, message: ModelMessage | None, markups: Sequence[str]) -> list[ModelMessage]:
        blocks = [UserPromptPart(m) for m in markups]
        if message is None:
            return [ModelRequest(parts=blocks)] if blocks else []
        if isinstance(message, ModelRequest):  # after the request's own parts (tool results first)
            return [dataclasses.replace(message, parts=[*message.parts, *blocks])] if blocks else [message]
        return [message, ModelRequest(parts=blocks)] if blocks else [message]


def working_memory_tool(memory: AgentWorkingMemory) -> Tool[Any] | None:
    """The ``setWorkingMemory`` tool as a PydanticAI ``Tool`` (``None`` for a read-only agent).

    Its schema is the core's (the template's ``memory`` string, or the schema's fields);
    a refused write comes back to the model as the tool's result, never as an exception.
    """
    spec = tool_spec(memory)
    if spec is None:
        return None

    async def set_working_memory(**arguments: Any) -> dict[str, Any]:
        if set(arguments) == {_NOT_AN_OBJECT}:
            return await memory.call_tool(arguments[_NOT_AN_OBJECT])  # refused, as a result naming the value
        return await memory.call_tool(arguments)

    tool = Tool.from_schema(set_working_memory, name=spec.name, description=spec.description,
                            json_schema=spec.parameters)
    # from_schema takes any JSON value as the arguments and PydanticAI unpacks it into the
    # function: a model sending a list, a string or null made the whole run raise. A value
    # that is not an object is passed through under a name of its own, so that the agent
    # refuses it as for any other loop: a tool result the model reads, not an exception.
    tool.function_schema.validator = SchemaValidator(core_schema.no_info_plain_validator_function(_as_arguments))
    return tool


#: The argument under which tool arguments that are not a JSON object reach the function.
_NOT_AN_OBJECT = "__wm_signals_not_an_object__"


def _as_arguments(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {_NOT_AN_OBJECT: value}


@dataclass
class WorkingMemory(AbstractCapability[Any]):
    """The PydanticAI capability of one conversation's working memory (see the module docstring).

    Args:
        memory: the conversation's :class:`~signals.agent.AgentWorkingMemory` (its
            ``delivery`` and ``read_only`` choose what the capability does).
    """

    memory: AgentWorkingMemory
    _codec: _Codec = field(init=False, repr=False)
    _window: PersistentWindow[ModelMessage] = field(init=False, repr=False)
    _toolset: FunctionToolset[Any] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._codec = _Codec()
        self._window = PersistentWindow(self.memory, self._codec)
        tool = working_memory_tool(self.memory)  # built once: PydanticAI asks for it on every run
        self._toolset = FunctionToolset([tool]) if tool is not None else None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not spec-serializable: it holds a live Redis client."""
        return None

    def get_toolset(self) -> FunctionToolset[Any] | None:
        """The ``setWorkingMemory`` tool, or nothing for a read-only agent."""
        return self._toolset

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Bring the request's window up to date, persist it into the run's history."""
        request = list(request_context.messages)
        same = len(request) == len(ctx.messages) and all(a is b for a, b in zip(request, ctx.messages, strict=True))
        prepared = await self._window.prepare(request)
        if same:
            ctx.messages[:] = prepared.messages
        else:  # an earlier capability changed this request only: its change stays out of the history
            ctx.messages[:] = _carry(self._codec, list(ctx.messages), prepared.messages,
                                     [inj.markup for inj in prepared.result.add])
        request_context.messages = list(prepared.messages)
        if prepared.system is not None:
            params = request_context.model_request_parameters
            parts = [*(params.instruction_parts or []), InstructionPart(content=prepared.system, dynamic=True)]
            request_context.model_request_parameters = dataclasses.replace(
                params, instruction_parts=InstructionPart.sorted(parts))
        return request_context


def _carry(codec: _Codec, history: list[ModelMessage], request: list[ModelMessage],
           new: list[str]) -> list[ModelMessage]:
    """The run's history with the window's outcome for ``request`` applied to it, when an earlier
    capability made ``request`` differ from the history (a request-only edit: it must not persist).

    The history keeps as many copies of each block as the prepared request holds (later
    copies first, as the core pairs them), and gets the new blocks in its last request.
    """
    budget = Counter(markup for message in request for markup in codec.split(message)[1])
    budget.subtract(new)
    out: list[ModelMessage] = []
    for message in reversed(history):
        conversation, markups = codec.split(message)
        keep: list[str] = []
        for markup in reversed(markups):
            if budget[markup] > 0:
                budget[markup] -= 1
                keep.insert(0, markup)
        out[:0] = [message] if len(keep) == len(markups) else codec.join(conversation, keep)
    if new:
        out += codec.join(out.pop() if out else None, new)
    return out

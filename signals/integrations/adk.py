"""Working memory for Google ADK agents: a ``before_model_callback`` and a tool (``pip install 'wm-signals[adk]'``).

Usage, one :class:`WorkingMemory` per session (ADK's session is the conversation)::

    from google.adk.agents import LlmAgent
    from signals import AgentWorkingMemory
    from signals.integrations.adk import WorkingMemory

    wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id=user_id, thread_id=session.id))
    agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.",
                     tools=[*my_tools, *wm.tools()], before_model_callback=[*my_callbacks, wm.before_model_callback])

What it does, on ``google-adk`` >= 2.13:

* ADK rebuilds ``llm_request.contents`` from the session's events before every model call
  (after its own event compaction, ``App(events_compaction_config=...)``, has replaced old
  events with a summary), so whatever a callback puts there lasts for that call only. The
  callback therefore runs the shared core's
  :class:`~signals.integrations._windows.EphemeralWindow`: each working-memory block is
  re-inserted on every call right after the content it followed on its injection
  (contents are matched across calls by their content, since ADK gives them no id), so
  the prompt prefix stays byte-stable. When compaction (or a callback that trims
  ``contents``) removes that content, the block counts as dropped: the core re-injects the
  latest snapshot and drops the deltas left without one. Nothing is written to the session:
  its events never hold a working-memory block.
* Put the callback **last** among the agent's ``before_model_callback`` s, after any that
  trims contents; ADK plugins run before agent callbacks, so a plugin's trimming is seen too.
* A block joins the user content it follows as one more text part (after its
  ``function_response`` parts, which come first in a turn); after a ``model`` content it is
  a ``user`` content of its own.
* The ``setWorkingMemory`` tool (:meth:`WorkingMemory.tools`) is an ADK ``BaseTool`` with the
  core's JSON schema; a read-only agent gets none.
* ``delivery="system-message"``: Mastra's whole-memory text is appended to the request's
  ``system_instruction`` for that call (``LlmRequest.append_instructions``: the agent's
  instruction stays the prefix); nothing else is inserted.

Guarantees where ADK keeps history outside our reach: session events, and a session
service that persists them, never hold a block of ours; a working-memory text found in the
contents (typed by a user, or left by another tool) is not passed to the model, since
nobody can know which version it holds. The window lives in this object: a new process
starts a fresh window and delivers a snapshot at its first call. Two contents that are
exactly equal are told apart by their position in the run of contents both calls share;
when ADK's compaction shifts such a run, a block may count as dropped and be re-injected
as a snapshot (never held twice). Under state signals the system instruction is never
touched (byte-identical on every call).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from signals.agent import AgentWorkingMemory
from signals.errors import InvalidInputError
from signals.integrations._core import (
    MessageCodec,
    content_identity,
    is_working_memory_system_text,
    is_working_memory_text,
    tool_spec,
)
from signals.integrations._windows import EphemeralWindow

try:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("signals.integrations.adk needs Google ADK: pip install 'wm-signals[adk]'") from e

__all__ = ("WorkingMemory", "WorkingMemoryTool", "is_working_memory_message")


def _is_block(part: types.Part) -> bool:
    return part.text is not None and is_working_memory_text(part.text)


def is_working_memory_message(content: types.Content | Any) -> bool:
    """True for a user-role ``types.Content`` (or a ``types.Part``) that carries only working
    memory: text parts that are state-signal blocks, or the system-message delivery's text.
    A model turn is the model's own words, even when it quotes a block."""
    if isinstance(content, types.Part):
        return content.text is not None and (is_working_memory_text(content.text)
                                             or is_working_memory_system_text(content.text))
    if not isinstance(content, types.Content) or not content.parts or content.role == "model":
        return False
    return all(is_working_memory_message(p) for p in content.parts)


class _Codec(MessageCodec[types.Content]):
    """ADK contents for the core: a block is a text part; identity is the content itself."""

    def split(self, message: types.Content) -> tuple[types.Content | None, list[str]]:
        if message.role == "model":  # the model quoting a block is conversation, not working memory
            return message, []
        parts = message.parts or []
        markups = [p.text for p in parts if p.text is not None and _is_block(p)]
        if not markups:
            return message, []
        rest = [p for p in parts if not _is_block(p)]
        return (message.model_copy(update={"parts": rest}) if rest else None), markups

    def identity(self, message: types.Content) -> Hashable:
        # ADK gives contents no id and rebuilds them from the session's events every call:
        # their JSON is their identity (pydantic's serialiser: a few microseconds a content)
        try:
            return message.model_dump_json(exclude_none=True)
        except ValueError:  # PydanticSerializationError: a lone surrogate in a text, say
            return content_identity(message.model_dump(exclude_none=True))

    def build(self, markup: str) -> types.Content:
        return types.Content(role="user", parts=[types.Part(text=markup)])

    def join(self, message: types.Content | None, markups: Sequence[str]) -> list[types.Content]:
        if message is None or not markups:
            return super().join(message, markups)
        if message.role == "user":  # one user turn: its function responses, then the blocks
            parts = [*(message.parts or []), *(types.Part(text=m) for m in markups)]
            return [message.model_copy(update={"parts": parts})]
        return super().join(message, markups)


class WorkingMemoryTool(BaseTool):
    """The ``setWorkingMemory`` tool as an ADK tool, over one :class:`~signals.agent.AgentWorkingMemory`.

    A refused write comes back to the model as the tool's result, never as an exception.
    """

    def __init__(self, memory: AgentWorkingMemory, *, binding: _SessionBinding | None = None) -> None:
        spec = tool_spec(memory)
        if spec is None:
            raise InvalidInputError("a read-only agent has no setWorkingMemory tool")
        super().__init__(name=spec.name, description=spec.description)
        self._memory = memory
        self._parameters = spec.parameters
        self._binding = binding or _SessionBinding()

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description,
                                         parameters_json_schema=self._parameters)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Perform the write for the model's call."""
        self._binding.check(tool_context.session.id)
        return await self._memory.call_tool(args)


class _SessionBinding:
    """One window per session: bound to the first session that uses it, refusing any other,
    since another session's model must never see this one's memory."""

    def __init__(self) -> None:
        self.session_id: str | None = None

    def check(self, session_id: str) -> None:
        if self.session_id is None:
            self.session_id = session_id
        elif session_id != self.session_id:
            raise InvalidInputError(f"this WorkingMemory serves ADK session {self.session_id!r}, "
                                    f"not {session_id!r}: make one per session")


class WorkingMemory:
    """One ADK session's working memory: the callback and the tool (see the module docstring).

    Args:
        memory: the session's :class:`~signals.agent.AgentWorkingMemory` (its ``thread_id``
            is best the ADK session id; ``delivery`` and ``read_only`` choose what the
            callback and the tool do).

    The callback and the tool serve the first ADK session they see and refuse any other
    with :class:`~signals.errors.InvalidInputError`: one window is one model's context, and
    another session's model must never be handed this session's memory.
    """

    def __init__(self, memory: AgentWorkingMemory) -> None:
        self.memory = memory
        self.window: EphemeralWindow[types.Content] = EphemeralWindow(memory, _Codec())
        self._binding = _SessionBinding()

    def tools(self) -> list[BaseTool]:
        """The ``setWorkingMemory`` tool, or none for a read-only agent."""
        return [] if tool_spec(self.memory) is None else [WorkingMemoryTool(self.memory, binding=self._binding)]

    async def before_model_callback(self, callback_context: CallbackContext,
                                    llm_request: LlmRequest) -> LlmResponse | None:
        """Put this window's working memory into the request (returns ``None``: the call goes on)."""
        self._binding.check(callback_context.session.id)
        prepared = await self.window.prepare(llm_request.contents)
        llm_request.contents = prepared.messages
        if prepared.system is not None:
            llm_request.append_instructions([prepared.system])
        return None

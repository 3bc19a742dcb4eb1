"""Working memory in the OpenAI Agents SDK (extra ``[openai-agents]``, ``openai-agents>=0.24``).

One helper per conversation, used as the run's model-input filter and tool source::

    wm = OpenAIAgentsWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u1", thread_id="t1"))
    agent = Agent(name="assistant", instructions=SYSTEM, tools=[*my_tools, *wm.tools()])
    result = await Runner.run(agent, "hello", session=session, run_config=wm.run_config())

:meth:`OpenAIAgentsWorkingMemory.run_config` sets ``RunConfig(call_model_input_filter=...)``,
which the SDK (0.24) calls before every model call of a run, streamed or not
(``run_internal/run_loop.py``: ``run_single_turn_streamed`` and ``get_new_response``
both go through ``maybe_filter_model_input``), with ``CallModelData`` and
whose ``ModelInputData(input, instructions)`` is what that ONE call sends; the SDK keeps
none of it in the run's items or the session. So this is an
:class:`~signals.integrations._windows.EphemeralWindow`: the helper keeps its working-memory
messages itself and re-inserts them on every call after the item they followed when
added (items are matched by their ``id``/``call_id`` when they have one, else by content),
so the prefix of the input stays byte-stable for the provider's prompt cache.

What is guaranteed, and what the SDK keeps out of reach: the history is whatever the SDK
hands the filter (a session's ``get_items`` under its ``SessionSettings(limit=...)``, or
``result.to_input_list()`` the caller passes back, after any filter given as ``inner``,
e.g. a trimming one). When that history lacks the item a working-memory message
followed, the message counts as dropped and the next call re-injects a snapshot of the
latest version (orphaned deltas dropped): the model can rebuild the latest version at
every call. An item the SDK rewrites between calls (``ToolOutputTrimmer`` shortening old
tool outputs, say) counts as gone together with everything before it, which costs a re-
injection, never a wrong memory. With a server-side conversation (``conversation_id``,
``previous_response_id``) the server holds the history, which the filter cannot see:
use a local session or input list with this helper.

Deliveries: under state signals ``instructions`` pass through untouched (byte-identical on
every call); under ``delivery="system-message"`` Mastra's working-memory system text, read
at that call, follows the agent's instructions. Read-only agents: :meth:`tools` is empty.
Memory another process writes between two model calls (even within one run, between a
tool call and the next model call) reaches the next call: every filter call polls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

from signals.agent import AgentWorkingMemory
from signals.core.codec import encode_json
from signals.integrations._core import (
    MessageCodec,
    combine_instructions,
    content_identity,
    field,
    is_working_memory_text,
    single_text,
    tool_spec,
)
from signals.integrations._windows import EphemeralWindow, Prepared

if TYPE_CHECKING:
    from agents import RunConfig, Tool
    from agents.run_config import CallModelData, ModelInputData

__all__ = ("OpenAIAgentsWorkingMemory", "ResponsesItemCodec", "is_working_memory_message")

Item = Any  # a TResponseInputItem: a dict, or a pydantic item the SDK left unconverted
InputFilter = Callable[["CallModelData[Any]"], "ModelInputData | Awaitable[ModelInputData]"]



def _markup_of(item: Item) -> str | None:
    """The markup a user message item carries when it is a working-memory message."""
    if field(item, "role") != "user" or field(item, "type") not in (None, "message"):
        return None
    content = single_text(field(item, "content"), "input_text")
    return content if isinstance(content, str) and is_working_memory_text(content) else None


class ResponsesItemCodec(MessageCodec[Item]):
    """Responses-format input items: working memory as ``{"role": "user", "content": markup}`` items."""

    def split(self, message: Item) -> tuple[Item | None, list[str]]:
        """``(None, [markup])`` for a working-memory item, ``(item, [])`` for any other."""
        markup = _markup_of(message)
        return (None, [markup]) if markup is not None else (message, [])

    def build(self, markup: str) -> Item:
        """An easy-input user message holding the markup."""
        return {"role": "user", "content": markup}

    def identity(self, message: Item) -> Hashable:
        """The item's ``id`` (model output) or ``call_id`` (tool call, tool output), else its content."""
        kind = field(message, "type")
        for name in ("id", "call_id"):
            value = field(message, name)
            if isinstance(value, str) and value:
                return (kind, name, value)
        return content_identity(field(message, "role"), kind, field(message, "content"))


def is_working_memory_message(item: Item) -> bool:
    """True for a working-memory input item, for summarisers and extractors to skip."""
    return _markup_of(item) is not None


class OpenAIAgentsWorkingMemory:
    """The OpenAI Agents SDK adapter: one per conversation (see the module docstring).

    Args:
        agent: the thread's :class:`~signals.agent.AgentWorkingMemory` (its ``delivery``
            and ``read_only`` decide the deliveries and the tool).
        inner: a ``call_model_input_filter`` of your own to run first (e.g. trimming);
            working memory is placed into what it returns.
    """

    def __init__(self, agent: AgentWorkingMemory, *, inner: InputFilter | None = None) -> None:
        self.agent = agent
        self.inner = inner
        self.window: EphemeralWindow[Item] = EphemeralWindow(agent, ResponsesItemCodec())
        self.last: Prepared[Item] | None = None

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """The ``call_model_input_filter``: this call's input with the working memory placed in it."""
        from agents.run_config import ModelInputData  # noqa: PLC0415 - the framework is an optional extra

        model_data = data.model_data
        if self.inner is not None:
            returned = self.inner(data)
            model_data = returned if isinstance(returned, ModelInputData) else await returned
        self.last = await self.window.prepare(model_data.input)
        return ModelInputData(input=self.last.messages,
                              instructions=combine_instructions(model_data.instructions, self.last.system))

    def run_config(self, **kwargs: Any) -> RunConfig:
        """A ``RunConfig`` with this helper as its ``call_model_input_filter`` (other settings as given)."""
        from agents import RunConfig  # noqa: PLC0415 - the framework is an optional extra

        return RunConfig(call_model_input_filter=self, **kwargs)

    def tools(self) -> list[Tool]:
        """The ``setWorkingMemory`` function tool (none for a read-only agent)."""
        from agents import FunctionTool  # noqa: PLC0415 - the framework is an optional extra

        spec = tool_spec(self.agent)
        if spec is None:
            return []
        return [FunctionTool(name=spec.name, description=spec.description, params_json_schema=spec.parameters,
                             on_invoke_tool=self._invoke, strict_json_schema=False)]

    async def _invoke(self, _context: Any, arguments: str) -> str:
        """The tool's handler: the write's result as JSON text (errors included, for the model to read)."""
        return encode_json(await self.agent.call_tool(arguments))


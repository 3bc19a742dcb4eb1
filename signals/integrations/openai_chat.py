"""Working memory in a hand-rolled OpenAI Chat Completions loop (extra ``[openai]``).

Before every ``client.chat.completions.create(...)``::

    wm = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u1", thread_id="t1"))
    messages = await wm.prepare(messages)          # keep this list as the history
    response = await client.chat.completions.create(model=..., messages=messages,
                                                    tools=[*my_tools, *wm.tools()])
    for call in response.choices[0].message.tool_calls or []:
        if (result := await wm.handle_tool_call(call)) is not None:
            messages.append(result)                # the "tool" message answering it

The helper never imports the SDK: it reads the message dicts ``create`` takes (and the
SDK's response objects by their attributes).

Placement: each working-memory delivery is its own ``user`` message appended at the end,
after the newest message: after the ``tool`` messages answering the last assistant tool
call (the API requires them directly after the assistant's ``tool_calls``), never between.
The list ``prepare`` returns is the history (a :class:`PersistentWindow`): trim it however
the loop likes; see :mod:`signals.integrations._windows` for what trimming does.

Deliveries: under state signals the system messages are never touched. Under
``delivery="system-message"`` ``prepare`` puts Mastra's working-memory system message, read
at that call, right after the leading ``system``/``developer`` messages, in place of the one
the previous call put there. Read-only agents: :meth:`OpenAIChatWorkingMemory.tools` is
empty and the tool handler refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from signals.agent import AgentWorkingMemory
from signals.core.codec import encode_json
from signals.integrations._core import (
    TOOL_NAME,
    MessageCodec,
    field,
    is_working_memory_system_text,
    is_working_memory_text,
    single_text,
    tool_spec,
)
from signals.integrations._windows import PersistentWindow, Prepared

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionFunctionToolParam

__all__ = ("OpenAIChatCodec", "OpenAIChatWorkingMemory", "is_working_memory_message")

Message = Any  # a message dict, or the SDK's ChatCompletionMessage appended as it came



class OpenAIChatCodec(MessageCodec[Message]):
    """Chat Completions messages: working memory as whole ``user`` messages."""

    def split(self, message: Message) -> tuple[Message | None, list[str]]:
        """``(None, [markup])`` for a working-memory message, ``(message, [])`` for any other."""
        content = single_text(field(message, "content"), "text")
        if field(message, "role") == "user" and isinstance(content, str) and is_working_memory_text(content):
            return None, [content]
        return message, []

    def build(self, markup: str) -> Message:
        """A ``user`` message holding one working-memory markup."""
        return {"role": "user", "content": markup}


def is_working_memory_message(message: Message) -> bool:
    """True for a working-memory message (a state signal, or the system-message delivery's), to skip."""
    content = single_text(field(message, "content"), "text")
    if not isinstance(content, str):
        return False
    role = field(message, "role")
    return (role == "user" and is_working_memory_text(content)) or \
        (role == "system" and is_working_memory_system_text(content))


class OpenAIChatWorkingMemory:
    """The Chat Completions loop helper: one per conversation (see the module docstring).

    Args:
        agent: the thread's :class:`~signals.agent.AgentWorkingMemory` (its ``delivery``
            and ``read_only`` decide the deliveries and the tool).
    """

    def __init__(self, agent: AgentWorkingMemory) -> None:
        self.agent = agent
        self.window: PersistentWindow[Message] = PersistentWindow(agent, OpenAIChatCodec())
        self.last: Prepared[Message] | None = None

    async def prepare(self, messages: Sequence[Message]) -> list[Message]:
        """The messages to send to this call and keep as the history (polls the lane first)."""
        self.last = await self.window.prepare(messages)
        out = self.last.messages
        if self.last.result.system is None:
            return out
        out = [m for m in out if not (field(m, "role") == "system" and
                                      is_working_memory_system_text(field(m, "content")))]
        head = 0
        while head < len(out) and field(out[head], "role") in ("system", "developer"):
            head += 1
        return [*out[:head], dict(self.last.result.system), *out[head:]]

    def tools(self) -> list[ChatCompletionFunctionToolParam]:
        """The ``setWorkingMemory`` tool in the Chat Completions format (none for a read-only agent)."""
        spec = tool_spec(self.agent)
        if spec is None:
            return []
        return [cast("ChatCompletionFunctionToolParam", {"type": "function", "function": {
            "name": spec.name, "description": spec.description, "parameters": spec.parameters}})]

    async def handle_tool_call(self, call: Any) -> dict[str, Any] | None:
        """The ``tool`` message answering a ``setWorkingMemory`` tool call; ``None`` for other tools.

        Accepts the SDK's tool-call object or its dict form (arguments are a JSON string).
        A failed write comes back as the tool's content for the model, never an exception.
        """
        function = field(call, "function")
        if function is None or field(function, "name") != TOOL_NAME:
            return None
        arguments = field(function, "arguments")
        result = await self.agent.call_tool(arguments)  # not an object: an error result naming it
        return {"role": "tool", "tool_call_id": field(call, "id"), "content": encode_json(result)}

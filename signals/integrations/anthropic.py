"""Working memory in a hand-rolled Anthropic Messages loop (extra ``[anthropic]``).

Before every ``client.messages.create(...)``::

    wm = AnthropicWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u1", thread_id="t1"))
    messages = await wm.prepare(messages)          # keep this list as the history
    response = await client.messages.create(model=..., system=wm.system(SYSTEM), messages=messages,
                                            tools=[*my_tools, *wm.tools()], max_tokens=...)
    for block in response.content:
        if (result := await wm.handle_tool_use(block)) is not None:
            tool_results.append(result)            # a tool_result block for the next user turn

The helper never imports the SDK: it reads the plain message dicts (and the SDK's response
blocks, pydantic models, by their attributes) that ``messages.create`` takes.

Placement: the working-memory blocks are text blocks appended to the newest user turn,
after its ``tool_result`` blocks (the API requires those first) and after the user's own
text, one block per delivery; a user turn given as a string becomes a list of blocks.
When the newest message is not a user turn (an assistant prefill) they go in a new user
turn after it. The list ``prepare`` returns is the history (a :class:`PersistentWindow`):
trim it however the loop likes; a block trimmed away counts as dropped, and the next call
re-injects a snapshot when the chain it held is gone (see :mod:`signals.integrations._windows`).

Deliveries: under state signals ``system(base)`` returns ``base`` unchanged on every call
(byte-stable for the prompt cache); under ``delivery="system-message"`` it returns ``base``
followed by Mastra's working-memory system text read at the last ``prepare``. Read-only
agents: :meth:`AnthropicWorkingMemory.tools` is empty and the tool handler refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast, overload

from signals.agent import AgentWorkingMemory
from signals.core.codec import encode_json
from signals.errors import InvalidInputError
from signals.integrations._core import (
    TOOL_NAME,
    MessageCodec,
    combine_instructions,
    field,
    is_working_memory_text,
    tool_spec,
)
from signals.integrations._windows import PersistentWindow, Prepared

if TYPE_CHECKING:
    from anthropic.types import ToolParam

__all__ = ("AnthropicCodec", "AnthropicWorkingMemory", "is_working_memory_message", "strip_working_memory")

Message = Any  # a MessageParam dict (a user turn is always a dict), or the SDK's objects in assistant turns



def _wm_block(block: Any) -> str | None:
    """The markup a content block carries, when it is a working-memory text block."""
    if field(block, "type") != "text":
        return None
    text = field(block, "text")
    return text if isinstance(text, str) and is_working_memory_text(text) else None


def _text_block(markup: str) -> dict[str, str]:
    return {"type": "text", "text": markup}


class AnthropicCodec(MessageCodec[Message]):
    """Messages API turns: working memory as text blocks of user turns."""

    def split(self, message: Message) -> tuple[Message | None, list[str]]:
        """A user turn without its working-memory text blocks, and those blocks."""
        if field(message, "role") != "user":
            return message, []
        content = field(message, "content")
        if isinstance(content, str):
            return (None, [content]) if is_working_memory_text(content) else (message, [])
        if not isinstance(content, list):
            return message, []
        markups = [m for m in map(_wm_block, content) if m is not None]
        if not markups:
            return message, []
        rest = [b for b in content if _wm_block(b) is None]
        return ({**message, "content": rest} if rest else None), markups

    def build(self, markup: str) -> Message:
        """A user turn holding one working-memory text block."""
        return {"role": "user", "content": [_text_block(markup)]}

    def join(self, message: Message | None, markups: Sequence[str]) -> list[Message]:
        """The blocks appended to ``message`` when it is a user turn (after its tool results), else a new turn."""
        if not markups:
            return [] if message is None else [message]
        blocks = [_text_block(m) for m in markups]
        if message is None:
            return [{"role": "user", "content": blocks}]
        if field(message, "role") != "user":
            return [message, {"role": "user", "content": blocks}]
        content = field(message, "content")
        if content is not None and not isinstance(content, (str, list, tuple)):
            raise InvalidInputError(f"a user turn's content must be text or a list of blocks, "
                                    f"not {type(content).__name__}")
        head = [_text_block(content)] if isinstance(content, str) else list(content or [])
        return [{**message, "content": head + blocks}]


def is_working_memory_message(message: Message) -> bool:
    """True for a turn made only of working memory (state-signal blocks), for summarisers to skip.

    A user turn that also carries tool results or user text is not one; use
    :func:`strip_working_memory` to read such a turn without its working-memory blocks.
    """
    conv, markups = AnthropicCodec().split(message)
    return conv is None and bool(markups)


def strip_working_memory(message: Message) -> Message | None:
    """The turn without its working-memory blocks (``None`` when nothing else was in it)."""
    return AnthropicCodec().split(message)[0]


class AnthropicWorkingMemory:
    """The Anthropic Messages loop helper: one per conversation (see the module docstring).

    Args:
        agent: the thread's :class:`~signals.agent.AgentWorkingMemory` (its ``delivery``
            and ``read_only`` decide the deliveries and the tool).
    """

    def __init__(self, agent: AgentWorkingMemory) -> None:
        self.agent = agent
        self.window: PersistentWindow[Message] = PersistentWindow(agent, AnthropicCodec())
        self.last: Prepared[Message] | None = None

    async def prepare(self, messages: Sequence[Message]) -> list[Message]:
        """The messages to send to this call and keep as the history (polls the lane first)."""
        self.last = await self.window.prepare(messages)
        return self.last.messages

    @overload
    def system(self, base: str) -> str: ...
    @overload
    def system(self, base: None = None) -> str | None: ...

    def system(self, base: str | None = None) -> str | None:
        """The ``system`` parameter for this call: ``base``, plus the memory under system-message delivery."""
        return combine_instructions(base, self.last.system if self.last else None)

    def tools(self) -> list[ToolParam]:
        """The ``setWorkingMemory`` tool in the Messages API's format (none for a read-only agent)."""
        spec = tool_spec(self.agent)
        if spec is None:
            return []
        return [cast("ToolParam", {"name": spec.name, "description": spec.description,
                                   "input_schema": spec.parameters})]

    async def handle_tool_use(self, block: Any) -> dict[str, Any] | None:
        """The ``tool_result`` block for a ``setWorkingMemory`` ``tool_use`` block; ``None`` for other blocks.

        Accepts the SDK's ``ToolUseBlock`` or its dict form. A failed write (or a read-only
        agent) comes back as an ``is_error`` result the model can read, never an exception.
        """
        if field(block, "type") != "tool_use" or field(block, "name") != TOOL_NAME:
            return None
        arguments = field(block, "input")
        result = await self.agent.call_tool(arguments)  # not an object: an error result naming it
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": field(block, "id"),
                               "content": encode_json(result)}
        if not result.get("success"):
            out["is_error"] = True
        return out


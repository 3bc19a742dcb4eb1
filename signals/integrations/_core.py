"""What every framework adapter shares but the windows: recognising working-memory text,
the codec interface an adapter writes for its message type (:class:`MessageCodec`), the
``setWorkingMemory`` tool in neutral form (:func:`tool_spec`), and small helpers (reading a
message's fields, a message's identity, joining instructions). No framework imports.

The windows that decide which working-memory messages a model call sees, and where, are
:mod:`signals.integrations._windows`.

**Recognising working memory.** :func:`is_working_memory_text` is the one text test
(a whole ``<working-memory ...>`` markup, as rendered: contents are escaped, so the test
is exact) and :func:`is_working_memory_system_text` the test for the system-message
delivery's text; each adapter exposes ``is_working_memory_message(msg)`` for its message
type so that summarisers and memory extractors can skip them.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import msgspec

from signals.agent import AgentWorkingMemory
from signals.core.models import TAG_NAME
from signals.errors import InvalidInputError
from signals.tool import TOOL_NAME, tool_definition

__all__ = (
    "TOOL_NAME",
    "MessageCodec",
    "ToolSpec",
    "combine_instructions",
    "content_identity",
    "field",
    "is_working_memory_system_text",
    "is_working_memory_text",
    "single_text",
    "tool_spec",
)

M = TypeVar("M")

# A whole markup as signals.core.render renders it: attributes with escaped values, then
# escaped contents (no "<" inside) and the closing tag, or a self-closing tag.
_MARKUP = re.compile(
    rf'<{TAG_NAME}(?: [A-Za-z_][A-Za-z0-9_.-]*="[^"<>]*")*(?: />|>[^<]*</{TAG_NAME}>)', re.DOTALL)
_SYSTEM_HEADS = ("WORKING MEMORY (system):\n", "WORKING MEMORY (system, read-only):\n")


def is_working_memory_text(text: object) -> bool:
    """True when ``text`` is exactly one working-memory markup (a state-signal message).

    Anything but a string (a framework's content parts, ``None``) is not one.
    """
    return isinstance(text, str) and text.startswith(f"<{TAG_NAME}") and _MARKUP.fullmatch(text) is not None


def is_working_memory_system_text(text: object) -> bool:
    """True when ``text`` is the system-message delivery's text (with or without tool guidelines).

    Anything but a string (a system message given as content parts, ``None``) is not one.
    """
    return isinstance(text, str) and text.startswith(_SYSTEM_HEADS) and "<working_memory_data>" in text


@overload
def combine_instructions(instructions: str, system: str | None) -> str: ...
@overload
def combine_instructions(instructions: None, system: str | None) -> str | None: ...


def combine_instructions(instructions: str | None, system: str | None) -> str | None:
    """The agent's own instructions followed by the working-memory system text (a blank line between).

    For APIs that take one system string (Anthropic ``system``, OpenAI Agents
    ``instructions``): the agent's part stays a byte-stable prefix.
    """
    if not system:
        return instructions
    return f"{instructions}\n\n{system}" if instructions else system


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping (``None`` when missing), else the attribute (``None`` when missing).

    Framework messages come as dicts or as the SDK's objects; this reads either, with a
    fast path for ``dict`` (an ABC ``isinstance`` check per field is measurable on long
    histories, read in full before every model call).
    """
    if type(obj) is dict:
        return obj.get(name)
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def single_text(content: Any, part_type: str) -> Any:
    """``content`` as text when it is one text part of ``part_type`` (``text`` in Chat
    Completions, ``input_text`` in Responses items), which the APIs take for a string and a
    history store may write back for ours; else ``content`` as it is. Without it, our block
    would come back unrecognised and the next call would add it again: one version twice."""
    if isinstance(content, list) and len(content) == 1 and field(content[0], "type") == part_type:
        return field(content[0], "text")
    return content


def content_identity(*parts: Any) -> str:
    """A stable identity for a conversation message from its JSON-able content.

    Canonical JSON (sorted keys), hashed: two calls that see the same message (even as
    a new but equal object, as frameworks rebuild their history) agree on it. Content
    that JSON cannot encode (a lone surrogate, which Python's ``json`` makes of a client's
    ``"\ud800"``; a non-string key) is identified by its ``repr`` instead: still equal
    for equal content, at worst a re-anchoring when a framework rebuilds it in another
    key order.

    Raises:
        InvalidInputError: the content refers to itself or is nested past Python's
            recursion limit (no identity can be computed).
    """
    try:
        try:
            data = msgspec.json.encode(parts, order="sorted", enc_hook=_enc_hook)
        except (TypeError, UnicodeEncodeError, OverflowError):
            data = repr(parts).encode("utf-8", "backslashreplace")
    except RecursionError as e:
        raise InvalidInputError("a message nested too deeply, or one that refers to itself, has no identity") from e
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _enc_hook(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):  # pydantic models (framework message parts)
        return dump(mode="json")
    return repr(obj)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The ``setWorkingMemory`` tool, framework-neutral: each adapter wraps it in its own tool type."""

    name: str
    description: str
    parameters: dict[str, Any]  # a JSON Schema object


def tool_spec(agent: AgentWorkingMemory) -> ToolSpec | None:
    """The tool to offer the model, or ``None`` for a read-only agent (no tool at all)."""
    definition = tool_definition(agent.config, read_only=agent.read_only)
    if definition is None:
        return None
    function = definition["function"]
    return ToolSpec(function["name"], function["description"], function["parameters"])


class MessageCodec(ABC, Generic[M]):
    """How the core reads and builds one framework's messages (all an adapter must write).

    ``split`` and ``join`` are inverses: ``join(*split(m)) == [m]`` for a message the core
    did not change (the core keeps the original object then, for byte stability).
    """

    @abstractmethod
    def split(self, message: M) -> tuple[M | None, list[str]]:
        """The message without its working-memory blocks (``None`` when nothing else is in
        it), and those blocks' markups in order (use :func:`is_working_memory_text`)."""

    @abstractmethod
    def build(self, markup: str) -> M:
        """A user-role message carrying one working-memory markup as its text."""

    def join(self, message: M | None, markups: Sequence[str]) -> list[M]:
        """The messages for conversation ``message`` followed by these working-memory blocks.

        Default: the message, then one :meth:`build` message per markup. Override to
        merge the blocks into ``message`` (after its tool results) where the API wants
        one user turn.
        """
        return ([] if message is None else [message]) + [self.build(m) for m in markups]

    def identity(self, message: M) -> Hashable:
        """A conversation message's identity across calls (ephemeral windows only).

        Default: :func:`content_identity` of the message; override to use a stable id the
        framework gives its messages, or to leave out fields it rewrites between calls.
        """
        return content_identity(message)

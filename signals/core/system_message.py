"""The other delivery path: working memory as one system message, on every model call.

This is what Mastra does by default (its ``WorkingMemory`` input processor): the update
guidelines, the template and the current data in one system message. It costs the whole
document on every call and, because the system message changes whenever memory changes,
it breaks provider prompt caches; the state-signal path exists to avoid both. It stays
available per configuration (``delivery="system-message"``) and is the token benchmark's
baseline. A read-only agent gets the data with no update instructions. Pure: no I/O.

The data is escaped (``&``, ``<``, ``>``) as in a state signal's markup: it is written by a
model from what users said, and unescaped, a ``</working_memory_data>`` in it would end
the data block and put the rest in front of the model as system instructions. The
guidelines, the template and the schema are the deployment's own and go as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from signals.core.codec import encode_json
from signals.core.memory import WorkingMemoryConfig, json_schema_of
from signals.core.render import escape_text

__all__ = ("TemplateProvider", "working_memory_system_message")

#: Returns the template for one request (per-user or per-tenant templates), or None.
TemplateProvider = Callable[[], str | None]

_GUIDELINES = """\
WORKING MEMORY (system):
You keep a working memory about the user and this conversation, and you maintain it with the \
{tool} tool. Anything you may need again later belongs in it.

How to maintain it:
1. Save facts that could matter later in the conversation or in future ones.
2. Update it as soon as something changes, however small the change.
3. Keep it in {fmt}.
4. Do not talk about this memory with the user, and do not ask the user for information just to fill it.
5. {shape}

Notes:
- The memory exists so that you can keep the conversation going even when the earlier messages are no \
longer in your context window; keep it current for that reason.
- Keep every section of the template, filled or empty.
- Call {tool} in any reply where you learned something relevant that is not stored yet.
- Keep the {fmt} structure shown above when you update it.
"""
_READ_ONLY = """\
WORKING MEMORY (system, read-only):
What follows is persistent information about the user and this conversation, collected in earlier \
interactions. Use it for context and continuity; it cannot be changed from here.
"""


def working_memory_system_message(
    config: WorkingMemoryConfig,
    data: str | None,
    *,
    read_only: bool = False,
    template_provider: TemplateProvider | None = None,
    tool_name: str = "setWorkingMemory",
) -> dict[str, str]:
    """The ``system`` chat message holding the working memory (and, unless read-only, how to update it)."""
    body = escape_text(data) if data and data.strip() else ""
    if read_only:
        text = f"{_READ_ONLY}\n<working_memory_data>\n{body}\n</working_memory_data>"
        return {"role": "system", "content": text}
    if config.format == "json":
        shape = ("Send only the fields to add or change as a JSON object; null deletes a field and arrays "
                 "are replaced whole.")
        schema = json_schema_of(config.schema) if config.schema is not None else {}
        template_block = f"<working_memory_schema>\n{encode_json(schema)}\n</working_memory_schema>"
    else:
        shape = "Send the whole updated Markdown document as a string in the memory field, never an object."
        template = (template_provider() if template_provider else None) or config.template or ""
        template_block = f"<working_memory_template>\n{template}\n</working_memory_template>"
    guidelines = _GUIDELINES.format(tool=tool_name, fmt="JSON" if config.format == "json" else "Markdown",
                                    shape=shape)
    text = f"{guidelines}\n{template_block}\n\n<working_memory_data>\n{body}\n</working_memory_data>"
    return {"role": "system", "content": text}

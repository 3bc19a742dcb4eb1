"""The agent's tool: ``setWorkingMemory``, its definition and its handler.

The description tells the model that the current state arrives in ``<working-memory>``
blocks each turn and to call the tool only for new or changed facts. Template mode takes
``{"memory": string}`` (the whole Markdown document); schema mode takes the schema's
fields (merged: only what changes, ``null`` deletes). Errors go back to the model as a
tool result, never as an exception, so it can correct itself. Read-only agents get no
tool (:func:`tool_definition` returns ``None``).
"""

from __future__ import annotations

from typing import Any

from signals.core.memory import WorkingMemoryConfig, json_schema_of, parse_merge_input
from signals.errors import ConflictError, CorruptDataError, InvalidInputError, ReadOnlyError
from signals.streams.store import WorkingMemoryStore

__all__ = ("TOOL_NAME", "handle_tool_call", "tool_definition")

TOOL_NAME = "setWorkingMemory"
_PREAMBLE = (
    "The current working memory arrives each turn from the system inside a "
    "<working-memory>...</working-memory> block (a full snapshot, or a unified diff against "
    "the previous one). It is system state, not something the user typed. Read from it "
    "directly. Call this tool only when the user gives genuinely new or changed facts worth "
    "keeping; never call it to re-save unchanged data."
)


def tool_definition(config: WorkingMemoryConfig, *, read_only: bool = False) -> dict[str, Any] | None:
    """The function-calling tool definition (OpenAI ``tools`` shape), or ``None`` when read-only."""
    if read_only:
        return None
    if config.format == "json":
        assert config.schema is not None
        parameters = dict(json_schema_of(config.schema))
        parameters.pop("required", None)  # merge semantics: every field is optional
        description = f"{_PREAMBLE} Send only the fields to add or change; null deletes a field."
    else:
        parameters = {"type": "object", "properties": {"memory": {
            "type": "string", "description": "The whole updated Markdown working memory, as a string."}},
            "required": ["memory"]}
        description = f"{_PREAMBLE} Pass the full updated Markdown document in the memory field."
    return {"type": "function", "function": {"name": TOOL_NAME, "description": description,
                                             "parameters": parameters}}


async def handle_tool_call(
    store: WorkingMemoryStore,
    arguments: dict[str, Any] | str,
    *,
    resource_id: str,
    thread_id: str | None = None,
) -> dict[str, Any]:
    """Perform the write; returns the tool result for the model (``success`` and a message)."""
    try:
        version = await _write(store, arguments, resource_id, thread_id)
    except (InvalidInputError, CorruptDataError, ConflictError, ReadOnlyError) as e:
        return {"success": False, "error": str(e)}
    return {"success": True, "version": version}


async def _write(store: WorkingMemoryStore, arguments: dict[str, Any] | str, resource_id: str,
                 thread_id: str | None) -> int:
    if isinstance(arguments, str):
        arguments = parse_merge_input(arguments)
    if store.config.format == "json":
        return await store.merge(resource_id, arguments, thread_id=thread_id)
    memory = arguments.get("memory")
    if not isinstance(memory, str):
        raise InvalidInputError("the memory field must be a string holding the whole Markdown document")
    return await store.replace(resource_id, memory, thread_id=thread_id)

"""The MCP tools: read, set and look back at the caller's working memory.

``get_working_memory``, ``set_working_memory`` and ``get_working_memory_history`` act on
the caller's resource, or on one of its threads (``thread_id``). They have the store's
semantics and the agent tool's (:mod:`signals.tool`) error results: template mode
replaces the whole Markdown document (a write equal to the empty template over existing
memory, or a blank one, is refused); schema mode deep-merges a JSON object (``null``
deletes a key, arrays are replaced whole) and validates the result, naming the failing
fields; ``expected_version`` makes the write a compare-and-set; documents over the size
limit are refused; nothing is written half-way. A tool's own failure (bad arguments, a
refused write, a conflict, Redis away) is a tool result with ``isError`` set and a
message, so the model can correct itself; naming a resource or thread that is not the
caller's is a refusal, the protocol's error (:mod:`workers.mcp.access`).
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
import structlog
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field
from redis import exceptions as redis_exc

from signals.core.codec import encode_json
from signals.core.memory import json_schema_of
from signals.core.signing import Signer
from signals.core.wire import MAX_VERSION
from signals.errors import (
    ConflictError,
    CorruptDataError,
    InvalidInputError,
    RedisUnavailableError,
    SchemaValidationError,
    ThreadOwnerError,
    WmSignalsError,
)
from signals.streams.keys import lane_id
from signals.streams.subscribe import Subscription
from workers.mcp.access import Access, Caller, refuse

__all__ = ("HISTORY", "TOOL_NAMES", "Tools")

log = structlog.get_logger(__name__)
GET, SET, HISTORY = "get_working_memory", "set_working_memory", "get_working_memory_history"
TOOL_NAMES = (GET, SET, HISTORY)
_ID = {"type": "string", "minLength": 1, "maxLength": 512}


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    resource_id: str | None = Field(None, max_length=512)
    thread_id: str | None = Field(None, max_length=512)


class _GetArgs(_Args):
    pass


class _SetArgs(_Args):
    memory: str | dict[str, Any]
    expected_version: int | None = Field(None, ge=0, le=MAX_VERSION)
    idempotency_key: str | None = Field(None, min_length=1, max_length=512)


class _HistoryArgs(_Args):
    limit: int = Field(5, ge=1, le=20)


_TARGET = {
    "resource_id": {**_ID, "description": "Your resource (user) id; defaults to it. Any other is refused."},
    "thread_id": {**_ID, "description": "A thread (conversation) of your resource: its own working memory "
                                        "instead of the resource's."},
}


def _schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": {**_TARGET, **properties}, "required": list(required),
            "additionalProperties": False}


def _result(payload: dict[str, Any], *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=encode_json(payload))], structured_content=payload,
                          is_error=error)


def _failure(error: Exception) -> CallToolResult:
    """A tool's own failure as its result: the message, and what a caller can act on."""
    payload: dict[str, Any] = {"success": False, "error": str(error)}
    if isinstance(error, ConflictError):
        payload.update(kind="conflict", expectedVersion=error.expected, version=error.actual)
    elif isinstance(error, SchemaValidationError):
        payload.update(kind="schema", fields=list(error.fields))
    elif isinstance(error, InvalidInputError):
        payload["kind"] = "invalid"
    elif isinstance(error, CorruptDataError):
        payload["kind"] = "corrupt"
    elif isinstance(error, RedisUnavailableError):
        payload["kind"] = "unavailable"
    elif isinstance(error, redis_exc.RedisError):
        payload.update(kind="unavailable", error=f"Redis: {error}")
    else:  # read-only, durability not reached
        payload["kind"] = "refused"
    return _result(payload, error=True)


class Tools:
    """The tool list and the calls, over one store (its config: template or schema mode)."""

    def __init__(self, access: Access, signer: Signer | None = None) -> None:
        self.access = access
        self.store = access.store
        self.signer = signer

    def definitions(self) -> list[Tool]:
        """The tools, their input schemas following the store's mode."""
        config = self.store.config
        shared: dict[str, Any] = {}
        if config.format == "json":
            assert config.schema is not None
            merge = dict(json_schema_of(config.schema))
            merge.pop("required", None)  # a merge names only what changes
            merge.pop("$schema", None)
            for key in ("$defs", "definitions"):  # "#/$defs/..." references resolve from the input schema's root
                if key in merge:
                    shared[key] = merge.pop(key)
            memory: dict[str, Any] = {**merge, "description": "The fields to add or change (deep-merged; null "
                                                               "deletes a field; arrays are replaced whole)."}
            what = "Merge a JSON object into"
        else:
            memory = {"type": "string", "description": "The whole updated Markdown document."}
            what = "Replace the whole Markdown document of"
        read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
        return [
            Tool(name=GET, description="Read your working memory (your resource's, or a thread's): its text, "
                                       "format and version.",
                 input_schema=_schema({}), annotations=read_only),
            Tool(name=SET, description=f"{what} your working memory. Only for new or changed facts. "
                                       "expected_version makes it fail with a conflict unless the document is "
                                       "still at that version.",
                 input_schema={**_schema({"memory": memory,
                                          "expected_version": {"type": "integer", "minimum": 0,
                                                               "maximum": MAX_VERSION},
                                          "idempotency_key": {**_ID, "description": "A retry with the same key "
                                                                                    "applies once."}},
                                         ("memory",)), **shared},
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)),
            Tool(name=HISTORY, description="The recent versions of your working memory (oldest first), as "
                                           "signalled to models.",
                 input_schema=_schema({"limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5}}),
                 annotations=read_only),
        ]

    async def call(self, name: str, arguments: dict[str, Any] | None) -> CallToolResult:
        """Run a tool; its own failures are error results, refusals raise :class:`MCPError`."""
        models: dict[str, type[_Args]] = {GET: _GetArgs, SET: _SetArgs, HISTORY: _HistoryArgs}
        model = models.get(name)
        if model is None:
            return _result({"success": False, "kind": "invalid",
                            "error": f"unknown tool {name[:80]!r}: the tools are {', '.join(TOOL_NAMES)}"}, error=True)
        caller = self.access.caller(f"tools/call {name}")
        try:
            args = model.model_validate(arguments or {})
        except pydantic.ValidationError as e:
            detail = "; ".join(f"{'.'.join(map(str, err['loc'])) or '(arguments)'}: {err['msg']}"
                               for err in e.errors()[:10])
            return _result({"success": False, "kind": "invalid", "error": f"invalid arguments: {detail}"}, error=True)
        try:
            resource_id, thread_id = await self._target(caller, args, name)
            if isinstance(args, _SetArgs):
                return await self._set(caller, resource_id, thread_id, args)
            if isinstance(args, _HistoryArgs):
                return await self._history(resource_id, thread_id, args.limit)
            return await self._get(resource_id, thread_id)
        except ThreadOwnerError as e:  # the owner moved under a write (a race with another resource's claim)
            raise refuse(caller, f"tools/call {name}", str(e)) from e
        except MCPError:
            raise
        except (WmSignalsError, redis_exc.RedisError) as e:
            log.info("mcp.tool_failed", tool=name, resource=caller.resource_id, error=str(e)[:200])
            return _failure(e)

    async def _target(self, caller: Caller, args: _Args, name: str) -> tuple[str, str | None]:
        """The resource and thread a call addresses, after the access checks."""
        resource_id = args.resource_id if args.resource_id is not None else caller.resource_id
        self.access.check_resource(caller, resource_id, f"tools/call {name}")
        thread_id = args.thread_id if args.thread_id is not None else caller.thread_id
        if thread_id is not None:
            lane_id("thread", resource_id, thread_id)  # a valid id, or InvalidInputError
            await self.access.check_thread(caller, thread_id, f"tools/call {name}", may_create=name == SET)
        return resource_id, thread_id

    @staticmethod
    def _scope(thread_id: str | None) -> Literal["resource", "thread"]:
        return "resource" if thread_id is None else "thread"

    async def _get(self, resource_id: str, thread_id: str | None) -> CallToolResult:
        doc = await self.store.get(resource_id, thread_id, scope=self._scope(thread_id))
        lane = lane_id(self._scope(thread_id), resource_id, thread_id)
        if doc is None:
            return _result({"success": True, "lane": lane, "exists": False, "version": 0,
                            "format": self.store.config.format, "memory": None,
                            "template": self.store.config.template if self.store.config.format == "markdown" else None})
        return _result({"success": True, "lane": lane, "exists": True, "version": doc.version, "format": doc.format,
                        "memory": doc.data})

    async def _set(self, caller: Caller, resource_id: str, thread_id: str | None, args: _SetArgs) -> CallToolResult:
        scope = self._scope(thread_id)
        if self.store.config.format == "json":
            version = await self.store.merge(resource_id, args.memory, thread_id=thread_id, scope=scope,
                                             if_version=args.expected_version, idempotency_key=args.idempotency_key)
        elif isinstance(args.memory, str):
            version = await self.store.replace(resource_id, args.memory, thread_id=thread_id, scope=scope,
                                               if_version=args.expected_version,
                                               idempotency_key=args.idempotency_key)
        else:
            raise InvalidInputError("memory must be a string: this server keeps Markdown working memory (template "
                                    "mode), the whole document")
        log.debug("mcp.written", resource=caller.resource_id, thread=thread_id, version=version)
        return _result({"success": True, "lane": lane_id(scope, resource_id, thread_id), "version": version})

    async def _history(self, resource_id: str, thread_id: str | None, limit: int) -> CallToolResult:
        lane = lane_id(self._scope(thread_id), resource_id, thread_id)
        sub = Subscription(self.store.redis, self.store.keys, lane, signer=self.signer)
        items = (await sub.bootstrap(from_start=True))[-limit:]
        versions = [{"version": m.signal.version, "mode": m.signal.mode, "emittedAt": m.signal.emitted_at,
                     "writeVersion": m.signal.write_version, "memory": m.value} for m in items]
        return _result({"success": True, "lane": lane, "versions": versions})

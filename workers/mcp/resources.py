"""The MCP resources: a resource's and a thread's working memory, and their versions.

Reading ``wm://resource/{id}`` or ``wm://thread/{id}`` gives the document rendered as the
model receives it in a snapshot: ``<working-memory format="markdown" scope="resource">``
around the stored text (trimmed as the signals trim it, ``&``, ``<`` and ``>`` escaped),
or the empty element when nothing is stored. ``.../version`` gives the document's version
as a decimal number (``0``: none stored). The caller's own resource (and its version) is
listed in ``resources/list``; threads are reached through the templates.

A malformed URI, or one naming another resource or a thread the caller's resource does
not own, is refused with the protocol's error and a message (see :mod:`workers.mcp.access`);
a Redis failure is the protocol's internal error with its message.
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)
from redis import exceptions as redis_exc

from signals.core.cachekey import js_trim
from signals.core.render import render_markup
from signals.errors import InvalidInputError, WmSignalsError
from workers.mcp.access import Access, Caller
from workers.mcp.uris import TEMPLATES, Target, parse, uri_of

__all__ = ("Resources", "target_of")


def target_of(uri: str) -> Target:
    """The target a URI names, or the protocol's ``INVALID_PARAMS`` error saying what is wrong."""
    try:
        return parse(uri)
    except InvalidInputError as e:
        raise MCPError(INVALID_PARAMS, str(e), data={"uri": str(uri)[:200]}) from e


class Resources:
    """Resource templates, the caller's resources, and reads."""

    def __init__(self, access: Access) -> None:
        self.access = access

    @staticmethod
    def templates() -> list[ResourceTemplate]:
        """The four URI templates (see :mod:`workers.mcp.uris`)."""
        return [ResourceTemplate(uri_template=t, name=name, description=text, mime_type=mime)
                for t, name, text, mime in TEMPLATES]

    def listed(self) -> list[Resource]:
        """The caller's own resource and its version."""
        caller = self.access.caller("resources/list")
        rid = caller.resource_id
        return [Resource(uri=uri_of("resource", rid), name=f"working-memory of {rid}", mime_type="text/plain",
                         description="Your working memory, as the model receives it."),
                Resource(uri=uri_of("resource", rid, "version"), name=f"working-memory version of {rid}",
                         mime_type="text/plain", description="Its document version (0: none stored).")]

    async def authorize(self, caller: Caller, target: Target, action: str) -> None:
        """Refuse a target that is not the caller's (see :class:`~workers.mcp.access.Access`)."""
        if target.kind == "resource":
            self.access.check_resource(caller, target.id, action)
        else:
            await self.access.check_thread(caller, target.id, action)

    async def read(self, uri: str) -> ReadResourceResult:
        """Read a working-memory resource the caller may see."""
        target = target_of(uri)
        caller = self.access.caller("resources/read")
        try:
            await self.authorize(caller, target, "resources/read")
            store = self.access.store
            if target.kind == "resource":
                doc = await store.get(target.id, scope="resource")
            else:
                doc = await store.get(caller.resource_id, target.id, scope="thread")
        except (WmSignalsError, redis_exc.RedisError) as e:
            raise MCPError(INTERNAL_ERROR, f"reading {target.uri}: {e}") from e
        if target.part == "version":
            text = str(doc.version if doc else 0)
        else:
            data = js_trim(doc.data) if doc else ""
            fmt = doc.format if doc else store.config.format
            text = render_markup(data, {"format": fmt, "scope": target.kind})
        return ReadResourceResult(contents=[TextResourceContents(uri=uri, text=text, mime_type="text/plain",
                                                                 _meta={"version": doc.version if doc else 0})])

"""The MCP resource URIs of working memory, and which lane each one names. Pure.

Four URI templates (RFC 6570 simple expansion: an id is percent-encoded, so a ``/`` in an
id never reads as a path separator)::

    wm://resource/{resourceId}            the resource's working memory, as the model reads it
    wm://resource/{resourceId}/version    its document version (a decimal number)
    wm://thread/{threadId}                a thread's working memory
    wm://thread/{threadId}/version        its document version

:func:`parse` turns a URI a client sent into a :class:`Target` or refuses it with
:class:`~signals.errors.InvalidInputError` naming what is wrong; nothing else of the
URI (query, fragment, user info, a port) is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote

from signals.core.wire import lane_owner_id, lane_scope, make_lane
from signals.errors import InvalidInputError
from signals.streams.keys import validate_id

__all__ = ("MAX_URI_LENGTH", "TEMPLATES", "Target", "lane_uris", "parse", "uri_of")

#: The longest URI taken: an id of 512 characters, each percent-encoded as up to 4 UTF-8 bytes.
MAX_URI_LENGTH = 32 + 512 * 12

Kind = Literal["resource", "thread"]
Part = Literal["memory", "version"]

#: ``(uri template, name, description, mime type)`` of every resource template.
TEMPLATES: tuple[tuple[str, str, str, str], ...] = (
    ("wm://resource/{resourceId}", "working-memory",
     "A resource's (user's) working memory, rendered as the model receives it: "
     '<working-memory format="..." scope="resource">...</working-memory>.', "text/plain"),
    ("wm://resource/{resourceId}/version", "working-memory-version",
     "The version of a resource's working-memory document (0: none stored yet).", "text/plain"),
    ("wm://thread/{threadId}", "thread-working-memory",
     "A thread's (conversation's) working memory, rendered as the model receives it.", "text/plain"),
    ("wm://thread/{threadId}/version", "thread-working-memory-version",
     "The version of a thread's working-memory document (0: none stored yet).", "text/plain"),
)


@dataclass(frozen=True, slots=True)
class Target:
    """What a URI names: a resource's or a thread's document, or its version."""

    kind: Kind
    id: str
    part: Part = "memory"

    @property
    def lane(self) -> str:
        """The lane of the document (``r:<id>`` or ``t:<id>``)."""
        return make_lane(self.kind, self.id)

    @property
    def uri(self) -> str:
        """The canonical URI of this target."""
        return uri_of(self.kind, self.id, self.part)


def uri_of(kind: Kind, id_: str, part: Part = "memory") -> str:
    """The URI of a resource's or thread's document (or its version)."""
    base = f"wm://{kind}/{quote(id_, safe='')}"
    return base + "/version" if part == "version" else base


def lane_uris(lane: str) -> tuple[str, str]:
    """The two URIs a change of ``lane`` updates: its document and its version."""
    kind: Kind = "resource" if lane_scope(lane) == "resource" else "thread"
    return uri_of(kind, lane_owner_id(lane)), uri_of(kind, lane_owner_id(lane), "version")


def parse(uri: object) -> Target:
    """The target a URI names.

    Raises:
        InvalidInputError: not a string, too long, not one of the four templates, or an
            id that is not valid (see :func:`~signals.streams.keys.validate_id`).
    """
    if not isinstance(uri, str):
        raise InvalidInputError("a resource URI must be a string")
    if len(uri) > MAX_URI_LENGTH:
        raise InvalidInputError(f"resource URI is {len(uri)} characters, over the limit of {MAX_URI_LENGTH}")
    shown = uri[:80]
    prefix, sep, rest = uri.partition("://")
    if prefix != "wm" or not sep:
        raise InvalidInputError(f"unknown resource URI {shown!r}: the URIs are wm://resource/{{resourceId}} and "
                                "wm://thread/{threadId}, each optionally followed by /version")
    kind, _, path = rest.partition("/")
    if kind not in ("resource", "thread"):
        raise InvalidInputError(f"unknown resource URI {shown!r}: after wm:// comes resource/ or thread/")
    encoded, _, part = path.partition("/")
    if part not in ("", "version") or any(c in path for c in "?#"):
        raise InvalidInputError(f"unknown resource URI {shown!r}: after the id only /version may follow")
    try:
        id_ = unquote(encoded, errors="strict")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"resource URI {shown!r}: the id's percent-encoding is not UTF-8") from e
    validate_id(id_, "resource id" if kind == "resource" else "thread id")
    return Target("resource" if kind == "resource" else "thread", id_, "version" if part else "memory")

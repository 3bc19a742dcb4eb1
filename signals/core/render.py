"""Rendering signals for the model: Mastra's ``<working-memory ...>`` markup and chat messages.

Contents escape ``&``, ``<`` and ``>``; attribute values also escape ``"``; attributes
with a null value are left out; empty contents render as a self-closing tag. The model
receives the markup as a ``user``-role message (Mastra's choice: system messages break
prompt caching when they change). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from signals.core.models import TAG_NAME, Attributes

__all__ = ("anthropic_message", "chat_message", "escape_attribute", "escape_text", "render_markup", "signal_markup")

_XML_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def escape_text(value: str) -> str:
    """Escape element text: ``&``, ``<``, ``>``."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attribute(value: str) -> str:
    """Escape an attribute value: element escapes plus ``"``."""
    return escape_text(value).replace('"', "&quot;")


def render_markup(
    contents: str, attributes: Mapping[str, str | None], tag_name: str = TAG_NAME
) -> str:
    """Render ``<tag attr="...">contents</tag>`` (or ``<tag ... />`` when contents is empty).

    Raises:
        ValueError: the tag or an attribute name is not a valid XML name.
    """
    if not _XML_NAME.fullmatch(tag_name):
        raise ValueError(f"invalid signal XML tag name: {tag_name!r}")
    parts = []
    for key, value in attributes.items():
        if value is None:
            continue
        if not _XML_NAME.fullmatch(key):
            raise ValueError(f"invalid signal XML attribute name: {key!r}")
        parts.append(f'{key}="{escape_attribute(str(value))}"')
    attrs = (" " + " ".join(parts)) if parts else ""
    if not contents:
        return f"<{tag_name}{attrs} />"
    return f"<{tag_name}{attrs}>{escape_text(contents)}</{tag_name}>"


def chat_message(markup: str, role: Literal["user", "system"] = "user") -> dict[str, str]:
    """An OpenAI-style chat message (``{"role", "content"}``), also fine for most chat APIs."""
    return {"role": role, "content": markup}


def anthropic_message(markup: str) -> dict[str, object]:
    """An Anthropic Messages API user turn holding one text block."""
    return {"role": "user", "content": [{"type": "text", "text": markup}]}


def signal_markup(contents: str, attributes: Attributes) -> str:
    """The markup of a working-memory message: ``contents`` with the signal's attributes
    (``format``, ``scope`` and, on a delta, ``patch``)."""
    return render_markup(contents, {"format": attributes.format, "scope": attributes.scope,
                                    "patch": attributes.patch})

"""The template environment: Jinja2 with autoescaping on for every template, and the filters
the pages use. Every string a template prints is escaped unless a filter here built it from
escaped parts (:func:`diff_lines` returns classes and text, never markup)."""

from __future__ import annotations

import json
from typing import Any

import jinja2

from signals.core.tokens import approx_tokens

__all__ = ("ENV", "render")

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("workers.ui", "templates"),
    autoescape=True,  # every template, whatever its name: memory text is hostile
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def pretty(text: str | None, fmt: str | None) -> str:
    """A document as shown: JSON pretty-printed (when it parses), anything else as it is."""
    if text is None:
        return ""
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            return text
    return text


def diff_lines(patch: str | None) -> list[tuple[str, str]]:
    """A unified diff as (class, line) pairs: ``hunk``, ``add``, ``del`` or ``ctx``."""
    out = []
    for line in (patch or "").split("\n"):
        kind = "hunk" if line.startswith("@@") else "add" if line.startswith("+") else \
            "del" if line.startswith("-") else "ctx"
        out.append((kind, line))
    return out


def size(text: str | None) -> str:
    """Bytes and approximate tokens of a text (``ceil(bytes / 4)``, the ``bytes4`` counter)."""
    text = text or ""
    return f"{len(text.encode('utf-8', 'surrogatepass')):,} B · ~{approx_tokens(text):,} tok"


ENV.filters["pretty"] = pretty
ENV.filters["diff_lines"] = diff_lines
ENV.filters["size"] = size
ENV.filters["tokens"] = lambda text: approx_tokens(text or "")


def render(name: str, **context: Any) -> str:
    """Render template ``name`` with ``context``."""
    return ENV.get_template(name).render(**context)

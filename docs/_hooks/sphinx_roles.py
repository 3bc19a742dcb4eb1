"""Griffe extension for the API reference: the docstrings' Sphinx roles as code spans.

The docstrings cross-reference with Sphinx roles (``:class:`~signals.errors.ConflictError```,
``:meth:`ThreadOwners.owner <signals.streams.threads.ThreadOwners.owner>```), which
mkdocstrings would print as they are. This turns each into a code span of the name a
reader needs (the last part with ``~``, the title of a titled role, else the target).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|data|mod|attr|exc|obj|const):`(?P<tilde>~?)(?P<body>[^`]+)`")


def _span(match: re.Match[str]) -> str:
    body = match["body"].strip()
    titled = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", body)
    if titled:
        return f"`{titled['title']}`"
    name = body.rsplit(".", 1)[-1] if match["tilde"] else body
    return f"`{name}`"


def plain(text: str) -> str:
    """``text`` with every Sphinx role replaced by a code span."""
    return _ROLE.sub(_span, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **_: Any) -> None:
        """Every object but packages and modules (griffe calls its own hooks for those)."""
        _rewrite(obj)

    def on_package(self, *, pkg: griffe.Module, **_: Any) -> None:
        """A package's docstring (the API page opens with ``signals``')."""
        _rewrite(pkg)

    def on_module(self, *, mod: griffe.Module, **_: Any) -> None:
        """A module's docstring."""
        _rewrite(mod)


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = plain(obj.docstring.value)

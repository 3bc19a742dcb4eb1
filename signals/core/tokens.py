"""Token counting for cost figures and the ``compact`` policy's size test.

The approximation is one token per four UTF-8 bytes, rounded up: close to what BPE
tokenizers give for English prose and Markdown, deterministic, and free of model
downloads. Pure: no I/O.
"""

from __future__ import annotations

from signals.core.cachekey import utf8

__all__ = ("approx_tokens",)


def approx_tokens(text: str) -> int:
    """Approximate token count of ``text`` (``ceil(utf8 bytes / 4)``)."""
    size = len(text) if text.isascii() else len(utf8(text))
    return (size + 3) // 4

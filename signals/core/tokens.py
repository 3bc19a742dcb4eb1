"""Token counting for cost figures and the ``compact`` policy's size test. Pure: no I/O.

A token counter is any ``Callable[[str], int]`` (:data:`TokenCounter`): the size test in
:func:`signals.core.processor.decide`, the agent window's coalescing choice
(:mod:`signals.core.window`) and the token benchmark take one as an argument, so the
core never loads a tokenizer itself. The default, :func:`approx_tokens`, is one token per
four UTF-8 bytes, rounded up: close to what BPE tokenizers give for English prose and
Markdown, deterministic, dependency-free. A real one (OpenAI's ``cl100k_base``, from the
``tokens`` extra) is built outside the core by :func:`signals.tokenizers.token_counter`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from signals.core.cachekey import utf8

__all__ = ("COUNTERS", "CounterName", "TokenCounter", "approx_tokens")

TokenCounter = Callable[[str], int]
"""Counts the tokens of a text; must be deterministic (the same text, the same count)."""

CounterName = Literal["bytes4", "cl100k"]
#: The counters by name: ``bytes4`` (:func:`approx_tokens`) and ``cl100k`` (tiktoken).
COUNTERS: tuple[CounterName, ...] = ("bytes4", "cl100k")


def approx_tokens(text: str) -> int:
    """Approximate token count of ``text`` (``ceil(utf8 bytes / 4)``)."""
    size = len(text) if text.isascii() else len(utf8(text))
    return (size + 3) // 4

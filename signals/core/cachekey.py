"""Content-addressed cache keys, with JavaScript ``String.prototype.trim`` semantics.

``cacheKey = "sha256:" + hex(sha256(utf8(format) + b"\\x00" + utf8(trimmed data)))``.
Python's ``str.strip()`` is not JavaScript's ``trim()``: it also strips U+001C..U+001F and
U+0085, and it keeps U+FEFF. :func:`js_trim` strips exactly ECMAScript's WhiteSpace and
LineTerminator code points. Strings are hashed as UTF-8, with lone surrogates encoded
as U+FFFD, which is what Node's ``hash.update(string)`` does.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ("JS_WHITESPACE", "cache_key", "js_trim", "utf8")

#: ECMAScript WhiteSpace + LineTerminator (Unicode Zs as V8 ships it: U+180E excluded).
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_LONE_SURROGATE = re.compile("[" + chr(0xD800) + "-" + chr(0xDFFF) + "]")


def js_trim(text: str) -> str:
    """Trim ``text`` like JavaScript's ``String.prototype.trim``."""
    return text.strip(JS_WHITESPACE)


def utf8(text: str) -> bytes:
    """Encode like Node does for strings: UTF-8, lone surrogates become U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


_PREFIXES = {"markdown": b"markdown\x00", "json": b"json\x00"}


def cache_key(fmt: str, data: str) -> str:
    """Cache key of already-trimmed ``data`` in format ``fmt`` (always 71 characters)."""
    prefix = _PREFIXES.get(fmt) or utf8(fmt) + b"\x00"
    digest = hashlib.sha256(prefix + utf8(data)).hexdigest()
    return "sha256:" + digest

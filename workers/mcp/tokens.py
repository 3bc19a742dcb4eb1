"""Bearer tokens for ``wm-signals mcp --transport http``: each token maps to one resource id.

The tokens file is a JSON object, token -> resource id::

    {"k3Zq...a long random token...": "alice",
     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "bob"}

A key ``sha256:<64 hex digits>`` holds the SHA-256 of the token instead of the token, so
the file need not hold the secret itself. Tokens are at least :data:`MIN_TOKEN_LENGTH`
characters; resource ids are checked like every id (:func:`~signals.streams.keys.validate_id`).
A file that breaks any rule is refused at start, naming the entry.

:class:`TokenFileVerifier` is the SDK's ``TokenVerifier``: the presented token is hashed and
looked up by its digest (the comparison never branches on the token's bytes). The access
token it returns carries the resource id as ``subject`` (and ``client_id``): a deployer's
own verifier (JWT, introspection) plugs in the same way, putting the resource id there.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import msgspec
from mcp.server.auth.provider import AccessToken

from signals.core.codec import decode_json
from signals.errors import InvalidInputError
from signals.streams.keys import validate_id

__all__ = ("MIN_TOKEN_LENGTH", "TokenFileVerifier", "load_tokens", "token_digest")

#: The shortest token taken (characters): ``openssl rand -hex 32`` gives 64.
MIN_TOKEN_LENGTH = 16
#: The largest tokens file read (bytes).
MAX_FILE_BYTES = 16 << 20
_HASHED = re.compile(r"sha256:([0-9a-f]{64})")


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token's UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _entries(path: str) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InvalidInputError(f"--tokens-file {path}: {e.strerror or e}") from e
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInputError(f"--tokens-file {path}: larger than {MAX_FILE_BYTES:,} bytes")
    try:
        parsed = decode_json(data)
    except msgspec.DecodeError as e:
        raise InvalidInputError(f"--tokens-file {path}: not valid JSON: {e}") from e
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidInputError(f"--tokens-file {path}: must be a non-empty JSON object, token -> resource id")
    return parsed


def load_tokens(path: str) -> dict[bytes, str]:
    """Token digest -> resource id, from a tokens file (see the module).

    Raises:
        InvalidInputError: unreadable, not a JSON object, a short token, a malformed
            ``sha256:`` key, a resource id that is not valid, or a token listed twice.
    """
    out: dict[bytes, str] = {}
    for number, (token, resource) in enumerate(_entries(path).items(), start=1):
        where = f"--tokens-file {path}, entry {number}"
        hashed = _HASHED.fullmatch(token)
        if token.startswith("sha256:") and hashed is None:
            raise InvalidInputError(f"{where}: a sha256: key takes 64 lowercase hex digits")
        if hashed is None and len(token) < MIN_TOKEN_LENGTH:
            raise InvalidInputError(f"{where}: a token must be at least {MIN_TOKEN_LENGTH} characters")
        try:
            validate_id(resource, "resource id")
        except InvalidInputError as e:
            raise InvalidInputError(f"{where}: {e}") from e
        digest = bytes.fromhex(hashed.group(1)) if hashed else token_digest(token)
        if digest in out:
            raise InvalidInputError(f"{where}: the same token is listed twice")
        out[digest] = resource
    return out


class TokenFileVerifier:
    """The SDK's ``TokenVerifier`` over a tokens file (read once, at construction)."""

    def __init__(self, path: str) -> None:
        self._resources = load_tokens(path)

    @property
    def count(self) -> int:
        """How many tokens the file holds."""
        return len(self._resources)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access token of a known bearer token (its resource id as ``subject``), else ``None``."""
        resource = self._resources.get(token_digest(token))
        if resource is None:
            return None
        return AccessToken(token="", client_id=resource, subject=resource, scopes=[])

"""Bearer tokens for ``wm-signals mcp --transport http``: each token maps to one resource id.

The tokens file is a JSON object, token -> resource id::

    {"k3Zq...a long random token...": "alice",
     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "bob"}

A key ``sha256:<64 hex digits>`` holds the SHA-256 of the token instead of the token, so
the file need not hold the secret itself. Tokens are at least :data:`MIN_TOKEN_LENGTH`
characters; resource ids are checked like every id (:func:`~signals.streams.keys.validate_id`).
A file that breaks any rule is refused at start, naming the entry; the file is read again
when it changes (see :class:`TokenFileVerifier`).

:class:`TokenFileVerifier` is the SDK's ``TokenVerifier``: the presented token is hashed and
looked up by its digest (the comparison never branches on the token's bytes). The access
token it returns carries the resource id as ``subject`` (and ``client_id``): a deployer's
own verifier (JWT, introspection) plugs in the same way, putting the resource id there.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import structlog
from mcp.server.auth.provider import AccessToken

from signals.core.codec import decode_json
from signals.errors import InvalidInputError
from signals.streams.keys import validate_id

__all__ = ("MIN_TOKEN_LENGTH", "TokenFileVerifier", "load_tokens", "token_digest")

log = structlog.get_logger(__name__)

#: The shortest token taken (characters): ``openssl rand -hex 32`` gives 64.
MIN_TOKEN_LENGTH = 16
#: The largest tokens file read (bytes).
MAX_FILE_BYTES = 16 << 20
_HASHED = re.compile(r"sha256:([0-9a-f]{64})")


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token's UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _read(path: str) -> bytes:
    try:
        with Path(path).open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InvalidInputError(f"--tokens-file {path}: {e.strerror or e}") from e
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInputError(f"--tokens-file {path}: larger than {MAX_FILE_BYTES:,} bytes")
    return data


def _entries(path: str, data: bytes) -> dict[str, Any]:
    try:
        parsed = decode_json(data)
    except msgspec.DecodeError as e:
        raise InvalidInputError(f"--tokens-file {path}: not valid JSON: {e}") from e
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidInputError(f"--tokens-file {path}: must be a non-empty JSON object, token -> resource id")
    return parsed


def load_tokens(path: str, data: bytes | None = None) -> dict[bytes, str]:
    """Token digest -> resource id, from a tokens file (see the module), or from ``data``
    when given (the file's bytes, read already).

    Raises:
        InvalidInputError: unreadable, not a JSON object, a short token, a malformed
            ``sha256:`` key, a resource id that is not valid, or a token listed twice.
    """
    out: dict[bytes, str] = {}
    entries = _entries(path, _read(path) if data is None else data)
    for number, (token, resource) in enumerate(entries.items(), start=1):
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
    """The SDK's ``TokenVerifier`` over a tokens file, read at construction (a bad file is
    refused then) and again when it changes.

    At most once per ``check_every_s`` a request reads the file again (its SHA-256 tells a
    change, whatever its timestamps say); when it changed, its tokens replace the ones held,
    so a token added or revoked takes effect at the next request (an open stream stays
    open: its token was checked when it opened). A file that goes missing or breaks a
    rule fails closed: every token is refused until the file is valid again, and
    ``mcp.tokens_reload_failed`` is logged (an error) naming what is wrong, once per change
    (deleting the file, or emptying it, revokes every token at once).
    """

    def __init__(self, path: str, *, check_every_s: float = 1.0) -> None:
        self._path = path
        self._check_every_s = check_every_s
        data = _read(path)
        self._resources = load_tokens(path, data)
        self._digest: bytes | None = hashlib.sha256(data).digest()
        self._checked = time.monotonic()

    @property
    def count(self) -> int:
        """How many tokens are held."""
        return len(self._resources)

    def _reload(self) -> None:
        """Read the file again and take its tokens when it changed (in a worker thread: a
        file read does not belong on the event loop)."""
        problem: str | None = None
        try:
            data = _read(self._path)
            digest: bytes | None = hashlib.sha256(data).digest()
        except InvalidInputError as e:
            data, digest, problem = b"", None, str(e)
        if digest == self._digest:  # unchanged, or still missing (reported once)
            return
        self._digest = digest
        if digest is not None:
            try:
                resources = load_tokens(self._path, data)
            except InvalidInputError as e:
                resources, problem = {}, str(e)
        else:
            resources = {}
        self._resources = resources
        if problem is None:
            log.info("mcp.tokens_reloaded", path=self._path, tokens=len(resources))
        else:
            log.error("mcp.tokens_reload_failed", error=problem,
                      note="every token is refused until the file is valid again")

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access token of a known bearer token (its resource id as ``subject``), else ``None``."""
        now = time.monotonic()
        if now - self._checked >= self._check_every_s:
            self._checked = now
            await anyio.to_thread.run_sync(self._reload)
        resource = self._resources.get(token_digest(token))
        if resource is None:
            return None
        return AccessToken(token="", client_id=resource, subject=resource, scopes=[])

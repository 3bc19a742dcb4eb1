"""The UI's options and the bind rule: loopback by default; any other address needs a token."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field

from signals.core.retention import Retention
from signals.errors import InvalidInputError

__all__ = ("DEFAULT_PAGE", "MAX_LIVE", "UiOptions", "is_loopback")

#: Rows per page of a lane's signals and a thread's timeline.
DEFAULT_PAGE = 50
#: Live (server-sent events) pages served at once: each holds one Redis connection in a blocking read.
MAX_LIVE = 50
#: The shortest token accepted: a token guards tenants' data on a network.
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback address only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class UiOptions:
    """How the UI serves.

    Attributes:
        host: the address to bind; anything but loopback needs ``token``.
        port: the TCP port (0: any free port).
        token: the access token; required on a non-loopback bind, where every request must
            carry it (``Authorization: Bearer``, or once as ``?token=`` which sets a cookie).
        operator: serve the dead-letter requeue and drop (with a confirmation); else read-only.
        page: rows per page.
        retention: the workers' retention, quoted where a lane's history starts (``None``: unknown).
        live_block_ms: how long one blocking read of a live page waits before a keep-alive.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    operator: bool = False
    page: int = DEFAULT_PAGE
    retention: Retention | None = None
    live_block_ms: int = 5_000
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidInputError(f"port is 0 to 65535, not {self.port}")
        if not 1 <= self.page <= 1000:
            raise InvalidInputError(f"page is 1 to 1000 rows, not {self.page}")
        if self.token is not None and (len(self.token) < MIN_TOKEN_CHARS or not self.token.isprintable()
                                       or not self.token.isascii() or " " in self.token):
            raise InvalidInputError(f"the UI token must be at least {MIN_TOKEN_CHARS} printable ASCII characters "
                                    "without spaces")
        if not self.local and self.token is None:
            raise InvalidInputError(f"binding {self.host!r} (not a loopback address) needs a token: --token or "
                                    "WM_SIGNALS_UI_TOKEN (at least 16 characters)")

    @property
    def local(self) -> bool:
        """Whether the UI binds a loopback address only."""
        return is_loopback(self.host)

    def token_ok(self, given: str | None) -> bool:
        """Whether ``given`` is the token (compared in constant time)."""
        return self.token is not None and given is not None and hmac.compare_digest(given.encode(), self.token.encode())

"""Optional signal authentication: an HMAC shared by workers and agent loops. Pure: no I/O.

Redis ACLs decide who may write a signal stream; a MAC makes the answer independent of
them. When a key is configured, the worker appends each signal as two stream fields,
``e`` (the JSON, :data:`signals.core.codec.FIELD`) and ``m`` (:data:`MAC_FIELD`), and every
reader given a :class:`Signer` refuses an entry whose MAC is missing or wrong: live
readers skip it, replay reports it. So a subscriber never puts in front of a model a
signal that no worker wrote, even where the ACL is misconfigured.

The MAC is ``hex(HMAC-SHA256(key, utf8(lane + "\\x00" + payload)))``, where ``payload`` is
the exact text of the ``e`` field. The lane is inside the MAC, so a genuine signal copied
into another lane's stream fails the check. A MAC proves that a key holder wrote the
entry; it does not prove that the entry is the latest (a genuine entry replayed into
its own lane's stream is caught by the chain's version checks, not by the MAC).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from signals.errors import InvalidInputError

__all__ = ("MAC_FIELD", "MIN_KEY_BYTES", "Signer")

#: The stream field holding an entry's MAC (beside :data:`signals.core.codec.FIELD`).
MAC_FIELD = "m"
#: The shortest key accepted: 128 bits.
MIN_KEY_BYTES = 16


def _utf8(text: str) -> bytes:
    # Lanes are validated ids and payloads are JSON we decoded, so both are valid UTF-8;
    # a lone surrogate (a hostile str handed in directly) must not raise, only fail.
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Signer:
    """Computes and checks signal MACs with one shared key.

    Args:
        key: the shared secret, at least :data:`MIN_KEY_BYTES` bytes (use 32 random
            bytes). It is kept out of ``repr``.

    Raises:
        InvalidInputError: the key is not bytes or is shorter than 16 bytes.
    """

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes | bytearray):
            raise InvalidInputError("a signing key is bytes")
        if len(self.key) < MIN_KEY_BYTES:
            raise InvalidInputError(f"a signing key needs at least {MIN_KEY_BYTES} bytes, got {len(self.key)}")
        object.__setattr__(self, "key", bytes(self.key))

    def mac(self, lane: str, payload: str) -> str:
        """The hex HMAC-SHA256 of ``lane + "\\x00" + payload`` (64 characters)."""
        return hmac.new(self.key, _utf8(lane) + b"\x00" + _utf8(payload), hashlib.sha256).hexdigest()

    def check(self, lane: str, payload: str, mac: str | None) -> bool:
        """Whether ``mac`` is this key's MAC of ``payload`` in ``lane`` (constant-time compare).

        ``None``, a non-string or a string of the wrong shape is simply not valid.
        """
        if not isinstance(mac, str) or not mac.isascii():
            return False
        return hmac.compare_digest(self.mac(lane, payload), mac)

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

**Rotation.** A :class:`Signer` signs with one key and accepts the MACs of that key and
of its ``verify_keys`` (the previous key while a rotation overlaps, or the next one
before workers sign with it). Each key has a public :attr:`Signer.key_id` (a keyed hash
of a constant: it names the key without revealing it); the worker records the id of the
key that signed a lane's last signal in the lane's tracking, and when its own signing key
differs, the lane's next signal is a snapshot, so every lane's chain moves to the new key
at its next write. The procedure is in ``docs/operations/signing-keys.md``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from signals.errors import InvalidInputError

__all__ = ("MAC_FIELD", "MAX_VERIFY_KEYS", "MIN_KEY_BYTES", "Signer", "key_id")

#: The stream field holding an entry's MAC (beside :data:`signals.core.codec.FIELD`).
MAC_FIELD = "m"
#: The shortest key accepted: 128 bits.
MIN_KEY_BYTES = 16
#: The most verification keys a signer takes besides its signing key (each one is tried
#: on every entry that the others refuse).
MAX_VERIFY_KEYS = 8


def _utf8(text: str) -> bytes:
    # Lanes are validated ids and payloads are JSON we decoded, so both are valid UTF-8;
    # a lone surrogate (a hostile str handed in directly) must not raise, only fail.
    return text.encode("utf-8", "surrogatepass")


def _checked(key: object, what: str) -> bytes:
    if not isinstance(key, bytes | bytearray):
        raise InvalidInputError(f"{what} is bytes")
    if len(key) < MIN_KEY_BYTES:
        raise InvalidInputError(f"{what} needs at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    return bytes(key)


def _mac(key: bytes, lane: str, payload: str) -> str:
    return hmac.new(key, _utf8(lane) + b"\x00" + _utf8(payload), hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """A key's public name: 16 hex digits of ``HMAC-SHA256(key, "wm-signals key id")``."""
    return hmac.new(key, b"wm-signals key id", hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Signer:
    """Computes signal MACs with one key and checks them against that key and others.

    Args:
        key: the signing key (the shared secret), at least :data:`MIN_KEY_BYTES` bytes
            (use 32 random bytes). Kept out of ``repr``, like every key here.
        verify_keys: further keys whose MACs :meth:`check` accepts, at most
            :data:`MAX_VERIFY_KEYS`: the previous signing key while a rotation overlaps,
            or the next one before the workers sign with it. Duplicates of the signing key
            or of each other are dropped.

    Raises:
        InvalidInputError: a key is not bytes or is shorter than 16 bytes, or there are too
            many verification keys.
    """

    key: bytes = field(repr=False)
    verify_keys: tuple[bytes, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        key = _checked(self.key, "a signing key")
        if isinstance(self.verify_keys, bytes | bytearray | str):
            raise InvalidInputError("verify_keys is a sequence of keys (bytes), not one key")
        others = [_checked(k, "a verification key") for k in self.verify_keys]
        if len(others) > MAX_VERIFY_KEYS:
            raise InvalidInputError(f"at most {MAX_VERIFY_KEYS} verification keys, got {len(others)}")
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "verify_keys", tuple(k for k in dict.fromkeys(others) if k != key))

    @property
    def key_id(self) -> str:
        """The signing key's public name (see :func:`key_id`)."""
        return key_id(self.key)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The names of every key :meth:`check` accepts, the signing key's first."""
        return (self.key_id, *(key_id(k) for k in self.verify_keys))

    def mac(self, lane: str, payload: str) -> str:
        """The hex HMAC-SHA256 of ``lane + "\\x00" + payload`` with the signing key (64 characters)."""
        return _mac(self.key, lane, payload)

    def check(self, lane: str, payload: str, mac: str | None) -> bool:
        """Whether ``mac`` is the MAC of ``payload`` in ``lane`` under the signing key or a
        verification key (constant-time compares).

        ``None``, a non-string or a string of the wrong shape is simply not valid.
        """
        if not isinstance(mac, str) or not mac.isascii():
            return False
        return any(hmac.compare_digest(_mac(k, lane, payload), mac) for k in (self.key, *self.verify_keys))

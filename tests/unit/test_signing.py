"""Signal MACs (signals.core.signing): what they cover, what they refuse. No Redis."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from signals.core.signing import MAC_FIELD, Signer
from signals.errors import InvalidInputError

KEY = b"k" * 32
PAYLOAD = '{"id":"working-memory","mode":"snapshot","version":1,"lane":"r:alice"}'


def test_mac_is_hmac_sha256_over_lane_nul_payload() -> None:
    """The MAC is the documented construction, so any language can compute it."""
    expected = hmac.new(KEY, b"r:alice\x00" + PAYLOAD.encode(), hashlib.sha256).hexdigest()
    assert Signer(KEY).mac("r:alice", PAYLOAD) == expected
    assert MAC_FIELD == "m"


def test_check_accepts_its_own_mac() -> None:
    """A MAC made with the key checks with the key."""
    signer = Signer(KEY)
    assert signer.check("r:alice", PAYLOAD, signer.mac("r:alice", PAYLOAD))


def test_mac_binds_the_lane() -> None:
    """A genuine entry copied into another lane's stream fails the check."""
    signer = Signer(KEY)
    assert not signer.check("r:bob", PAYLOAD, signer.mac("r:alice", PAYLOAD))


def test_mac_binds_the_payload() -> None:
    """One changed byte of the payload fails the check."""
    signer = Signer(KEY)
    mac = signer.mac("r:alice", PAYLOAD)
    assert not signer.check("r:alice", PAYLOAD.replace("1", "2"), mac)


def test_lane_and_payload_boundary_is_unambiguous() -> None:
    """Moving characters between lane and payload changes the MAC (the NUL separates them)."""
    signer = Signer(KEY)
    assert signer.mac("r:a", "b" + PAYLOAD) != signer.mac("r:ab", PAYLOAD)


def test_other_key_fails() -> None:
    """A MAC made with another key does not check."""
    assert not Signer(KEY).check("r:alice", PAYLOAD, Signer(b"x" * 32).mac("r:alice", PAYLOAD))


@pytest.mark.parametrize("mac", [None, "", "0" * 64, "zz", "é" * 64, 12345])
def test_missing_or_malformed_mac_is_refused(mac: object) -> None:
    """No MAC, an empty one, a wrong one or a non-ASCII one is refused without raising."""
    assert not Signer(KEY).check("r:alice", PAYLOAD, mac)  # type: ignore[arg-type]


def test_uppercase_hex_is_not_the_mac() -> None:
    """The MAC is lowercase hex, compared exactly."""
    signer = Signer(KEY)
    assert not signer.check("r:alice", PAYLOAD, signer.mac("r:alice", PAYLOAD).upper())


def test_lone_surrogate_does_not_raise() -> None:
    """A hostile str with a lone surrogate gets a MAC (and fails any other) instead of raising."""
    signer = Signer(KEY)
    bad = "r:\ud800"
    assert signer.check(bad, PAYLOAD, signer.mac(bad, PAYLOAD))
    assert not signer.check(bad, PAYLOAD, signer.mac("r:\ufffd", PAYLOAD))


@pytest.mark.parametrize("key", [b"", b"short", b"x" * 15])
def test_short_keys_are_refused(key: bytes) -> None:
    """Keys under 16 bytes are refused with InvalidInputError."""
    with pytest.raises(InvalidInputError, match="at least 16 bytes"):
        Signer(key)


def test_key_must_be_bytes() -> None:
    """A str key is a mistake (which encoding?): refused."""
    with pytest.raises(InvalidInputError, match="bytes"):
        Signer("k" * 32)  # type: ignore[arg-type]


def test_key_stays_out_of_repr() -> None:
    """Printing a Signer (logs, tracebacks) does not show the key."""
    assert "kkkk" not in repr(Signer(KEY))


def test_signer_is_frozen() -> None:
    """A Signer cannot be re-keyed after construction."""
    signer = Signer(KEY)
    with pytest.raises(AttributeError):
        signer.key = b"y" * 32  # type: ignore[misc]

"""Signal MACs (signals.core.signing): what they cover, what they refuse. No Redis."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from signals.core.signing import MAC_FIELD, MAX_VERIFY_KEYS, Signer, key_id
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


def test_a_signer_accepts_its_verification_keys_and_signs_with_its_own() -> None:
    """Rotation: MACs of the signing key and of each verification key check; the signer's
    own MACs are the signing key's; a key in neither is refused."""
    old, new, other = b"o" * 32, b"n" * 32, b"x" * 32
    signer = Signer(new, verify_keys=(old,))
    assert signer.mac("r:alice", PAYLOAD) == Signer(new).mac("r:alice", PAYLOAD)
    assert signer.check("r:alice", PAYLOAD, Signer(old).mac("r:alice", PAYLOAD))
    assert signer.check("r:alice", PAYLOAD, Signer(new).mac("r:alice", PAYLOAD))
    assert not signer.check("r:alice", PAYLOAD, Signer(other).mac("r:alice", PAYLOAD))
    assert not Signer(old).check("r:alice", PAYLOAD, signer.mac("r:alice", PAYLOAD))


def test_key_ids_name_keys_without_revealing_them() -> None:
    """A key id is 16 hex digits, the same for the same key, different for another; the
    signing key's comes first; duplicates of keys are dropped; keys stay out of repr."""
    old, new = b"o" * 32, b"n" * 32
    signer = Signer(new, verify_keys=(old, old, new))
    assert signer.verify_keys == (old,)
    assert signer.key_ids == (key_id(new), key_id(old))
    assert len(signer.key_id) == 16 and signer.key_id == Signer(new).key_id != key_id(old)
    assert "n" * 16 not in repr(signer) and "o" * 16 not in repr(signer)


def test_verification_keys_are_checked_like_the_signing_key() -> None:
    """A short verification key, a single key given for the sequence, or too many keys are refused."""
    with pytest.raises(InvalidInputError, match="verification key needs at least 16 bytes"):
        Signer(KEY, verify_keys=(b"short",))
    with pytest.raises(InvalidInputError, match="a sequence of keys"):
        Signer(KEY, verify_keys=b"n" * 32)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="at most"):
        Signer(KEY, verify_keys=tuple(bytes([65 + i]) * 32 for i in range(MAX_VERIFY_KEYS + 1)))

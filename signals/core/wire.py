"""Wire facts every reader and writer of the Redis layout shares: lane ids and version bounds.

A lane is named by its scope's prefix and an id: ``r:<resourceId>`` or ``t:<threadId>``
(the id rules are :func:`signals.streams.keys.validate_id`'s). A version is a
non-negative integer up to :data:`MAX_VERSION`, exact in every JSON reader (JavaScript's
too); signals and documents number theirs from 1, 0 meaning "none yet".

This module is the one owner of these facts: key names, event and signal checks, the
worker and the CLI import them from here. What it does not do: no I/O, no id validation
(that is the key layout's), no field names of a hash (the tracking hash's are
:mod:`signals.core.lane`'s).
"""

from __future__ import annotations

from typing import Final

from signals.core.models import Scope
from signals.errors import CorruptDataError

__all__ = (
    "LANE_PREFIX",
    "LANE_PREFIX_LENGTH",
    "MAX_VERSION",
    "lane_owner_id",
    "lane_scope",
    "make_lane",
    "parse_version",
)

#: Versions are non-negative integers up to 2**53: exact in every JSON reader (JavaScript's too).
MAX_VERSION: Final = 2**53
#: Each scope's lane prefix.
LANE_PREFIX: Final[dict[Scope, str]] = {"resource": "r:", "thread": "t:"}
#: Every lane prefix is this long: a lane's id starts there.
LANE_PREFIX_LENGTH: Final = 2
_SCOPE_OF: Final[dict[str, Scope]] = {prefix: scope for scope, prefix in LANE_PREFIX.items()}
_MAX_DIGITS: Final = 16  # 2**53 has 16 digits: a longer digit string is out of range without converting it


def make_lane(scope: Scope, owner_id: str) -> str:
    """The lane of ``scope`` for the id ``owner_id`` (checked by the caller), e.g. ``t:<threadId>``."""
    return LANE_PREFIX[scope] + owner_id


def lane_scope(lane: str) -> Scope | None:
    """The scope a lane's prefix names; ``None`` when it has no lane prefix (not a lane)."""
    return _SCOPE_OF.get(lane[:LANE_PREFIX_LENGTH])


def lane_owner_id(lane: str) -> str:
    """The id after a lane's prefix: the resource id of ``r:`` lane, the thread id of a ``t:`` lane."""
    return lane[LANE_PREFIX_LENGTH:]


def parse_version(raw: object, what: str) -> int:
    """A version read from Redis, an event or a file: a non-negative integer within 2**53,
    given as an int, a string of ASCII digits or those bytes. ``what`` names its place (a
    key and a field) in the error.

    Raises:
        CorruptDataError: anything else (a float string, ``abc``, a negative number, a
            number past 2**53, bytes that are not UTF-8).
    """
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise CorruptDataError(f"{what} is {str(raw)[:40]!r}, not an integer")
    if isinstance(raw, str):
        if not raw.isascii() or not raw.isdigit() or len(raw) > _MAX_DIGITS:
            raise CorruptDataError(f"{what} is {raw[:40]!r}, not an integer within 0..2**53")
        raw = int(raw)
    if not 0 <= raw <= MAX_VERSION:
        raise CorruptDataError(f"{what} is {raw}, outside 0..2**53")
    return raw

"""Lag: how far the workers are behind the writers, per lane (read-only).

Versions read back are checked: a document or tracking hash whose version is not an
integer within 0..2**53 (or a key of another type) raises
:class:`~signals.errors.CorruptDataError` naming the key and the field, instead of a raw
``ValueError``. The namespace-wide readers (:func:`lagging_lanes` here, ``inspect`` in
:mod:`signals.streams.status`) read lanes with :func:`lane_progress` instead, which returns
such a fault in the lane's place: one lane whose keys a writer filled with junk must not
stop the view of every other lane. The names in a partition's lane set are a writer's too
(the write script adds them, and so can a writer's own ``SADD``): :func:`lane_name_problem`
says when one cannot be a lane of that partition.
"""

from __future__ import annotations

import anyio

from signals.core.lane import WRITE_VERSION_FIELD
from signals.core.wire import LANE_PREFIX_LENGTH, lane_owner_id, lane_scope, parse_version
from signals.errors import CorruptDataError, InvalidInputError
from signals.streams.client import Client, smembers
from signals.streams.keys import MAX_ID_LENGTH, Keys, validate_id
from signals.streams.redis_errors import is_wrong_type

__all__ = ("lagging_lanes", "lane_name_problem", "lane_progress", "lane_versions", "wait_caught_up")


async def lane_versions(redis: Client, keys: Keys, lanes: list[str]) -> list[tuple[int, int]]:
    """Per lane: (document version, write version the workers have processed).

    Raises:
        CorruptDataError: a version field is not an integer within 0..2**53 (names it).
    """
    out = []
    for item in await lane_progress(redis, keys, lanes):
        if isinstance(item, CorruptDataError):
            raise item
        out.append(item)
    return out


async def lane_progress(redis: Client, keys: Keys, lanes: list[str]) -> list[tuple[int, int] | CorruptDataError]:
    """As :func:`lane_versions`, but a lane whose versions do not read (junk, a key of another
    type) gets its :class:`CorruptDataError` in its place instead of raising: the others
    are still read. Whole-server conditions (out of memory, loading...) are raised."""
    if not lanes:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.execute_command("HGET", keys.doc(lane), "version", NEVER_DECODE=True)
            pipe.execute_command("HGET", keys.track(lane), WRITE_VERSION_FIELD, NEVER_DECODE=True)
        replies = await pipe.execute(raise_on_error=False)
    out: list[tuple[int, int] | CorruptDataError] = []
    for i, lane in enumerate(lanes):
        try:
            out.append((_version(replies[2 * i], keys.doc(lane), "version"),
                        _version(replies[2 * i + 1], keys.track(lane), WRITE_VERSION_FIELD)))
        except CorruptDataError as e:
            out.append(e)
    return out


def lane_name_problem(keys: Keys, lane: str, partition: int) -> str | None:
    """Why ``lane``, a member of ``partition``'s lane set, cannot be one of its lanes (``None``
    when it can): not ``r:<id>`` or ``t:<id>`` with an id :func:`validate_id` takes (at most
    512 characters, no control character, brace or byte that is not UTF-8), or a lane of
    another partition (its keys are not where this set's lanes are, and listing it here
    would count it twice)."""
    if len(lane) > MAX_ID_LENGTH + LANE_PREFIX_LENGTH or lane_scope(lane) is None:
        return f"not a lane name (r:<id> or t:<id>, an id of at most {MAX_ID_LENGTH} characters)"
    try:
        validate_id(lane_owner_id(lane), "id")
    except InvalidInputError:
        return "not a lane name (its id is empty, or holds a control character, a brace or bytes that are not UTF-8)"
    home = keys.partition(lane)
    if home != partition:
        return f"a lane of partition {home}, not of this one (someone added it to this partition's lane set)"
    return None


def _version(raw: object, key: str, field: str) -> int:
    if raw is None:
        return 0
    if is_wrong_type(raw):
        raise CorruptDataError(f"{key} is not a hash") from raw
    if isinstance(raw, Exception):
        raise raw  # whole-server conditions (OOM, loading...) are not this lane's data
    return parse_version(raw, f"{key} field {field}")


async def lagging_lanes(redis: Client, keys: Keys) -> dict[str, tuple[int, int]]:
    """Lanes whose processed write version is behind the document: ``lane -> (doc, processed)``.

    A member of a lane set that is not a lane of its partition, and a lane whose versions
    do not read (:func:`lane_progress`), are left out: the workers dead-letter such a lane's
    events rather than process them, so it is not behind, and it must not stop the answer
    for every other lane (``wm-signals inspect`` names them)."""
    behind: dict[str, tuple[int, int]] = {}
    for partition in range(keys.partitions):
        lanes = [lane for lane in await smembers(redis, keys.lanes(partition))
                 if lane_name_problem(keys, lane, partition) is None]
        for lane, read in zip(lanes, await lane_progress(redis, keys, lanes), strict=True):
            if not isinstance(read, CorruptDataError) and read[1] < read[0]:
                behind[lane] = read
    return behind


async def wait_caught_up(redis: Client, keys: Keys, limit_s: float = 60.0, poll_s: float = 0.02) -> None:
    """Wait until no lane lags (every write processed); ``TimeoutError`` after ``limit_s``.

    Polling is the honest way to wait for other processes' progress here: workers do not
    publish a "caught up" event, and the check is two small reads per lane.
    """
    with anyio.fail_after(limit_s):
        while await lagging_lanes(redis, keys):  # noqa: ASYNC110 - progress of other processes
            await anyio.sleep(poll_s)

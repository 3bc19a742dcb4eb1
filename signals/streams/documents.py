"""A lane's stored document: the hash the write script keeps, read and checked.

Nothing read from Redis is trusted: a document hash whose version is not a version,
whose format is not one of the two, or whose text is not UTF-8 is
:class:`~signals.errors.CorruptDataError`, naming the key and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from redis import exceptions as redis_exc

from signals.core.codec import invalid_utf8_at
from signals.core.models import Format
from signals.core.wire import parse_version
from signals.errors import CorruptDataError, RedisUnavailableError
from signals.streams.client import Client
from signals.streams.keys import Keys

__all__ = ("Document", "read_document")


@dataclass(frozen=True, slots=True)
class Document:
    """A stored working-memory document at a version."""

    lane: str
    data: str
    version: int
    format: Format


async def read_document(redis: Client, keys: Keys, lane: str) -> Document | None:
    """The lane's stored document, ``None`` when it has none.

    Raises:
        CorruptDataError: the hash is of another type, or a field does not read.
        RedisUnavailableError: Redis could not be reached.
        redis.exceptions.NoPermissionError: the caller's ACL refuses the read.
    """
    where = keys.doc(lane)
    try:
        reply = await redis.hmget(where, ["data", "version", "format"])
        data, version, fmt = cast(list[str | None], reply)
    except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
        raise RedisUnavailableError(f"reading {lane}: {e}") from e
    except redis_exc.NoPermissionError:  # the deployment's ACL, not the lane's data: raised as it is
        raise
    except redis_exc.ResponseError as e:  # WRONGTYPE: the key is not a document hash
        raise CorruptDataError(f"{where}: {e}") from e
    if version is None:
        return None
    number = parse_version(version, f"{where} field version")
    if fmt not in (None, "markdown", "json"):
        raise CorruptDataError(f"{where} field format is {fmt[:40]!r}, not markdown or json")
    if data is not None and (at := invalid_utf8_at(data)) is not None:
        raise CorruptDataError(f"{where} field data is not valid UTF-8 (an invalid byte at character {at})")
    return Document(lane, data or "", number, cast(Format, fmt or "markdown"))

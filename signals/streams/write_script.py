"""The write script's calls (``lua/write.lua``): which keys and arguments a write takes,
and what its replies and Redis's errors mean.

One call is the whole write: a compare-and-set on the lane's version that stores the
document and appends its write event to the partition's write stream, atomically on the
lane's slot (see the script's header). :class:`WriteScript` builds a call's keys and
arguments (the write event included), runs it, and translates its refusals and Redis's
errors into this library's; the store (:mod:`signals.streams.store`) decides what to
write and when to retry. Bulk loaders and benchmarks queue the same calls in pipelines
(:meth:`WriteScript.keys_for`, :meth:`WriteScript.args`, :attr:`WriteScript.script`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from redis import exceptions as redis_exc

from signals.core._time import now_iso
from signals.core.codec import encode_json
from signals.core.memory import MAX_EVENT_CHARS, WorkingMemoryConfig
from signals.core.models import Scope, WriteEvent
from signals.core.wire import MAX_VERSION, parse_version
from signals.errors import (
    ConflictError,
    CorruptDataError,
    DocumentTooLargeError,
    InvalidInputError,
    RedisBusyError,
    RedisUnavailableError,
    ThreadOwnerError,
    WmSignalsError,
)
from signals.streams.client import Client
from signals.streams.durability import Durability, write_and_wait
from signals.streams.keys import Keys
from signals.streams.redis_errors import SERVER_CONDITIONS, acl_refused, ids_exhausted, relayed_error, reply_code
from signals.streams.scripts import ServerScript

__all__ = ("LaneRef", "WriteScript")

Operation = Literal["replace", "merge", "create"]


@dataclass(frozen=True, slots=True)
class LaneRef:
    """Which document a call is about."""

    lane: str
    scope: Scope
    resource_id: str | None
    thread_id: str | None


class WriteScript:
    """The write script of one namespace and working-memory shape.

    Args:
        redis: a redis.asyncio client.
        keys: the namespace's keys.
        config: the working-memory shape (its format is the events' and the check's).
        idempotency_ttl_s: how long an idempotency key is remembered.
        durability: run each call with ``WAIT`` for this many replicas (``None``: the
            master's word; see :mod:`signals.streams.durability`).
    """

    def __init__(self, redis: Client, keys: Keys, config: WorkingMemoryConfig, *, idempotency_ttl_s: int,
                 durability: Durability | None) -> None:
        self.redis = redis
        self.keys = keys
        self.config = config
        self.idempotency_ttl_s = idempotency_ttl_s
        self.durability = durability
        self.script = ServerScript(redis, "write")

    def keys_for(self, ref: LaneRef, owner: str, idempotency_key: str | None) -> list[str]:
        """The call's KEYS: all in the lane's slot (unused slots repeat the doc key)."""
        keys = self.keys
        doc_key = keys.doc(ref.lane)
        partition = keys.partition(ref.lane)
        return [
            doc_key,
            keys.writes(partition),
            keys.idempotency(ref.lane, idempotency_key) if idempotency_key else doc_key,
            keys.thread(ref.thread_id) if owner and ref.thread_id else doc_key,
            keys.lanes(partition),
        ]

    def args(self, ref: LaneRef, version: int, data: str, *, op: Operation, owner: str,
             idempotency_key: str | None, fingerprint: str = "") -> list[str | int]:
        """The call's ARGV for writing ``data`` over ``version``, with the write event it
        appends (``owner``: the resource the script checks a thread lane against, ``""``
        for none; ``fingerprint``: the request's, stored with the idempotency key).

        Raises:
            DocumentTooLargeError: the event would be over
                :data:`~signals.core.memory.MAX_EVENT_CHARS`, which workers refuse (a
                writer's ``max_bytes`` is its own setting and may be larger).
            InvalidInputError: the lane is at version 2**53 already.
        """
        if version >= MAX_VERSION:  # only a version set by hand gets here; past it no reader reads the lane
            raise InvalidInputError(f"{ref.lane} is at document version {version:,}, the largest a lane takes (2**53): "
                                    "nothing was written")
        now = now_iso()
        event = WriteEvent(lane=ref.lane, scope=ref.scope, format=self.config.format, version=version + 1,
                           data=data, op=op, resource_id=ref.resource_id, thread_id=ref.thread_id,
                           written_at=now, idempotency_key=idempotency_key)
        encoded = encode_json(event)
        if len(encoded) > MAX_EVENT_CHARS:  # whatever the writer's max_bytes: no worker would take it
            raise DocumentTooLargeError(
                f"{ref.lane}: the write event would be {len(encoded):,} characters (the document with its JSON "
                f"escapes), over the {MAX_EVENT_CHARS:,} a worker takes: no signal could carry it; nothing was "
                "written")
        return [version, version + 1, data, self.config.format, encoded, owner,
                self.idempotency_ttl_s, ref.lane, now, ref.scope, fingerprint]

    async def run(self, ref: LaneRef, script_keys: list[str], args: list[str | int]) -> tuple[str, str, object]:
        """Run one call (then ``WAIT``, with a durability setting); Redis errors become this
        library's. Returns the script's status and detail, and the ``WAIT`` reply (``None``
        without durability)."""
        acked: object = None
        try:
            if self.durability is None:
                status, detail = await self.script(keys=script_keys, args=args)
            else:
                reply, acked = await write_and_wait(self.redis, self.script, script_keys, args, self.durability)
                if isinstance(reply, Exception):
                    raise reply
                status, detail = reply  # type: ignore[misc]
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"writing {ref.lane}: {e}") from e
        except redis_exc.OutOfMemoryError as e:
            raise RedisBusyError(f"writing {ref.lane}: Redis is out of memory: {e}") from e
        except RedisBusyError:  # READONLY from a replica (this library's class already)
            raise
        except (redis_exc.ReadOnlyError, redis_exc.ClusterDownError, redis_exc.TryAgainError) as e:
            # a failover under way: a demoted master, a cluster failing a node over
            raise RedisBusyError(f"writing {ref.lane}: Redis refused the write for now: {e}") from e
        except redis_exc.ResponseError as e:
            raise _refused_call(ref.lane, script_keys[1], e) from e
        return str(status), str(detail), acked

    def refusal(self, ref: LaneRef, status: str, detail: str, if_version: int | None) -> WmSignalsError | None:
        """The error for a call the script refused (``None`` for a conflict to retry)."""
        if status == "corrupt":
            return CorruptDataError(f"{self.keys.doc(ref.lane)} field version is {detail[:40]!r}, not an integer")
        if status == "type":  # refused before anything was written
            return CorruptDataError(f"{detail} is a key of another type: nothing was written (an operator must "
                                    "delete or repair it)")
        if status == "owner":
            return ThreadOwnerError(f"thread {ref.thread_id!r} belongs to resource {detail!r}, not {ref.resource_id!r}")
        if status == "format":
            return InvalidInputError(f"{ref.lane} holds {detail} working memory, not {self.config.format}")
        if if_version is not None:
            actual = parse_version(detail, f"{self.keys.doc(ref.lane)} field version")
            return ConflictError(f"{ref.lane} is at document version {actual}, expected {if_version}",
                                 expected=if_version, actual=actual)
        return None


def _refused_call(lane: str, writes: str, e: redis_exc.ResponseError) -> Exception:
    """This library's error for a call Redis answered with ``e``."""
    text = str(e)
    if acl_refused(e):
        # the deployment's ACL, not the lane's data: as any other command's NOPERM (exit 1)
        return redis_exc.NoPermissionError(f"writing {lane}: the Redis user may not: {text}")
    relayed, code = relayed_error(e), reply_code(e)  # Redis 6.2 relays a command's OOM from a script as a plain error
    if code == "OOM":
        return RedisBusyError(f"writing {lane}: Redis is out of memory: {relayed}")
    if code in SERVER_CONDITIONS:  # min-replicas-to-write, a replica cut off, a failover
        return RedisBusyError(f"writing {lane}: Redis refused the write for now: {relayed}")
    if ids_exhausted(e):  # see workers.engine.maintenance: restarted by a worker
        return RedisBusyError(
            f"writing {lane}: the write stream {writes} has run out of stream ids (an entry with the largest id "
            "was added by hand); a running worker restarts it within its maintenance interval: retry then")
    return CorruptDataError(f"writing {lane}: {e}")  # WRONGTYPE and the like: a key of the lane is not ours

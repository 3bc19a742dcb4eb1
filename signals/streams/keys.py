"""Every Redis key, stream and group name, and the lane -> partition rule.

A lane is one working-memory document: ``r:<resourceId>`` (resource scope) or
``t:<threadId>`` (thread scope). Lane -> partition is ``crc32(lane) % partitions``,
stable across processes and languages; the partition count is fixed per deployment.
Every key of a lane carries its partition's hash tag ``{<namespace>:p<N>}``, shared with
that partition's write stream, so each write and each worker commit is one script on one
slot: the same code runs on a single Redis and on Redis Cluster. A thread's owner record
and delivery log live in the thread lane's partition.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from signals.core.models import Scope
from signals.core.wire import make_lane
from signals.errors import InvalidInputError

__all__ = ("GROUP", "Keys", "lane_id", "validate_id")

#: The consumer group every worker joins on every partition write stream.
GROUP = "wm-workers"
_BAD_ID = re.compile("[\x00-\x1f\x7f{}\ud800-\udfff]")
MAX_ID_LENGTH = 512
_LANE_KINDS = ("doc", "trk", "sig", "snaps", "idem", "thread", "dlv")
_PARTITION_KINDS = ("writes", "dlq", "fails", "lanes")


def validate_id(value: object, what: str) -> str:
    """Check a resource or thread id: a non-empty string without control characters or braces."""
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} must be a non-empty string")
    if len(value) > MAX_ID_LENGTH or _BAD_ID.search(value):
        raise InvalidInputError(
            f"{what} {value[:40]!r} is invalid: at most {MAX_ID_LENGTH} characters, "
            "no control characters, braces or lone surrogates (invalid UTF-8)"
        )
    return value


def lane_id(scope: Scope, resource_id: str | None, thread_id: str | None) -> str:
    """The lane of a document: ``r:<resourceId>`` or ``t:<threadId>``."""
    if scope == "resource":
        return make_lane("resource", validate_id(resource_id, "resource id"))
    if scope == "thread":
        return make_lane("thread", validate_id(thread_id, "thread id (thread scope needs one)"))
    raise InvalidInputError(f"unknown scope {scope!r}: use 'resource' or 'thread'")


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names under one namespace with a fixed partition count."""

    namespace: str = "wm"
    partitions: int = 16

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", self.namespace):
            raise InvalidInputError(f"namespace {self.namespace!r} must match [A-Za-z0-9_.:-]{{1,64}}")
        if not 1 <= self.partitions <= 4096:
            raise InvalidInputError("partitions must be between 1 and 4096")

    def partition(self, lane: str) -> int:
        """The partition of a lane."""
        return zlib.crc32(lane.encode("utf-8", "surrogatepass")) % self.partitions

    def tag(self, partition: int) -> str:
        """The key prefix (with hash tag) of a partition."""
        return f"{self.namespace}:{{p{partition}}}"

    def _lane_key(self, kind: str, lane: str, tag: str | None = None) -> str:
        return f"{tag or self.tag(self.partition(lane))}:{kind}:{lane}"

    def doc(self, lane: str) -> str:
        """Hash: ``data``, ``version``, ``format``, ``scope``, ``updatedAt``, ``eid``, ``chain0``, ``chain``
        (see write.lua)."""
        return self._lane_key("doc", lane)

    def track(self, lane: str) -> str:
        """Hash: the worker's tracking of the lane's signals: last signal version, cacheKey and
        mode, last processed write version, signals since the snapshot, the stream's tail id
        and the last write event id (fields named in ``signals.core.lane.TRACKING_FIELDS``). It
        holds no text: the next delta's base comes from the worker's cache or the stream."""
        return self._lane_key("trk", lane)

    def signals(self, lane: str) -> str:
        """Stream: the lane's signals, starting with a snapshot."""
        return self._lane_key("sig", lane)

    def snapshots(self, lane: str) -> str:
        """List: stream ids of the retained snapshots, oldest first."""
        return self._lane_key("snaps", lane)

    def worker_keys(self, lane: str) -> tuple[str, str, str]:
        """:meth:`track`, :meth:`signals` and :meth:`snapshots` of a lane together (the
        commit script's keys of each lane; its partition computed once)."""
        tag = self.tag(self.partition(lane))
        return self._lane_key("trk", lane, tag), self._lane_key("sig", lane, tag), self._lane_key("snaps", lane, tag)

    def idempotency(self, lane: str, key: str) -> str:
        """String: the version a write with this idempotency key produced.

        Both parts may contain ``:``, so the lane is length-prefixed: no two (lane, key)
        pairs share a Redis key (``r:x11`` + ``b:k`` and ``r:x11:b`` + ``k`` differ).
        """
        return f"{self.tag(self.partition(lane))}:idem:{len(lane)}:{lane}:{key}"

    def thread(self, thread_id: str) -> str:
        """Hash: a thread's owner ``resource`` and ``createdAt`` (never changes)."""
        return self._lane_key("thread", make_lane("thread", thread_id))

    def deliveries(self, thread_id: str) -> str:
        """Stream: what the agent loop of a thread put into its model's window."""
        return self._lane_key("dlv", make_lane("thread", thread_id))

    def writes(self, partition: int) -> str:
        """Stream: the partition's write events (consumer group :data:`GROUP`)."""
        return f"{self.tag(partition)}:writes"

    def dead_letters(self, partition: int) -> str:
        """Stream: events the workers gave up on, with the reason."""
        return f"{self.tag(partition)}:dlq"

    def failures(self, partition: int) -> str:
        """Hash: entry id -> failed attempts, for events still being retried."""
        return f"{self.tag(partition)}:fails"

    def lanes(self, partition: int) -> str:
        """Set: the lanes of the partition."""
        return f"{self.tag(partition)}:lanes"

    def config(self) -> str:
        """Hash: the settings every process of the namespace must agree on (``partitions``).

        Outside every partition's hash tag: one small key per namespace.
        """
        return f"{self.namespace}:config"

    def heartbeat(self, instance: str) -> str:
        """String with a TTL: a live worker's heartbeat (host, pid, time), refreshed by its
        monitor task each ``health_interval_s`` and read by ``wm-signals worker --check``.

        ``instance`` is the worker's consumer name when configured, else its host name.
        Outside every partition's hash tag: one small key per worker instance. The ``{hb}``
        segment keeps the key and its ACL glob inside this namespace: a namespace may hold
        ``:`` but never a brace, so ``wm:{hb}:*`` matches no key of the namespace
        ``wm:hb`` (under ``wm:hb:*``, the workers of ``wm`` could write every key of it).
        """
        return f"{self.namespace}:{{hb}}:{instance}"

    def pattern(self, kind: str) -> str:
        """The ACL glob matching every key of one ``kind`` in the namespace.

        Kinds: the per-lane ``doc``, ``trk``, ``sig``, ``snaps``, ``idem``, ``thread``,
        ``dlv``, and the per-partition ``writes``, ``dlq``, ``fails``, ``lanes``, ``docs``; ``config``
        is the one namespace key, ``hb`` the workers' heartbeats. Ids never contain braces (see :func:`validate_id`), so
        the single ``}`` of a key closes its partition tag and ``{p*}`` cannot run into
        the rest of the key: ``wm:{p*}:sig:*`` matches signal streams and nothing else.
        """
        if kind == "config":
            return self.config()
        if kind == "hb":
            return self.heartbeat("*")
        if kind in _LANE_KINDS:
            return f"{self.namespace}:{{p*}}:{kind}:*"
        if kind in _PARTITION_KINDS:
            return f"{self.namespace}:{{p*}}:{kind}"
        raise InvalidInputError(f"unknown key kind {kind!r}")

    def all_writes(self) -> list[str]:
        """Every partition's write stream, in partition order."""
        return [self.writes(p) for p in range(self.partitions)]

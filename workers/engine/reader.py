"""Reading a namespace's write streams as the worker group: creating the group on every
partition, new entries (XREADGROUP, blocking up to ``block_ms``), this consumer's own
pending entries after a restart, and which partition streams can be read at all.

It does not decode, check or process what it reads: :mod:`workers.engine.consumer` does, and
reclaims dead consumers' entries through it. A read returns raw entries
``(stream, entry id, fields)``; fields are ``None`` for an entry deleted while pending.
"""

from __future__ import annotations

from typing import cast

import structlog
from redis import exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster

from signals.errors import GroupMissingError
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import ReplyTooLargeError, is_wrong_type, reply_code
from signals.streams.scripts import ServerScript

__all__ = ("GroupReader", "RawEntry")

log = structlog.get_logger(__name__)

RawEntry = tuple[str, str, dict[str, str] | None]


class GroupReader:
    """One consumer's reads of a namespace's partition write streams."""

    def __init__(self, redis: Client, keys: Keys, name: str, *, batch: int, block_ms: int,
                 shard: tuple[int, int] = (0, 1)) -> None:
        """``batch``: entries per stream per read; ``shard``: ``(index, count)``, read the
        partitions ``p`` with ``p % count == index``."""
        self.redis = redis
        self.keys = keys
        self.name = name
        self.batch, self.block_ms, self.shard = batch, block_ms, shard
        #: Entries per stream per read now: ``batch``, but a quarter after each read whose
        #: reply was over the client's ``max_reply_bytes`` (down to 1), doubling back after
        #: each read that was not (see :meth:`read_batch`).
        self.read_count = batch
        self._leave = ServerScript(redis, "leave")

    async def ensure_groups(self) -> None:
        """Create the consumer group on every partition stream (from the start; idempotent).

        Existing groups are looked up first, so that a worker can start on a Redis that is
        out of memory (which refuses XGROUP CREATE even when the group exists) and back off
        in its read loop like any other worker.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in self.keys.all_writes():
                pipe.xinfo_groups(stream)
            replies = await pipe.execute(raise_on_error=False)
        for stream, groups in zip(self.keys.all_writes(), replies, strict=True):
            if isinstance(groups, list) and any(g.get("name") == GROUP for g in groups):
                continue
            try:
                await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis_exc.ResponseError as e:
                if is_wrong_type(e):  # left out of the reads (see readable)
                    log.error("worker.partition_unreadable", stream=stream, error=str(e))  # noqa: TRY400
                elif reply_code(e) != "BUSYGROUP":
                    raise

    def stream_groups(self) -> list[list[str]]:
        """The partition streams one XREADGROUP may read together: all of them on one
        server, one each on a Redis Cluster (a command's keys must share a slot there)."""
        index, count = self.shard
        streams = [s for p, s in enumerate(self.keys.all_writes()) if p % count == index]
        if isinstance(self.redis, RedisCluster):
            return [[stream] for stream in streams]
        return [streams]

    async def read_batch(
        self, streams: list[str] | None = None, cursors: dict[str, str] | None = None, *, one: bool = False
    ) -> list[RawEntry]:
        """Read new entries from ``streams`` (default: every partition), or, with ``cursors``,
        this consumer's own pending entries after each stream's cursor (no blocking); with
        ``one``, a single entry per stream (``read_count`` is then left as it is).

        Raises:
            ReplyTooLargeError: the reply was over the client's ``max_reply_bytes``. What
                was read is pending for this consumer (``drain_pending`` reads it again,
                in smaller reads: :attr:`read_count` is cut to a quarter).
        """
        wanted = cursors or dict.fromkeys(streams or self.keys.all_writes(), ">")
        try:
            reply = await self.redis.xreadgroup(
                GROUP, self.name, wanted,  # type: ignore[arg-type]
                count=1 if one else self.read_count,
                block=None if cursors else self.block_ms,
            )
        except ReplyTooLargeError:
            if not one:
                self.read_count = max(1, self.read_count // 4)
            raise
        except redis_exc.ResponseError as e:
            if reply_code(e) == "NOGROUP":
                raise GroupMissingError(f"consumer group {GROUP} vanished: {e}") from e
            raise
        if not one:
            self.read_count = min(self.batch, 2 * self.read_count)
        return self._flatten(reply)

    async def next_pending(self, stream: str, after: str) -> str | None:
        """The id of this consumer's first pending entry of ``stream`` after ``after``
        (``"0"``: from the start), without reading the entry; ``None`` when there is none."""
        start = "-" if after in ("0", "0-0") else "(" + after
        reply = await self.redis.xpending_range(stream, GROUP, min=start, max="+", count=1,
                                                consumername=self.name)
        return str(reply[0]["message_id"]) if reply else None

    @staticmethod
    def _flatten(reply: object) -> list[RawEntry]:
        typed = cast(list[tuple[str, list[tuple[str, dict[str, str] | None]]]], reply or [])
        return [(stream, entry_id, fields) for stream, entries in typed for entry_id, fields in entries]

    async def leave_group(self) -> list[str]:
        """Remove this consumer from the group of every partition stream it reads where it
        holds no pending entry (a graceful stop), so that stopped consumers do not pile up in
        ``inspect`` and XINFO (every restart under a new name adds one). Where it still
        holds entries it stays, so that they stay claimable (XGROUP DELCONSUMER would drop
        them from the group's pending list). The check and the delete are one script per
        stream (``leave.lua``): as two round trips, a process restarted under the same
        consumer name that read entries in between lost them from the pending list with the
        delete. Returns the streams it left."""
        left: list[str] = []
        refused: list[Exception] = []
        for stream in (s for group in self.stream_groups() for s in group):
            try:
                if await self._leave(keys=[stream], args=[GROUP, self.name]) == 1:
                    left.append(stream)
            except redis_exc.ResponseError as e:
                if reply_code(e) == "NOGROUP" or is_wrong_type(e):  # no group, or not a stream: nothing to leave
                    continue
                refused.append(e)  # NOPERM above all: an ACL file that does not grant this command
        if refused:
            log.warning("worker.leave_group_refused", streams=len(refused), error=str(refused[0])[:200],
                        note="the consumer stays listed; regenerate the ACL file (wm-signals deploy acl)")
        return left

    async def readable(self, streams: list[str]) -> list[str]:
        """The write streams of ``streams`` that are streams (or absent): a key of another
        type would fail every XREADGROUP that names it, for every partition read with it."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.type(stream)
            kinds = await pipe.execute()
        bad = [s for s, kind in zip(streams, kinds, strict=True) if kind not in ("stream", "none")]
        for stream in bad:
            log.error("worker.partition_unreadable", stream=stream, type=kinds[streams.index(stream)])
        return [s for s in streams if s not in bad]

"""Agent-loop side: subscribe to a lane's signals, from its current state, then tail.

:meth:`Subscription.bootstrap` reads the lane's chain from its last retained snapshot
(or, ``from_start``, its oldest) and rebuilds the current text; :meth:`Subscription.poll`
and ``async for`` read what follows with XREAD from the last entry seen, so a reconnect
resumes with no gap and no repeat. Every signal is materialised (deltas applied, the
cacheKey checked); a version gap (the subscriber fell behind the stream's retention)
re-bootstraps from the latest snapshot. Read-only: it never writes and never joins a
consumer group. Cancellation closes it cleanly (anyio).
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator

import anyio
import msgspec
import structlog
from redis import exceptions as redis_exc

from signals._util import Client, lindex, xread
from signals.cachekey import cache_key
from signals.codec import FIELD, decode_signal
from signals.errors import RedisUnavailableError, VerifyError
from signals.keys import Keys
from signals.models import Signal
from signals.processor import apply_delta
from signals.replay import Materialised, iter_signals, materialise

__all__ = ("Subscription",)

log = structlog.get_logger(__name__)
_TRANSIENT = (redis_exc.ConnectionError, redis_exc.TimeoutError)


class Subscription:
    """A read-only tail of one lane's signal stream.

    Args:
        redis: a redis.asyncio client.
        keys: the deployment's key layout.
        lane: the lane id (see :func:`signals.keys.lane_id`).
        block_ms: how long one blocking read waits in ``async for``.
        count: entries per read.
        reconnect_timeout_s: give up (``RedisUnavailableError``) after Redis has been
            unreachable this long; reconnects before that are silent and gapless.
    """

    def __init__(self, redis: Client, keys: Keys, lane: str, *, block_ms: int = 5000,
                 count: int = 500, reconnect_timeout_s: float = 60.0) -> None:
        self.redis = redis
        self.keys = keys
        self.lane = lane
        self.block_ms = block_ms
        self.count = count
        self.reconnect_timeout_s = reconnect_timeout_s
        self.last_id = "0-0"
        self.version = 0
        self.value: str | None = None

    async def bootstrap(self, *, from_start: bool = False) -> list[Materialised]:
        """Read the current chain (last snapshot onwards, or all retained) and rebuild it."""
        start = "-"
        if not from_start:
            last_snapshot = await lindex(self.redis, self.keys.snapshots(self.lane), -1)
            start = last_snapshot or "-"
        items = list(materialise([item async for item in iter_signals(self.redis, self.keys, self.lane,
                                                                      start=start)]))
        if items:
            self.last_id = items[-1].entry_id
            self.version = items[-1].signal.version
            self.value = items[-1].value
        return items

    async def poll(self, block_ms: int | None = None) -> list[Materialised]:
        """Signals after the last one seen (waiting up to ``block_ms`` when given)."""
        reply = await xread(self.redis, {self.keys.signals(self.lane): self.last_id}, count=self.count,
                            block=block_ms)
        out: list[Materialised] = []
        for _, entries in reply:
            for entry_id, fields in entries:
                try:
                    signal = decode_signal(fields[FIELD])
                except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as e:
                    raise VerifyError(f"entry {entry_id} of {self.lane}: not a signal: {e}") from e
                if signal.version <= self.version:
                    continue  # already seen (a re-bootstrap overlapped this read)
                if signal.mode == "delta" and (signal.version != self.version + 1 or self.value is None):
                    # fell behind the stream's retention: resume from the latest snapshot
                    log.info("subscribe.gap", lane=self.lane, have=self.version, got=signal.version)
                    have = self.version
                    return out + [m for m in await self.bootstrap() if m.signal.version > have]
                out.append(self._apply(entry_id, signal))
        return out

    def _apply(self, entry_id: str, signal: Signal) -> Materialised:
        if signal.mode == "snapshot":
            value = signal.contents
        else:
            assert self.value is not None
            value = apply_delta(self.value, signal.contents, signal.attributes.patch)
        if cache_key(signal.attributes.format, value) != signal.cache_key:
            raise VerifyError(f"entry {entry_id} of {self.lane}: cacheKey does not match the rebuilt text")
        self.last_id, self.version, self.value = entry_id, signal.version, value
        return Materialised(entry_id, signal, value)

    async def __aiter__(self) -> AsyncIterator[Materialised]:
        """Tail forever (until cancelled), reconnecting transparently."""
        failing_since: float | None = None
        attempt = 0
        while True:
            try:
                batch = await self.poll(self.block_ms)
            except _TRANSIENT as e:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.reconnect_timeout_s:
                    raise RedisUnavailableError(f"subscription to {self.lane}: {e}") from e
                delay = random.uniform(0, min(2.0, 0.05 * 2**attempt))
                attempt += 1
                log.warning("subscribe.reconnecting", lane=self.lane, error=repr(e), retry_in_s=delay)
                await anyio.sleep(delay)
                continue
            failing_since, attempt = None, 0
            for item in batch:
                yield item

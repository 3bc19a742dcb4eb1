"""A worker process's lifecycle: one task group, OS-signal watcher, reader, maintenance.

Startup: create the consumer groups, process this consumer's own pending entries (a
restart under the same name resumes exactly), then read new entries. Maintenance runs
every ``maintenance_interval_s``: reclaim entries idle past ``claim_idle_ms`` from dead
consumers (XAUTOCLAIM) and trim write streams below their oldest unacknowledged entry.

Redis going away or refusing work (unreachable, out of memory under ``noeviction``,
loading, a read-only replica; see :mod:`signals.streams.redis_errors`): the reader backs off with full
jitter (0.05 s doubling to 2 s) and retries until ``reconnect_timeout_s`` has passed
without success, then the worker exits non-zero; after a reconnect it re-processes its
own pending entries first. A fault of one lane never reaches this level (see
:mod:`workers.engine.commit`); a write stream key of another type is left out of the reads
(logged as ``worker.partition_unreadable``) and checked again every maintenance interval.

At start the worker checks the namespace's shared settings (:mod:`signals.streams.namespace`):
a partition count different from the stored one stops it with a clear message.

Shutdown (SIGTERM/SIGINT/SIGHUP or ``stop``): stop reading, let the batch in flight finish and
commit, leave the consumer groups where no entry is pending for this consumer, exit 0. If
that takes longer than ``grace_s`` the task group is cancelled (the uncommitted batch
stays pending and is reprocessed by the next worker: no loss).
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus
from redis import exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster

from signals.core.lane import LaneOptions
from signals.core.retention import Retention
from signals.errors import GroupMissingError, RedisUnavailableError
from signals.streams.backoff import Backoff
from signals.streams.client import Client
from signals.streams.namespace import check_namespace
from signals.streams.redis_errors import ReplyTooLargeError, is_whole_server, is_wrong_type, reply_code
from signals.streams.scripts import ensure_loaded, library_name
from signals.tokenizers import token_counter
from workers.engine.consumer import Consumer
from workers.engine.counters import METRICS
from workers.engine.maintenance import trim_write_streams
from workers.engine.options import ConsumerOptions
from workers.engine.reader import RawEntry
from workers.runtime.settings import Settings

__all__ = ("STOP_SIGNALS", "run_worker", "stop_on_signals")

#: How long a stopping worker spends removing itself from the consumer groups.
_LEAVE_S = 2.0

log = structlog.get_logger(__name__)


async def _wait(backoff: Backoff, error: BaseException) -> None:
    """Sleep before retrying after ``error``; past the reconnect timeout, stop the worker."""
    delay = backoff.next_delay()
    if delay is None:
        raise RedisUnavailableError(f"Redis unreachable for {backoff.timeout_s:.0f}s: {error}") from error
    log.warning("worker.redis_unavailable", error=repr(error), retry_in_s=round(delay, 3))
    await anyio.sleep(delay)


async def warn_if_evicting(redis: Client) -> str | None:
    """Log a warning when Redis may evict this deployment's keys (``maxmemory-policy`` other
    than ``noeviction``); returns the policy then. Under ``allkeys-*`` a lane's document,
    tracking or signals can vanish at any time (versions were reused and events
    dead-lettered as "unknown lane"); under ``volatile-*`` the keys with a TTL go first
    (idempotency keys: a retried write can apply twice). A cluster client is not asked."""
    if isinstance(redis, RedisCluster):
        return None
    try:
        info = await redis.info("memory")
    except redis_exc.ResponseError:  # a user without INFO: nothing to tell
        return None
    policy = info.get("maxmemory_policy") if isinstance(info, dict) else None
    if not isinstance(policy, str) or policy == "noeviction":
        return None
    lost = ("any key: documents, tracking and signals (lanes lose versions)" if policy.startswith("allkeys")
            else "keys with a TTL: idempotency keys (a retried write can apply twice) and heartbeats")
    log.warning("worker.eviction_policy", maxmemory_policy=policy,
                note=f"Redis may evict {lost}; set maxmemory-policy noeviction for wm-signals")
    return policy


async def _load_functions(redis: Client) -> None:
    """Load the project's functions unless the server has them (see :mod:`signals.streams.scripts`)."""
    if await ensure_loaded(redis):
        log.info("worker.functions_loaded", library=library_name())


async def _retrying(backoff: Backoff, stop: anyio.Event, fn: object) -> None:
    while not stop.is_set():
        METRICS.mark("start")  # waiting for Redis at start-up is progress, not a hang
        try:
            await fn()  # type: ignore[operator]
        except redis_exc.RedisError as e:
            if not is_whole_server(e):
                raise
            await _wait(backoff, e)
        else:
            backoff.ok()
            return


async def run_worker(
    redis: Client,
    settings: Settings,
    *,
    name: str,
    stop: anyio.Event | None = None,
    handle_signals: bool = True,
    shard: tuple[int, int] = (0, 1),
    task_status: TaskStatus[Consumer] = anyio.TASK_STATUS_IGNORED,
) -> Consumer:
    """Run a worker until ``stop`` is set (or, with ``handle_signals``, SIGTERM/SIGINT/SIGHUP: see
    :func:`stop_on_signals`); returns its consumer.

    ``shard`` is ``(index, count)`` of ``worker --processes`` (see ``ConsumerOptions.shard``).
    """
    stop = stop or anyio.Event()
    if handle_signals:
        async with stop_on_signals(stop):
            return await run_worker(redis, settings, name=name, stop=stop, handle_signals=False, shard=shard,
                                    task_status=task_status)
    options = dataclasses.replace(consumer_options(settings), shard=shard)
    consumer = Consumer(redis, settings.keys(), options, name, signer=settings.signer())
    backoff = Backoff(settings.reconnect_timeout_s)
    await _retrying(backoff, stop, lambda: check_namespace(redis, consumer.keys))
    await _retrying(backoff, stop, consumer.ensure_groups)
    await _retrying(backoff, stop, lambda: _load_functions(redis))
    await _retrying(backoff, stop, lambda: warn_if_evicting(redis))
    log.info("worker.started", consumer=name, partitions=settings.partitions, policy=settings.policy)
    cut = anyio.Event()  # set when the hard deadline cut the stop short
    async with anyio.create_task_group() as tg:
        tg.start_soon(_deadline, stop, tg.cancel_scope, settings.grace_s, cut)
        tg.start_soon(_maintenance, consumer, stop, settings.maintenance_interval_s)
        task_status.started(consumer)
        log.info("worker.ready", consumer=name)
        METRICS.up = 1
        METRICS.unmark("start")
        try:
            async with anyio.create_task_group() as readers:
                for streams in consumer.stream_groups():
                    readers.start_soon(_read_loop, consumer, streams, stop,
                                       Backoff(settings.reconnect_timeout_s))
        finally:
            METRICS.up = 0
        tg.cancel_scope.cancel()
    if not cut.is_set():  # a graceful stop; past the hard deadline the worker only exits
        await _leave_group(consumer, name)
    s = consumer.stats
    log.info("worker.stopped", consumer=name, events=s.events, signals=s.signals,
             skipped=s.skipped, dead_letters=s.dead_letters, conflicts=s.conflicts)
    return consumer


async def _leave_group(consumer: Consumer, name: str) -> None:
    """Leave the consumer groups where nothing is pending (a cleanup: bounded, shielded)."""
    with anyio.move_on_after(_LEAVE_S, shield=True):
        try:
            left = await consumer.leave_group()
        except redis_exc.RedisError as e:  # Redis gone at shutdown: the consumer stays listed, nothing lost
            log.warning("worker.leave_group_failed", consumer=name, error=str(e))
        else:
            log.info("worker.left_group", consumer=name, streams=len(left))


async def _read_loop(consumer: Consumer, streams: list[str], stop: anyio.Event, backoff: Backoff) -> None:
    """Read and process ``streams`` until stopped: all partitions in one loop on a single
    server, one loop per partition on a cluster (see ``Consumer.stream_groups``).

    While entries keep coming, each commit carries the next read (``process_and_read``);
    the loop blocks on XREADGROUP only when nothing was waiting. Entries already read
    when the stop comes are processed before the loop ends (no new read is made).
    """
    drain = True
    ahead: list[RawEntry] = []
    active, checked = streams, time.monotonic()
    lost, loop = False, object()  # Redis lost (its return is a reconnect); this loop's progress mark
    while not stop.is_set() or ahead:
        METRICS.mark(loop)  # liveness (workers.ops.health): a read returned, timed out, or a back-off ended
        try:
            if active is not streams and time.monotonic() - checked > consumer.options.claim_idle_ms / 1000:
                active, checked = await consumer.readable(streams), time.monotonic()
            if drain:
                consumer.drain_needed = False  # this drain reads what a read-ahead left pending
                await consumer.drain_pending(active)
                drain = False
                continue
            ahead = await _step(consumer, active, ahead, stop)
            drain = consumer.drain_needed  # a read-ahead over the reply bound left entries pending
            backoff.ok()
            METRICS.add("reconnects", lost)
            METRICS.stalled.discard(loop)
            lost = False
        except ReplyTooLargeError as e:  # what the read brought is pending: drained in smaller reads
            ahead, drain = [], True
            log.warning("worker.reply_too_large", error=str(e), read_count=consumer.read_count)
        except GroupMissingError as e:  # a write stream deleted under us: its group goes with it
            ahead, drain = [], True
            log.warning("worker.group_recreated", error=str(e))
            await consumer.ensure_groups()
        except redis_exc.RedisError as e:
            ahead = []  # read but unprocessed: still pending, drain_pending reads them again
            drain = True
            if is_whole_server(e):
                lost = True
                METRICS.stalled.add(loop)  # wm_signals_up 0 until a read succeeds again
                await _wait(backoff, e)
            elif is_wrong_type(e) or reply_code(e) == "UNBLOCKED":  # a write stream retyped or deleted
                active, checked = await consumer.readable(streams), time.monotonic()
                if not active:
                    await _wait(backoff, e)
            else:
                raise
    METRICS.unmark(loop)
    METRICS.stalled.discard(loop)


async def _step(consumer: Consumer, active: list[str], ahead: list[RawEntry], stop: anyio.Event) -> list[RawEntry]:
    """Process what was read ahead, else one read; returns what the commit read ahead."""
    raw = ahead or await consumer.read_batch(active)
    if not raw:
        return []
    return await consumer.process_and_read(raw, None if stop.is_set() else active)


async def _maintenance(consumer: Consumer, stop: anyio.Event, interval: float) -> None:
    """Every ``interval``: load the project's functions if the server lost them (a flush, a
    restart without persistence: writers wait for them), reclaim idle entries, trim the
    write streams, reconcile lanes whose document is ahead of their signals, compact idle
    lanes. A task meeting
    a lost group or stream (or any fault of keys) is skipped until the next interval, with
    a warning, and the others still run: only a missing permission (the deployment's
    fault) reaches the caller. Compaction's own refusals (its script's or its reads') stay
    in it: logged, the lanes left as they are (see :mod:`workers.engine.compaction`)."""
    tasks = (("functions", lambda: _load_functions(consumer.redis)), ("reclaim", consumer.reclaim),
             ("trim", lambda: trim_write_streams(consumer.redis, consumer.keys)), ("reconcile", consumer.reconcile),
             ("compact", lambda: consumer.compactor.run_pass(round(time.time() * 1000))))
    while not stop.is_set():
        with anyio.move_on_after(interval):
            await stop.wait()
        if stop.is_set():
            return
        for name, task in tasks:
            try:
                await task()
            except GroupMissingError as e:
                log.warning("worker.group_recreated", task=name, error=str(e))
                await _ensure_groups(consumer)
            except redis_exc.RedisError as e:
                if isinstance(e, redis_exc.NoPermissionError):
                    raise
                log.warning("worker.maintenance_skipped", task=name, error=repr(e))


async def _ensure_groups(consumer: Consumer) -> None:
    try:
        await consumer.ensure_groups()
    except redis_exc.RedisError as e:  # the read loop makes them again at its next read
        log.warning("worker.maintenance_skipped", task="groups", error=repr(e))


#: The signals that stop a worker gracefully: SIGTERM (an orchestrator, ``kill``), SIGINT
#: (Ctrl-C), SIGHUP (the terminal or SSH session closed, ``nohup``-less daemons, some
#: supervisors' reload): Python's default for SIGHUP is to die at once, leaving the consumer
#: in its group and the heartbeat to expire.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@asynccontextmanager
async def stop_on_signals(stop: anyio.Event) -> AsyncIterator[None]:
    """Set ``stop`` at the first of :data:`STOP_SIGNALS` within the block; log and ignore the ones after.

    A stop signal often comes twice: Ctrl-C sends SIGINT to the whole process group and
    the ``--processes`` supervisor then sends each child SIGTERM; ``timeout`` and some
    platforms signal the group as well. A second signal given its default action would
    kill the process mid-stop (consumer group not left, heartbeat left to expire), so the
    signals stay caught until the block ends, its clean-up included; the stop is bounded
    anyway (``grace_s``), and SIGKILL ends it at once.
    """
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_signals, signals, stop)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()  # signals from here to the block's end are caught, unread


async def _watch_signals(signals: AsyncIterator[int], stop: anyio.Event) -> None:
    async for signum in signals:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.info("worker.stop_signal_ignored", signal=name, note="already stopping (within grace_s)")
            continue
        log.info("worker.stopping", signal=name)
        stop.set()


async def _deadline(stop: anyio.Event, scope: anyio.CancelScope, grace_s: float, cut: anyio.Event) -> None:
    await stop.wait()
    await anyio.sleep(grace_s)
    log.warning("worker.hard_deadline", grace_s=grace_s, note="in-flight batch left pending")
    cut.set()
    scope.cancel()


def consumer_options(settings: Settings) -> ConsumerOptions:
    """The engine's options from ``settings``: what is not set keeps the engine's default."""
    tuning: dict[str, Any] = {name: value for name in ("batch", "block_ms", "claim_idle_ms", "max_attempts",
                                                       "compact_batch")
                              if (value := getattr(settings, name)) is not None}
    if settings.compact_after is not None:
        tuning["compact_after_ms"] = round(settings.compact_after.total_seconds() * 1000)
    return ConsumerOptions(
        lane=LaneOptions(settings.policy, settings.snapshot_every, settings.omit_delta_value, settings.max_diff_edits,
                         token_counter(settings.token_counter)),
        retention=Retention.of(settings.retain_signals, settings.retain_age),
        **tuning,
    )

"""How ``wm-signals worker`` runs: one consumer process, or N under a supervisor; the
ops endpoint; ``worker --check``.

One process (the default): the worker, its monitor task (:class:`workers.ops.health.Monitor`)
and, with ``metrics_port``, the HTTP endpoint (:mod:`workers.ops.server`) in a thread.

``--processes N`` (``auto``: one per core, at most one per partition): the supervisor
spawns N child processes (``multiprocessing`` with ``spawn``: a fresh interpreter each,
nothing inherited from a running event loop), each a whole worker with its own Redis
connection and consumer name ``<base>-<i>`` (``base``: ``consumer_name``, else
``<host>-<supervisor pid>``). Child ``i`` reads the partitions ``p`` with
``p % N == i``, so no two processes of a host commit the same lane at once (commit
conflicts would eat the gain of the second core); other hosts' workers still share
every partition through the consumer group, and every child reclaims stale entries of
any partition. The supervisor runs no event loop and holds no Redis connection: it
serves the one endpoint for all children from shared memory (:class:`workers.ops.health.Board`:
counters and histograms summed, ``/livez`` and ``/readyz`` healthy only when every child
is). Children publish their state once every ``health_interval_s``: a scrape is at most
that stale.

Stopping: SIGTERM, SIGINT or SIGHUP to the supervisor is forwarded as SIGTERM to every child,
which stops gracefully (``grace_s``, then its hard deadline); a child still running
``grace_s + 5`` s later is killed. The supervisor exits 0 when every child stopped
cleanly. A child that exits on its own (a crash, Redis gone past
``reconnect_timeout_s``, killed) is not restarted: the supervisor stops the others and
exits 1, leaving restarts to the platform (systemd, Kubernetes, compose), which also
backs them off; a half-running worker is not hidden behind a healthy endpoint. A child
ends as one process would: its reason as the CLI's one line on stderr, and its exit
code; one that exits 2 (settings it cannot honour) makes the supervisor exit 2. A child
whose supervisor died (SIGKILL) notices within ``health_interval_s`` and stops.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import sys
import time
from typing import Any

import anyio
import structlog
from redis import exceptions as redis_exc

from signals.errors import WmSignalsError
from workers.engine.counters import Layout
from workers.engine.options import default_consumer_name
from workers.ops.health import Board, Monitor, check_heartbeat, heartbeat_instance, liveness_bound, ready_max_age
from workers.ops.server import OpsServer
from workers.runtime.connect import open_client, require_redis, run, tune_gc
from workers.runtime.exits import leaf, report
from workers.runtime.logging import configure_logging
from workers.runtime.settings import Settings
from workers.runtime.worker import STOP_SIGNALS, consumer_options, run_worker, stop_on_signals

__all__ = ("heartbeat_candidates", "run_check", "run_worker_command", "serve_one")

log = structlog.get_logger(__name__)
#: Seconds past ``grace_s`` a child may take to exit before the supervisor kills it.
KILL_AFTER_S = 5.0


def run_worker_command(settings: Settings) -> int:
    """``wm-signals worker``: one process, or :func:`run_processes`; returns the exit code."""
    require_redis(settings)  # signals written into a server that stops with the worker would be lost
    count = settings.process_count()
    if count > 1:
        return run_processes(settings, count)
    board = Board(1, Layout(settings.partitions))
    server = _ops_server(settings, board, None)
    name = settings.consumer_name or default_consumer_name()
    try:
        return run(functools.partial(serve_one, settings, name=name, board=board, slot=0, shard=(0, 1)))
    finally:
        if server is not None:
            server.stop()


async def serve_one(settings: Settings, *, name: str, board: Board, slot: int, shard: tuple[int, int],
                    parent: int | None = None) -> int:
    """One worker process: the worker and its monitor task; returns 0 after a graceful stop."""

    tune_gc()
    stop = anyio.Event()
    async with stop_on_signals(stop), open_client(settings, check=False, bounded=True) as redis:  # caught until the end
        monitor = Monitor(redis, settings.keys(), board=board, slot=slot, interval_s=settings.health_interval_s,
                          heartbeat_ttl_s=settings.heartbeat_ttl_s,
                          bound_s=liveness_bound(settings.liveness_s, consumer_options(settings).block_ms),
                          instance=heartbeat_instance(settings.consumer_name), parent=parent)
        async with anyio.create_task_group() as tg:
            tg.start_soon(monitor.run, stop)
            try:
                await run_worker(redis, settings, name=name, stop=stop, shard=shard, handle_signals=False)
            finally:
                tg.cancel_scope.cancel()
        await monitor.clear()
    return 0


def _ops_server(settings: Settings, board: Board, running: list[bool] | None) -> OpsServer | None:
    if settings.metrics_port is None:
        return None
    alive = None if running is None else running.__getitem__
    server = OpsServer(settings.metrics_addr, settings.metrics_port, board,
                       live_bound_s=liveness_bound(settings.liveness_s, consumer_options(settings).block_ms),
                       ready_max_age_s=ready_max_age(settings.health_interval_s), alive=alive).start()
    log.info("worker.metrics_serving", addr=settings.metrics_addr, port=server.port)
    return server


def run_processes(settings: Settings, count: int) -> int:
    """Run ``count`` worker processes under this (supervising) process; see the module doc."""
    ctx = multiprocessing.get_context("spawn")
    board = Board(count, Layout(settings.partitions), ctx)
    base = settings.consumer_name or default_consumer_name()
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    running = [False] * count
    server = _ops_server(settings, board, running)  # first: a port in use stops us before any child starts
    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    children = [ctx.Process(target=_child, args=(settings, f"{base}-{i}", board, (i, count), os.getpid()),
                            name=f"wm-signals-worker-{i}") for i in range(count)]
    try:
        for i, child in enumerate(children):
            child.start()
            running[i] = True
        log.info("worker.processes_started", processes=count, consumers=[f"{base}-{i}" for i in range(count)])
        code = _watch(children, running, stopping)
        if stopping:
            log.info("worker.stopping", signal=signal.Signals(stopping[0]).name, processes=count)
        code = max(code, _stop_children(children, running, settings.grace_s + KILL_AFTER_S))
    finally:
        for child in children:
            if child.pid is not None and child.exitcode is None:
                child.kill()
                child.join()
        if server is not None:
            server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("worker.processes_stopped", exitcodes=[c.exitcode for c in children], code=code)
    return code


def _watch(children: list[Any], running: list[bool], stopping: list[int]) -> int:
    """Wait for a stop signal (0) or a child's exit (2 when a child exited 2, its settings
    refused, as one process would; else 1)."""
    while not stopping:
        multiprocessing.connection.wait([c.sentinel for c in children], timeout=0.2)
        exited = [(i, c.exitcode) for i, c in enumerate(children) if c.exitcode is not None]
        for i, _ in exited:
            running[i] = False
        if exited and not stopping:
            log.error("worker.process_exited", exited=[{"process": i, "exitcode": e} for i, e in exited],
                      note="stopping the other processes; the platform restarts the worker")
            return 2 if any(e == 2 for _, e in exited) else 1
    return 0


def _stop_children(children: list[Any], running: list[bool], limit_s: float) -> int:
    """SIGTERM every running child, wait up to ``limit_s``, kill the rest; 1 unless all stopped cleanly."""
    for child in children:
        if child.exitcode is None:
            os.kill(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + limit_s
    for child in children:
        child.join(max(deadline - time.monotonic(), 0))
    code = 0
    for i, child in enumerate(children):
        if child.exitcode is None:
            log.warning("worker.process_killed", process=i, after_s=limit_s)
            child.kill()
            child.join()
            code = 1
        running[i] = False
        if child.exitcode not in (0, -signal.SIGTERM, -signal.SIGHUP):  # signalled before its handler: clean
            code = 1
    return code


def _child(settings: Settings, name: str, board: Board, shard: tuple[int, int], parent: int) -> None:
    """A child process's entry point (spawned: a fresh interpreter); ``shard`` is (its slot, count)."""
    configure_logging(settings.log_format, settings.log_level)
    try:
        code = run(functools.partial(serve_one, settings, name=name, board=board, slot=shard[0], shard=shard,
                                     parent=parent))
    except BaseException as e:  # noqa: BLE001 - a child's end: its reason on one line, and the CLI's exit code
        log.error("worker.failed", consumer=name, error=f"{type(leaf(e)).__name__}: {leaf(e)}")  # noqa: TRY400
        code = report(e, "worker")  # 2 for settings it cannot honour (a partition count, say), as one process
    sys.exit(code)


def heartbeat_candidates(consumer_name: str | None) -> list[str]:
    """The heartbeat instances ``worker --check --consumer-name NAME`` looks for: NAME (the
    configured ``--consumer-name`` of a worker), then NAME without a trailing ``-<digits>``:
    the consumer name ``inspect`` shows is the instance's plus the process (``<host>-<pid>``
    for a worker started without a name, ``<name>-<i>`` under ``--processes``)."""
    instance = heartbeat_instance(consumer_name)
    base = re.fullmatch(r"(.+)-[0-9]+", instance)
    return [instance, base.group(1)] if base else [instance]


def run_check(settings: Settings) -> int:
    """``wm-signals worker --check``: 0 when the instance's heartbeat is fresh, else 1 (one
    line on stderr). ``--consumer-name`` takes the worker's configured name or the consumer
    name ``inspect`` shows (see :func:`heartbeat_candidates`)."""

    async def main() -> str | None:
        async with open_client(settings, check=False) as redis:
            first: str | None = None
            for instance in heartbeat_candidates(settings.consumer_name):
                why = await check_heartbeat(redis, settings.keys(), instance)
                if why is None:
                    return None
                first = first or why
            return first

    try:
        why = run(main)
    except redis_exc.NoPermissionError as e:  # the probe runs as the worker's own user (or the operator)
        why = f"cannot read the heartbeat: {e} (run the probe as the worker or operator role)"
    except (redis_exc.RedisError, WmSignalsError, OSError) as e:
        why = f"cannot read the heartbeat: {e}"
    if why is None:
        return 0
    print(f"wm-signals: worker unhealthy: {why}", file=sys.stderr)  # noqa: T201 - a probe's one line
    return 1

"""Batches in flight: the read loop plans its next batch while Redis commits the last one.

A batch's time is the worker planning it (CPU) and then waiting for Redis to commit it.
Taken one after the other, the two add up: at 10,000 writes/s on a 2-core host a batch of
about 50 events was planned in 1.7 ms and committed in 3.4 ms (the commit's round trip,
queued behind the writers on a busy Redis), so the worker was busy or waiting for about
100 us per event, about the interval between arrivals, and its queue grew. Here the read
loop (:func:`workers.supervisor.read_loop`) hands each batch to a task of its own (a
*flight*); just before a flight sends its commit, it sends the read of the next batch
(:class:`ReadAhead`, on a connection of its own, ahead of the commit on the wire), and the
loop starts the next flight with what came back while the first one waits for its commit.

What keeps this correct is that no lane is planned while an earlier flight may still
change it: a flight's lanes are registered in a :class:`LaneGate` before it plans
anything, and a lane an earlier flight holds is planned only once that flight is done
(its commit settled, recomputed lanes included). Lanes no earlier flight holds are planned
at once. At most :data:`MAX_FLIGHTS` are in flight; a flight's error (Redis gone above
all) is raised in the read loop at its next step, where it is classified as before.

It does not decide how a batch is processed (:mod:`workers.consumer` does), and the
worker's other readers (the start-up drain, reclaims) process their batches directly,
outside any gate, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import structlog
from redis import exceptions as redis_exc

from signals.errors import WmSignalsError
from workers.reader import RawEntry

__all__ = ("MAX_FLIGHTS", "Flights", "LaneGate", "ReadAhead", "open_flights")

log = structlog.get_logger(__name__)

#: Batches in flight at once: one committing while the next is planned. A third would only
#: queue behind the second's commit on the same Redis.
MAX_FLIGHTS = 2


@dataclass(slots=True)
class ReadAhead:
    """The next batch's read, sent by a flight just before its commit (see :meth:`begin`)."""

    streams: list[str]
    _send: Callable[[ReadAhead], None]
    entries: list[RawEntry] | None = None
    """What the read returned (``[]`` when it failed: the next blocking read reports it)."""
    started: bool = False
    ready: anyio.Event = field(default_factory=anyio.Event)
    """Set once ``entries`` is known."""

    def begin(self) -> None:
        """Send the read (once; later calls do nothing). The caller lets it go out before
        sending its commit, so that Redis serves the read first."""
        if not self.started:
            self.started = True
            self._send(self)


class LaneGate:
    """Which flight holds which lane: a flight is planned only where no earlier flight
    still holds the lane."""

    def __init__(self) -> None:
        self._held: dict[str, anyio.Event] = {}

    def enter(self, lanes: Iterable[str]) -> tuple[dict[str, anyio.Event], Callable[[], None]]:
        """Hold ``lanes`` for a new flight (call before the flight's first ``await``, so
        that flights hold lanes in the order they were read). Returns the lanes an earlier
        flight still holds, each with the event set when that flight is done, and the
        function that releases this flight's lanes."""
        done = anyio.Event()
        earlier: dict[str, anyio.Event] = {}
        mine = list(lanes)
        for lane in mine:
            before = self._held.get(lane)
            if before is not None:
                earlier[lane] = before
            self._held[lane] = done

        def leave() -> None:
            done.set()
            for lane in mine:
                if self._held.get(lane) is done:
                    del self._held[lane]

        return earlier, leave


Process = Callable[[list[RawEntry], ReadAhead | None, LaneGate], Awaitable[object]]
"""Process one batch (the consumer's ``process`` with its read-ahead and the gate)."""
Read = Callable[[list[str]], Awaitable[list[RawEntry]]]
"""Read what waits on the streams now, without blocking."""


@dataclass(slots=True)
class _Flight:
    done: anyio.Event = field(default_factory=anyio.Event)
    handoff: anyio.Event = field(default_factory=anyio.Event)  # its read-ahead came back, or it is done
    error: Exception | None = None


class Flights:
    """The read loop's batches in flight (see the module's header)."""

    def __init__(self, process: Process, read: Read, tg: anyio.abc.TaskGroup) -> None:
        self._process, self._read, self._tg = process, read, tg
        self._gate = LaneGate()
        self._flying: list[_Flight] = []

    async def process_and_read(self, raw: list[RawEntry], streams: list[str] | None) -> list[RawEntry]:
        """Start processing ``raw`` in a flight of its own; return, as soon as that flight's
        read of ``streams`` came back, what it read (empty: nothing was waiting, nothing
        was committed, or no ``streams``; the caller then blocks on its own read). The
        flight may still be committing when this returns."""
        self.raise_failed()
        while len(self._flying) >= MAX_FLIGHTS:
            await self._flying[0].done.wait()
            self.raise_failed()
        flight = _Flight()

        def send(ahead: ReadAhead) -> None:
            self._tg.start_soon(self._read_ahead, ahead, flight)

        ahead = ReadAhead(streams, send) if streams else None
        self._flying.append(flight)
        self._tg.start_soon(self._fly, flight, raw, ahead)
        await flight.handoff.wait()
        if ahead is None or not ahead.started:
            self.raise_failed()
            return []
        await ahead.ready.wait()
        return ahead.entries or []

    def raise_failed(self) -> None:
        """Forget the flights that are done; raise the first error among them."""
        error = next((f.error for f in self._flying if f.done.is_set() and f.error is not None), None)
        self._flying = [f for f in self._flying if not f.done.is_set()]
        if error is not None:
            raise error

    async def settle(self) -> None:
        """Wait for every flight; raise the first error among them."""
        flights, error = list(self._flying), None
        for flight in flights:
            await flight.done.wait()
            error = error or flight.error
        self._flying = [f for f in self._flying if f not in flights]
        if error is not None:
            raise error

    async def abandon(self) -> None:
        """Wait for every flight and drop their errors (the read loop is handling one
        already; what they did not commit stays pending, and the loop drains it)."""
        for flight in list(self._flying):
            await flight.done.wait()
        self._flying.clear()

    async def _fly(self, flight: _Flight, raw: list[RawEntry], ahead: ReadAhead | None) -> None:
        try:
            await self._process(raw, ahead, self._gate)
        except Exception as e:  # noqa: BLE001 - raised in the read loop (raise_failed), classified there
            flight.error = e
        finally:
            flight.done.set()
            flight.handoff.set()

    async def _read_ahead(self, ahead: ReadAhead, flight: _Flight) -> None:
        try:
            ahead.entries = await self._read(ahead.streams)
        except (redis_exc.RedisError, WmSignalsError) as e:  # the next blocking read reports it
            log.debug("worker.read_ahead_failed", error=str(e)[:200])
            ahead.entries = []
        finally:
            ahead.ready.set()
            flight.handoff.set()


@asynccontextmanager
async def open_flights(process: Process, read: Read) -> AsyncIterator[Flights]:
    """Flights for one read loop, in a task group of their own: on leaving, every flight
    has ended (the loop settles them first; an error leaving the loop cancels those still
    committing, whose entries stay pending for the next worker, as a cancelled batch's do)."""
    async with anyio.create_task_group() as tg:
        yield Flights(process, read, tg)

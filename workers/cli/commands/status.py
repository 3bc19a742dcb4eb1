"""``inspect`` and ``dlq``: the operator's view of a namespace, and its dead letters.

Read-only except ``dlq requeue|drop``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from rich.table import Table

from signals.errors import InvalidInputError
from signals.streams.deadletters import DeadLetterEntry, DeadLetters
from signals.streams.status import SCAN_LANES, inspect, shown_name
from workers.cli.args import add_common_args, int_flag, run_async, settings_from
from workers.cli.display import OutputConsole, field, json_line, literal
from workers.runtime.connect import open_client

__all__ = ("register",)

_console = OutputConsole(highlight=False, soft_wrap=True)

#: How many dead letters ``dlq list`` shows per partition (the oldest).
DLQ_LISTED = 1000




def _cmd_inspect(args: argparse.Namespace) -> int:
    """The report, whole, even when some lanes are bad (a lane set member that is not a lane of
    its partition, or a lane whose versions do not read): each is named with its reason,
    counted in the ``bad`` column, and the exit code is then 2 (malformed data read from
    Redis), with one line on stderr saying how many."""
    settings = settings_from(args)

    async def main() -> int:
        async with open_client(settings) as redis:
            report = await inspect(redis, settings.keys(), top=args.top, scan=args.scan)
        if args.json:
            print(json_line({"partitions": [_partition_dict(p) for p in report.partitions],
                             "totals": report.totals, "busiest": report.busiest,
                             "badLanes": [{"partition": b.partition, "lane": b.lane, "reason": b.reason}
                                          for b in report.bad_lanes]}))
            return _bad_lanes_status(report)
        table = Table(title=f"namespace {settings.namespace}")
        for column in ("part", "stream", "pending", "lagging", "lanes", "bad", "dlq", "consumers"):
            table.add_column(column, justify="right" if column != "consumers" else "left")
        for p in report.partitions:  # consumer and lane names are data: no markup in them
            consumers = ", ".join(f"{field(c.name)}:{c.pending}/{c.idle_ms / 1000:.0f}s" for c in p.consumers)
            table.add_row(str(p.partition), str(p.stream_length), str(p.pending), str(p.lag), str(p.lanes),
                          str(p.bad), str(p.dead_letters), consumers or "-")
        t = report.totals
        table.add_row("all", str(t["stream_length"]), str(t["pending"]), str(t["lag"]), str(t["lanes"]),
                      str(t["bad"]), str(t["dead_letters"]), "")
        _console.print(table)
        _console.print("consumers: name:pending/idle (entries not yet acked / time since its last read)",
                       markup=False)
        if report.busiest:
            busiest = ", ".join(f"{literal(lane)} ({n})" for lane, n in report.busiest)
            _console.print(f"busiest lanes (writes): {busiest}", markup=False)
        for p in report.partitions:
            for problem in p.problems:
                _console.print(f"partition {p.partition}: {literal(problem)}", markup=False)
            if p.scanned is not None:
                _console.print(f"partition {p.partition}: lagging, bad and busiest lanes read from {p.scanned:,} of "
                               f"its {p.lanes:,} lanes (the report's scan limit; the figures are partial)",
                               markup=False)
        if report.bad_lanes:
            _console.print(f"bad lanes ({t['bad']}, left out of the lag and the busiest lanes):", markup=False)
            for b in report.bad_lanes:
                _console.print(f"  partition {b.partition}: {literal(b.lane)}: {literal(b.reason)}", markup=False)
            if t["bad"] > len(report.bad_lanes):
                _console.print(f"  ... and {t['bad'] - len(report.bad_lanes)} more", markup=False)
        return _bad_lanes_status(report)

    return run_async(main)


def _bad_lanes_status(report: Any) -> int:
    """``inspect``'s exit code once the whole report is out: 2 (malformed data read from
    Redis) with one line on stderr when some lanes are bad or some partition keys have
    another type, else 0."""
    bad = report.totals["bad"]
    problems = [(p.partition, problem) for p in report.partitions for problem in p.problems]
    if not bad and not problems:
        return 0
    sys.stdout.flush()
    if problems:
        partition, problem = problems[0]
        print(f"wm-signals: {len(problems)} partition key(s) of another type in the report (malformed data in "
              f"Redis), e.g. partition {partition}: {literal(problem)}", file=sys.stderr)
        return 2
    first = report.bad_lanes[0]
    print(f"wm-signals: {bad} bad lane(s) in the report (malformed data in Redis), e.g. partition "
          f"{first.partition}: {literal(first.lane)}: {' '.join(literal(first.reason).split())}", file=sys.stderr)
    return 2


def _partition_dict(p: Any) -> dict[str, Any]:
    return {"partition": p.partition, "streamLength": p.stream_length, "pending": p.pending, "lag": p.lag,
            "lanes": p.lanes, "bad": p.bad, "deadLetters": p.dead_letters, "scanned": p.scanned,
            "problems": list(p.problems),  # consumer names are data: not UTF-8 is shown escaped, as in the table
            "consumers": [{"name": shown_name(c.name), "pending": c.pending, "idleMs": c.idle_ms}
                          for c in p.consumers]}


def _cmd_dlq(args: argparse.Namespace) -> int:
    settings = settings_from(args)

    async def main() -> int:
        async with open_client(settings) as redis:
            dlq = DeadLetters(redis, settings.keys())
            if args.action == "list":
                entries = await dlq.list(limit=DLQ_LISTED)
                listed = Counter(entry.partition for entry in entries)
                more = {partition: length - listed[partition]
                        for partition, length in enumerate(await dlq.lengths()) if length > listed[partition]}
                _print_dead_letters(settings.namespace, entries, more, as_json=args.json)
            elif args.action == "show":
                print(json_line((await dlq.get(_need_id(args), args.partition)).letter))
            elif args.action == "requeue":
                print(f"requeued as {await dlq.requeue(_need_id(args), args.partition)}")
            else:
                await dlq.drop(_need_id(args), args.partition)
                print("dropped")
        return 0

    return run_async(main)


def _print_dead_letters(namespace: str, entries: list[DeadLetterEntry], more: dict[int, int], *,
                        as_json: bool) -> None:
    """``dlq list``: one line per dead letter (the oldest of each partition), what is not
    listed, and a line saying so when there is none; with ``as_json`` one JSON object."""
    if as_json:
        print(json_line({"namespace": namespace, "deadLetters": [
            {"id": e.id, "partition": e.partition, "letter": e.letter, "problem": e.problem} for e in entries],
            "notListed": {str(partition): n for partition, n in more.items()}}))
        return
    if not entries and not more:
        print(f"no dead letters in namespace {namespace!r}")
        return
    for entry in entries:
        what = (f"attempts {entry.letter.attempts}  {literal(entry.letter.error)}" if entry.letter
                else literal(entry.problem or ""))
        print(f"{entry.id}  partition {entry.partition}  {what}")
    for partition, n in more.items():  # as many lines as a partition holds would be too many
        print(f"partition {partition}: {n} more dead letters not listed (the list shows the oldest {DLQ_LISTED} "
              "of each partition)")


def _need_id(args: argparse.Namespace) -> str:
    if not args.id:
        raise InvalidInputError(f"dlq {args.action} needs a dead-letter id (see 'dlq list')")
    return str(args.id)




def register(sub: Any) -> None:
    """Add inspect and dlq to the CLI."""
    insp = sub.add_parser("inspect", help="partitions, consumer groups, pending, lag, dead letters, busiest lanes")
    add_common_args(insp)
    insp.add_argument("--top", type=int_flag("--top", "a number of lanes", 0, 999_999_999), default=10,
                      help="how many busiest lanes to list")
    insp.add_argument("--scan", type=int_flag("--scan", "a number of lanes", 1, 999_999_999), default=SCAN_LANES,
                      help=f"lanes read per partition for the lag, bad and busiest lanes (default {SCAN_LANES:,}; "
                           "a partition with more says its figures are partial)")
    insp.add_argument("--json", action="store_true")
    insp.set_defaults(handler=_cmd_inspect)

    dlq = sub.add_parser("dlq", help="dead letters: list | show ID | requeue ID | drop ID")
    add_common_args(dlq)
    dlq.add_argument("action", choices=("list", "show", "requeue", "drop"))
    dlq.add_argument("id", nargs="?", help="dead-letter entry id")
    dlq.add_argument("--partition", type=int_flag("--partition", "a partition number", 0, 4095), default=None,
                     help="the dead letter's partition (needed when several partitions hold the id)")
    dlq.add_argument("--json", action="store_true", help="list: one JSON object (deadLetters, notListed)")
    dlq.set_defaults(handler=_cmd_dlq)

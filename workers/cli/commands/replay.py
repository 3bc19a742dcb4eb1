"""``replay``: a lane's signals in order, rebuilt and verified, or a thread's deliveries.

``replay`` never joins a consumer group and never writes; with ``--file`` it works on an
``export`` file with no Redis at all (the format: :mod:`signals.streams.export`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import Progress

from signals.core.diff import unified_patch
from signals.core.models import Delivery, Signal
from signals.core.retention import Retention
from signals.core.signing import MAC_FIELD
from signals.core.tokens import approx_tokens
from signals.errors import InvalidInputError, VerifyError
from signals.streams.deliveries import DeliveryLog, LogIntegrity
from signals.streams.export import decode_export, read_export
from signals.streams.keys import lane_id
from signals.streams.replay import Materialised, materialise, trimmed_before
from signals.streams.verify import DocumentState, check_document, read_verifiable
from workers.cli.args import add_common_args, add_lane_args, lane_scope, run_async, settings_from
from workers.cli.display import OutputConsole, body, field, json_line, literal, signal_record
from workers.cli.lane_reads import NO_SIGNALS_HINT, compacted_version, load_lane, processed_version
from workers.runtime.connect import open_client
from workers.runtime.stdio import stdin_closed

__all__ = ("register",)

_console = OutputConsole(highlight=False, soft_wrap=True)



def _bound(value: str | None) -> tuple[str, int | datetime] | None:
    """``--from``/``--to``: a version number or an ISO-8601 time."""
    if value is None:
        return None
    if value.isascii() and value.isdigit():  # isdigit alone takes '²' and other scripts' digits
        if len(value) > 16:
            raise InvalidInputError(f"--from/--to: version {value[:40]}... is past any a lane reaches")
        return ("version", int(value))
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise InvalidInputError(f"--from/--to takes a version number or an ISO time, not {value!r}") from e
    return ("time", when if when.tzinfo else when.replace(tzinfo=UTC))  # signals are stamped in UTC


def _within(item: Materialised, low: Any, high: Any) -> bool:
    for bound, above in ((low, True), (high, False)):
        if bound is None:
            continue
        kind, value = bound
        if kind == "version":
            key: Any = item.signal.version
        else:
            key = datetime.fromisoformat((item.signal.emitted_at or "1970-01-01T00:00:00Z").replace("Z", "+00:00"))
        if (above and key < value) or (not above and key > value):
            return False
    return True


def _print_item(item: Materialised, previous: str | None) -> None:
    s = item.signal
    _console.print(f"[bold]v{s.version}[/] {field(s.mode):8} {field(s.cache_key)}  {len(s.contents.encode())} B  "
                   f"~{approx_tokens(s.contents)} tok  document v{s.write_version}  {field(s.emitted_at or '')}")
    if s.mode == "delta":
        _console.print(body(s.contents), markup=False)
    elif previous is not None:
        _console.print(body(unified_patch(previous, item.value) or "(same text as before)"), markup=False)
    else:
        _console.print(body(item.value), markup=False)


def _replay_items(signals: list[tuple[str, Signal]], verify: bool) -> Iterator[Materialised]:
    if sys.stdout.isatty() and len(signals) > 1000:
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("replaying", total=len(signals))
            for item in materialise(signals, verify=verify):
                progress.advance(task)
                yield item
    else:
        yield from materialise(signals, verify=verify)


def _trimmed_note(first: Signal, retention: Retention | None, compacted: int | None = None) -> str:
    """The line saying where the retained history begins (and why older history is gone).

    The workers trim only at snapshot boundaries; a history that begins with a delta was
    cut by something else, and the line says so rather than promising a snapshot. A
    history that begins at the snapshot a compaction left (``compacted``: the version the
    lane's tracking records, see :mod:`workers.compaction`) says that."""
    if compacted is not None and first.version == compacted and first.mode == "snapshot":
        return (f"history before version {first.version} was compacted (the lane was idle for compact_after, and "
                "the workers keep one snapshot of an idle lane); the oldest retained signal is that snapshot")
    why = (f"retention: {retention.describe()}, if the workers share this process's retain_signals/retain_age"
           if retention is not None else "not in this export")
    if first.mode != "snapshot":
        return (f"history before signal version {first.version} is gone ({why}), and the oldest retained signal is a "
                "delta: the stream was cut below its snapshot by something other than the workers' retention")
    return (f"history before signal version {first.version} was trimmed ({why}); the oldest retained signal is a "
            "snapshot")


def _show_deliveries(deliveries: list[Delivery], *, as_json: bool) -> None:
    """``replay --deliveries``: one line per record (its step, and its window in brackets)."""
    for d in deliveries:
        if as_json:
            sys.stdout.write(json_line(d) + "\n")
            continue
        # a coalesced catch-up delta carries versions baseVersion+1..version
        versions = f"v{d.version}" if d.base_version is None else f"v{d.base_version + 1}..{d.version}"
        window = f" [{literal(d.window)}]" if d.window else ""  # the record's window (one process's)
        # the record's strings are data, never console markup (an export file is not checked)
        _console.print(f"step {d.step}{window}: {literal(d.lane)} {versions} {d.mode} ({d.reason}) "
                       f"{literal(d.cache_key[:19])}… {literal(d.at or '')}", markup=False)


def _file_name(path: str) -> str:
    """``--file`` as a message names it ('-' is standard input)."""
    return "standard input" if path == "-" else path


def _show(args: argparse.Namespace, signals: list[tuple[str, Signal]], deliveries: list[Delivery],
          truth: DocumentState | None = None, retention: Retention | None = None, *, unchecked_macs: bool = False,
          compacted: int | None = None) -> int:
    """Print or verify; with ``truth`` (``--verify`` against Redis) the latest signal is also
    checked against the stored document (:func:`signals.streams.replay.check_document`).

    When the history does not start at version 1 (older signals were trimmed), the text
    output begins with a line saying so, ``--verify`` ends with it, and every ``--json``
    record carries ``firstRetainedVersion``; ``retention`` is the retention of this
    process's settings (``None`` for an export file)."""
    if args.deliveries:
        if not deliveries:  # as a lane with no signal: printing nothing reads as an empty log
            raise InvalidInputError(f"no deliveries in {_file_name(args.file)}" if args.file else
                                    f"thread {args.thread!r} has no delivery log (no agent loop has recorded a "
                                    "delivery on it, or check --namespace and the thread id)")
        _show_deliveries(deliveries, as_json=args.json)
        return 0
    if not signals:
        raise InvalidInputError(f"no signals in {_file_name(args.file)}" if args.file else
                                f"no signals retained for that lane ({NO_SIGNALS_HINT})")
    low, high = _bound(args.from_), _bound(args.to)
    if args.at_write is not None:  # a document version: the signal that shows it
        args.at = _signal_for_write(signals, args.at_write, getattr(args, "processed", None))
    trimmed = trimmed_before(signals)
    first_retained = signals[0][1].version
    if trimmed is not None and not args.json and not args.verify and args.at is None:
        print(_trimmed_note(signals[0][1], retention, compacted), flush=True)
    previous: str | None = None
    found_at: str | None = None
    found_write: int | None = None
    count = shown = 0
    last: Materialised | None = None
    document: str | None = None
    try:
        for item in _replay_items(signals, args.verify):
            count += 1
            last = item
            if args.at is not None:
                if item.signal.version == args.at:
                    found_at, found_write = item.value, item.signal.write_version
                continue
            if args.verify or not _within(item, low, high):
                previous = item.value
                continue
            shown += 1
            if args.json:
                sys.stdout.write(json_line({**signal_record(item), "firstRetainedVersion": first_retained}) + "\n")
            else:
                _print_item(item, previous)
            previous = item.value
        if args.verify and truth is not None and last is not None:
            document = check_document(last, truth)
    except VerifyError as e:
        print(f"wm-signals: verify failed: {e}", file=sys.stderr)
        return 1
    if (low or high) and not shown:  # as --at a version not retained: printing nothing reads as no history
        raise InvalidInputError(f"no retained signal in {_range(args)}: the retained history is "
                                f"{_span(signals)}")
    if args.at is not None:
        _print_at(args, signals, found_at, found_write)
    if args.verify:
        _verified(signals, count, unchecked_macs=unchecked_macs,
                  trimmed=None if trimmed is None else _trimmed_note(signals[0][1], retention, compacted),
                  document=document)
    return 0


def _print_at(args: argparse.Namespace, signals: list[tuple[str, Signal]], value: str | None,
              write: int | None) -> None:
    """``--at``/``--at-write``: the working memory at that signal version (``value``, ``None``
    when it is not retained), and the document version it is."""
    if value is None:
        oldest, latest = signals[0][1].version, signals[-1][1].version
        raise InvalidInputError(f"signal version {args.at} is not in the retained history (signal versions "
                                f"{oldest}..{latest}; for a document version, as 'write' prints it, use --at-write)")
    if args.json:
        sys.stdout.write(json_line({"version": args.at, "documentVersion": write, "value": value}) + "\n")
    else:
        sys.stdout.write(value + "\n")


def _signal_for_write(signals: list[tuple[str, Signal]], write: int, processed: int | None) -> int:
    """The signal version that shows document version ``write``: the last signal of a
    document version at most ``write``. When that is an earlier document version, a note on
    stderr says so: ``write`` was not signalled on its own (it changed nothing, or a later
    write was processed in the same batch, and then ``write`` itself was never shown).
    ``processed``: the document version the workers processed the lane up to (from Redis;
    ``None`` for an export file), which tells a write not processed yet from one that
    changed nothing."""
    shown = [(s.write_version, s.version) for _, s in signals if s.write_version is not None]
    if not shown:
        raise InvalidInputError("these signals carry no document version: use --at with a signal version")
    before = [(w, v) for w, v in shown if w <= write]
    if not before:
        oldest_write, oldest = shown[0]
        raise InvalidInputError(f"document version {write} is older than the retained history (its oldest signal, "
                                f"signal version {oldest}, shows document version {oldest_write})")
    shown_write, version = before[-1]
    if shown_write == shown[-1][0] and shown_write < write and (processed is None or processed < write):
        raise InvalidInputError(f"document version {write} has no signal yet: the latest, signal version {version}, "
                                f"shows document version {shown_write} (no worker has processed the write, or "
                                "check --namespace, --scope and the ids)")
    if shown_write != write:
        print(f"wm-signals: document version {write} has no signal of its own (it changed nothing, or a later "
              f"write was processed with it); this is document version {shown_write}, signal version {version}",
              file=sys.stderr)
    return version


def _range(args: argparse.Namespace) -> str:
    """``--from``/``--to`` as given, for a message."""
    return " ".join(f"{flag} {value}" for flag, value in (("--from", args.from_), ("--to", args.to)) if value)


def _span(signals: list[tuple[str, Signal]]) -> str:
    """The versions and emission times a list of signals covers, for a message."""
    first, last = signals[0][1], signals[-1][1]
    return (f"signal versions {first.version}..{last.version}, emitted {first.emitted_at or '?'} to "
            f"{last.emitted_at or '?'}")


def _verified(signals: list[tuple[str, Signal]], count: int, *, unchecked_macs: bool, trimmed: str | None,
              document: str | None) -> None:
    """What ``replay --verify`` says when the history checked out."""
    first = signals[0][1].version if signals else 0
    print(f"verified {count} signals (signal versions {first}..{first + count - 1}): chain and cacheKeys intact")
    if unchecked_macs:  # signed by the workers, but without the key nothing proves who wrote them
        print("the signals carry MACs, which were not checked: give the signing key "
              "(--signing-key-file or WM_SIGNALS_SIGNING_KEY) to check that workers wrote them")
    if trimmed is not None:
        print(trimmed)
    if document is not None:
        print(body(document))


def _check_replay_flags(args: argparse.Namespace) -> None:
    """Refuse flags that would be silently ignored together (exit 2 naming them)."""
    if args.deliveries:
        ignored = [flag for flag, given in (("--verify", args.verify), ("--at", args.at is not None),
                                            ("--at-write", args.at_write is not None),
                                            ("--from", args.from_ is not None), ("--to", args.to is not None)) if given]
        if ignored:
            raise InvalidInputError(f"{', '.join(ignored)}: not with --deliveries (it lists the delivery log)")
    elif args.at is not None and args.at_write is not None:
        raise InvalidInputError("--at takes a signal version, --at-write a document version: give one of them")
    elif (args.at is not None or args.at_write is not None) and (args.from_ is not None or args.to is not None):
        raise InvalidInputError("--at and --at-write print one version: not with --from or --to")
    elif args.verify and (args.from_ is not None or args.to is not None):  # it checks the whole history
        raise InvalidInputError("--verify checks every retained signal: not with --from or --to")
    low, high = _bound(args.from_), _bound(args.to)
    if low and high and low[0] == high[0] and low[1] > high[1]:  # type: ignore[operator]
        raise InvalidInputError(f"--from {args.from_} is after --to {args.to}: nothing to show")


def _cmd_replay(args: argparse.Namespace) -> int:
    _check_replay_flags(args)
    if args.file:
        if args.file == "-" and stdin_closed():
            raise InvalidInputError("--file -: standard input is closed (the command was started without one): "
                                    "nothing to read; pipe the export in, or give a file")
        try:  # '-': standard input (export -o - | replay --file -)
            signals, deliveries = (decode_export(sys.stdin.buffer.read(), source="stdin") if args.file == "-"
                                   else read_export(args.file))
        except OSError as e:
            raise InvalidInputError(f"--file {args.file}: {e.strerror or e}") from e
        return _show(args, signals, deliveries)
    if args.resource is None and args.thread is None:
        raise InvalidInputError("replay needs --resource (and/or --thread), or --file")
    settings = settings_from(args)

    signer = settings.signer()

    async def main() -> int:
        truth: DocumentState | None = None
        integrity: LogIntegrity | None = None
        async with open_client(settings) as redis:
            if args.verify and not args.deliveries:
                lane = lane_id(lane_scope(args), args.resource, args.thread)
                try:
                    signals, truth = await read_verifiable(redis, settings.keys(), lane, signer=signer)
                except VerifyError as e:
                    print(f"wm-signals: verify failed: {e}", file=sys.stderr)
                    return 1
                deliveries: list[Delivery] = []
                unchecked = signer is None and await _signed(redis, settings.keys().signals(lane))
            else:
                signals, deliveries = await load_lane(redis, settings.keys(), args, signer=signer)
                unchecked = False
                if args.deliveries:
                    log = DeliveryLog(redis, settings.keys(), key=signer.key if signer else None,
                                      verify_keys=signer.verify_keys if signer else ())
                    integrity = await log.integrity(args.thread)
            if args.at_write is not None:  # how far the workers processed the lane's writes
                lane = lane_id(lane_scope(args), args.resource, args.thread)
                args.processed = await processed_version(redis, settings.keys(), lane)
            compacted = None
            if signals:
                compacted = await compacted_version(redis, settings.keys(), signals[0][1].lane)
        if args.deliveries and not deliveries and integrity is not None and not integrity.complete:
            return _report_integrity(args.thread, integrity, empty=True)  # emptied, not never written
        code = _show(args, signals, deliveries, truth, Retention.of(settings.retain_signals, settings.retain_age),
                     unchecked_macs=unchecked, compacted=compacted)
        return _report_integrity(args.thread, integrity) or code

    return run_async(main)


def _report_integrity(thread: str, integrity: LogIntegrity | None, *, empty: bool = False) -> int:
    """After ``replay --deliveries``: say on standard error why the log is not whole (it is
    never shown as complete then; ``empty``: it holds no record); 2 when it shows a removal
    or an addition that is not its retention's (what it holds is not what the model saw)."""
    if integrity is None or integrity.complete:
        return 0
    verdict = "has been tampered with" if integrity.tampered else "is not complete"
    held = " (it holds no record)" if empty else ""
    print(f"wm-signals: the delivery log of thread {literal(thread)}{held} {verdict}:", file=sys.stderr)
    for problem in integrity.problems:
        print(f"  - {literal(problem)}", file=sys.stderr)
    return 2 if integrity.tampered else 0


async def _signed(redis: Any, stream: str) -> bool:
    """Whether any retained signal of the lane carries a MAC (workers signed it: see
    :mod:`signals.core.signing`); newest first, a page at a time (``--verify`` has just
    read them all)."""
    end = "+"
    while page := await redis.xrevrange(stream, max=end, count=500):
        if any(MAC_FIELD in (fields or {}) for _, fields in page):
            return True
        if len(page) < 500:
            return False
        end = "(" + page[-1][0]
    return False


def register(sub: Any) -> None:
    """Add replay to the CLI."""
    replay = sub.add_parser("replay", help="a lane's signals in order, rebuilt and (optionally) verified")
    add_common_args(replay)
    add_lane_args(replay)
    replay.add_argument("--file", help="replay an export file (no Redis; '-': standard input)")
    replay.add_argument("--at", type=int, metavar="VERSION",
                        help="print the working memory as of signal version VERSION (replay's 'vN')")
    replay.add_argument("--at-write", type=int, metavar="VERSION",
                        help="print the working memory as of document version VERSION (what 'write' prints; "
                             "replay shows it as 'document vN')")
    replay.add_argument("--verify", action="store_true",
                        help="check every entry, delta and cacheKey, and the latest signal against the stored "
                             "document; exit 1 on the first break")
    replay.add_argument("--deliveries", action="store_true", help="what the model saw at each step (needs --thread)")
    replay.add_argument("--from", dest="from_", metavar="VERSION|TIME",
                        help="first signal version or ISO time to show")
    replay.add_argument("--to", metavar="VERSION|TIME", help="last signal version or ISO time to show")
    replay.add_argument("--json", action="store_true", help="JSON lines")
    replay.set_defaults(handler=_cmd_replay)

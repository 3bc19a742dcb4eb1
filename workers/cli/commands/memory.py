"""The Redis-backed commands of ``wm-signals``: worker, write, get (and the wiring they share).

Every command takes ``--redis-url`` (default ``WM_SIGNALS_REDIS_URL``); with neither,
it refuses (exit 2) saying how to point at a Redis: a write into a server that stopped
with the command would be acknowledged and lost (docs/cli-defaults.md). Every command
opens its client with :func:`~workers.runtime.connect.open_client`, so the TLS flags
(``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-insecure-skip-verify``) apply to all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
from redis import exceptions as redis_exc

from signals.core.codec import decode_json
from signals.core.memory import WorkingMemoryConfig
from signals.errors import CorruptDataError, InvalidInputError, RedisUnavailableError
from signals.streams.keys import lane_id
from signals.streams.replay import Materialised, xrange_entries
from signals.streams.served import unserved_reason
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from signals.streams.urls import redact_url
from workers.cli.args import (
    add_common_args,
    add_durability_args,
    add_lane_args,
    int_flag,
    lane_scope,
    read_text,
    run_async,
    settings_from,
)
from workers.cli.display import body, json_line, print_signal
from workers.runtime.connect import open_client
from workers.runtime.settings import Settings
from workers.runtime.stdio import discard_stdout

__all__ = ("register",)

def _load_schema(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        schema = decode_json(Path(path).read_bytes())
    except Exception as e:
        raise InvalidInputError(f"--schema {path}: not a readable JSON Schema: {e}") from e
    if not isinstance(schema, dict):
        raise InvalidInputError(f"--schema {path}: a JSON Schema must be an object")
    return schema


def _cmd_write(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    sources = [x for x in (args.markdown, args.merge, args.file) if x is not None]
    if len(sources) != 1:
        raise InvalidInputError("give exactly one of --markdown, --merge, --file")
    if args.json_input and args.file is None:
        raise InvalidInputError("--json-input says what --file holds (inline JSON goes in --merge)")
    is_merge = args.merge is not None or (args.file is not None and (args.json_input or args.schema is not None))
    scope = lane_scope(args)
    config = WorkingMemoryConfig(scope=scope, schema=_load_schema(args.schema) if is_merge else None)
    text: str = read_text(args.file, "--file") if args.file is not None else sources[0]

    async def main() -> int:
        async with open_client(settings) as redis:
            store = WorkingMemoryStore(redis, keys=settings.keys(), config=config, durability=settings.durability())
            if args.resource is None and await store.thread_owner(args.thread) is None:
                raise InvalidInputError(f"thread {args.thread!r} does not exist: give --resource to create it")
            if is_merge:
                version = await store.merge(args.resource, text, thread_id=args.thread,
                                            if_version=args.if_version,
                                            idempotency_key=args.idempotency_key)
            else:
                version = await store.replace(args.resource, text, thread_id=args.thread,
                                              if_version=args.if_version,
                                              idempotency_key=args.idempotency_key)
        try:
            print(version, flush=True)
        except OSError:  # the reader of the output is gone; the document is stored, and the exit code says so
            discard_stdout()
        return 0

    return run_async(main)


def _cmd_get(args: argparse.Namespace) -> int:
    settings = settings_from(args)

    async def main() -> int:
        async with open_client(settings) as redis:
            store = WorkingMemoryStore(redis, keys=settings.keys(), read_only=True,
                                       config=WorkingMemoryConfig(scope=lane_scope(args)))
            doc = await store.get(args.resource, args.thread)
        if doc is None:
            print("wm-signals: no working memory stored for that lane (check --namespace, --scope and the ids)",
                  file=sys.stderr)
            return 1
        if args.json:
            print(json_line({"lane": doc.lane, "version": doc.version, "format": doc.format, "data": doc.data}))
        else:  # the text as stored into a pipe or file; on a terminal, no control sequence runs
            print(body(doc.data) if sys.stdout.isatty() else doc.data)
        return 0

    return run_async(main)


def _cmd_subscribe(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    scope = lane_scope(args)

    async def main() -> int:
        seen = 0
        unserved: str | None = None  # why no worker serves the lane, when none does
        subscribed = False  # the namespace check and the stream probe answered
        # --timeout bounds the whole command: connecting, the namespace check and the probe
        # included (a server that accepts and never answers held it for the client's own timeout)
        with anyio.move_on_after(args.timeout) as deadline:
            async with open_client(settings) as redis:
                lane = lane_id(scope, args.resource, args.thread)
                stream = settings.keys().signals(lane)
                try:  # XRANGE + + reads nothing from a stream or no key: a probe every reading role may run (not TYPE)
                    await xrange_entries(redis, stream, start="+", end="+")
                except CorruptDataError as e:  # the library's live reader waits for a repair; a command says so
                    raise CorruptDataError(f"{stream} is not a signal stream (a worker repairs it at the lane's "
                                           "next write)") from e
                subscribed = True
                unserved = await _unserved(redis, settings, lane)
                sub = Subscription(redis, settings.keys(), lane, block_ms=1000,
                                   signer=settings.signer())
                items = await sub.bootstrap(from_start=args.from_start)
                for item in items:
                    print_signal(item, as_json=args.json)
                    seen += 1
                    if args.count and seen >= args.count:
                        return 0
                if args.from_start or args.count:
                    print(f"wm-signals: {_waiting_note(items, args, sub.refused)}", file=sys.stderr, flush=True)
                generation = sub.generation
                async for item in sub:
                    generation = _note_restart(sub, generation, item)
                    print_signal(item, as_json=args.json)
                    seen += 1
                    if args.count and seen >= args.count:
                        return 0
        if deadline.cancelled_caught and not subscribed:  # never reached the lane: not an empty tail (exit 0)
            raise RedisUnavailableError(f"--timeout {args.timeout:g}s expired before {_server_named(settings)} "
                                        "answered (connecting, the namespace check and the first read count)")
        return _timed_out(args, lane_id(scope, args.resource, args.thread), seen, unserved,
                          expired=deadline.cancelled_caught)

    return run_async(main)


def _note_restart(sub: Subscription, generation: int, item: Materialised) -> int:
    """Say on stderr when the subscription restarted (the lane's history was lost and its
    versions start again, see :mod:`signals.streams.subscribe`); the generation now."""
    if sub.generation != generation:
        print(f"wm-signals: the lane's history was lost (FLUSHALL, a restart without persistence, its keys "
              f"deleted): following it again from signal version {item.signal.version}", file=sys.stderr, flush=True)
    return sub.generation


def _timed_out(args: argparse.Namespace, lane: str, seen: int, unserved: str | None, *, expired: bool) -> int:
    """The end of a ``subscribe --timeout`` that ran out: what it says on stderr, and the exit
    code (1 when ``--count`` signals did not arrive; an empty tail is exit 0, and said why)."""
    if args.count:
        why = unserved or "no more were retained or written"
        print(f"wm-signals: --timeout {args.timeout:g}s expired after {seen} of {args.count} signals ({why})",
              file=sys.stderr)
        return 1
    if expired and not seen:
        why = unserved or ("no signal of this lane was emitted in that time (nothing written to it yet? check "
                           "--namespace, --scope and the ids)")
        print(f"wm-signals: --timeout {args.timeout:g}s expired with no signal for lane {lane!r}: {why}",
              file=sys.stderr)
    return 0


async def _unserved(redis: Any, settings: Settings, lane: str) -> str | None:
    """Why no worker serves ``lane``, when none does (a user who may not look: ``None``)."""
    try:
        return await unserved_reason(redis, settings.keys(), lane)
    except redis_exc.ResponseError:
        return None


def _server_named(settings: Settings) -> str:
    """How a message names the server a command talks to (its URL without credentials)."""

    if settings.sentinel:
        return f"the master {settings.sentinel_master!r} of sentinels {settings.sentinel}"
    return f"Redis at {redact_url(settings.redis_url)}" if settings.redis_url else "Redis"


def _waiting_note(items: list[Any], args: argparse.Namespace, refused: int = 0) -> str:
    """What ``subscribe`` has delivered from the stream, said when it starts waiting for new writes."""
    versions = f" (signal versions {items[0].signal.version}..{items[-1].signal.version})" if items else ""
    if not items and refused:  # not "no signals": every one was refused (a wrong signing key, say)
        done = (f"delivered nothing: {refused} {'entry was' if refused == 1 else 'entries were'} refused (each "
                "logged with its reason; a signing key other than the workers'?)")
    elif not items:
        done = "the lane has no signals yet"
    elif args.from_start:
        done = f"delivered all {len(items)} retained signals{versions}, from the oldest retained snapshot"
    else:
        done = (f"delivered the {len(items)} signals of the current chain{versions}, from the latest snapshot "
                "(--from-start begins at the oldest retained one)")
    more = f"{args.count - len(items)} more" if args.count else "new signals"
    stop = "" if args.timeout is not None else "; --timeout SECONDS stops waiting"
    return f"{done}; waiting for {more} (new writes){stop}"


def _timeout(text: str) -> float:
    """``subscribe --timeout``: seconds, more than 0 and less than 10**9."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 10**9:
        raise argparse.ArgumentTypeError(f"--timeout takes a number of seconds above 0 and below 10**9, not {text!r}")
    return value




def register(sub: Any) -> None:
    """Add the Redis-backed commands to the CLI's sub-parsers."""
    subscribe = sub.add_parser("subscribe", help="live tail of a lane's signals as the model receives them")
    add_common_args(subscribe)
    add_lane_args(subscribe)
    subscribe.add_argument("--json", action="store_true", help="one signal per line as JSON")
    subscribe.add_argument("--from-start", action="store_true",
                           help="begin at the oldest retained snapshot (the workers keep at least retain_signals "
                                "signals per lane, trimmed at snapshot boundaries), not the latest one")
    subscribe.add_argument("--count", type=int_flag("--count", "a number of signals", 1, 10**9),
                           help="exit after N signals (a note on stderr says when the retained ones are delivered "
                                "and it waits for new writes)")
    subscribe.add_argument("--timeout", type=_timeout, metavar="SECONDS",
                           help="stop after SECONDS, connecting included: exit 1 if --count signals have not arrived "
                                "by then (or Redis never answered), else 0")
    subscribe.set_defaults(handler=_cmd_subscribe)

    write = sub.add_parser("write", help="write a lane's working memory; prints the lane's new document version")
    add_common_args(write)
    add_lane_args(write)
    write.add_argument("--markdown", help="the whole Markdown document (template mode)")
    write.add_argument("--merge", help="a JSON object to deep-merge (schema mode; null deletes)")
    write.add_argument("--file", metavar="PATH",
                       help="read the document from a UTF-8 file ('-': stdin): the whole Markdown document, "
                            "or with --json-input or --schema a JSON object to deep-merge")
    write.add_argument("--json-input", action="store_true",
                       help="--file holds a JSON object to deep-merge (schema mode; implied by --schema). "
                            "On get, subscribe and replay, --json is the output's format")
    write.add_argument("--schema", help="JSON Schema file to validate merged documents against")
    write.add_argument("--if-version", type=int, help="fail with exit 3 unless the lane is at this version")
    write.add_argument("--idempotency-key", help="a retried write with the same key applies once")
    add_durability_args(write)
    write.set_defaults(handler=_cmd_write)

    get = sub.add_parser("get", help="print a lane's stored working memory")
    add_common_args(get)
    add_lane_args(get)
    get.add_argument("--json", action="store_true", help="print lane, document version, format and data as JSON")
    get.set_defaults(handler=_cmd_get)

"""The Redis-backed commands of ``wm-signals``: worker, write, get (and the wiring they share).

Every command takes ``--redis-url`` (default ``WM_SIGNALS_REDIS_URL``); with neither,
an embedded redis-server is started for the run, announced on stderr and stopped at
exit (its data goes with it: use a URL to keep state between commands). Every command
opens its client with :func:`~workers.runtime.open_client`, so the TLS flags
(``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-insecure-skip-verify``) apply to all.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pydantic

from signals.core.codec import decode_json
from signals.core.memory import MAX_EVENT_CHARS, WorkingMemoryConfig
from signals.core.models import Scope
from signals.errors import CorruptDataError, InvalidInputError, RedisUnavailableError
from signals.streams.store import WorkingMemoryStore
from workers.connection import add_durability_args, add_sentinel_args
from workers.display import body, json_line
from workers.logging import configure_logging
from workers.runtime import open_client, resolve_redis, run
from workers.settings import Settings

__all__ = (
    "add_common_args", "add_lane_args", "lane_scope", "open_client", "read_text", "register", "resolve_redis",
    "run_async", "settings_from",
)

Handler = Callable[[argparse.Namespace], int]


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from the environment, overridden by the flags that were given."""
    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    overrides.update(extra)
    try:
        settings = Settings(**overrides)
    except pydantic.ValidationError as e:
        detail = "; ".join(_describe(err) for err in e.errors())
        raise InvalidInputError(f"invalid setting (flag or WM_SIGNALS_* variable): {detail}") from e
    if getattr(args, "command", None) != "worker":  # the worker configures logging from these settings first
        settings.log_deprecations()
    return settings


def _describe(error: Any) -> str:
    """One validation error as ``field: message`` (whole-settings checks have no field)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    field = ".".join(str(p) for p in error["loc"])
    return f"{field}: {message}" if field else message


#: The largest file (or standard input) a command reads: four bytes for each character
#: of the largest write event a worker takes, so no document a worker could signal is
#: refused here; past it, reading stops (a 2 GB file, or /dev/zero, was read whole first).
MAX_INPUT_BYTES = 4 * MAX_EVENT_CHARS


def read_text(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a file (``-``: stdin) of at most ``limit`` bytes; unreadable, larger
    or not UTF-8 is bad input naming the file (a larger one is not read past the limit)."""
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with Path(path).open("rb") as file:
                data = file.read(limit + 1)
    except OSError as e:
        raise InvalidInputError(f"{what} {name}: {e.strerror or e}") from e
    if len(data) > limit:
        raise InvalidInputError(f"{what} {name}: larger than {limit:,} bytes, more than any command takes "
                                "(a worker signals no document over 4 Mi characters): nothing was read past that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{what} {name}: not UTF-8 text (invalid byte 0x{data[e.start]:02x} "
                                f"at offset {e.start})") from e


def run_async(coro_fn: Callable[[], Awaitable[int]]) -> int:
    return run(coro_fn)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis-url", help="Redis URL (default: $WM_SIGNALS_REDIS_URL, else embedded)")
    parser.add_argument("--namespace", help="key prefix (default wm)")
    parser.add_argument("--partitions", type=int, help="partition count (default 16; fixed per deployment)")
    parser.add_argument("--cluster", action="store_true", default=None,
                        help="the Redis URL names a node of a Redis Cluster (default: $WM_SIGNALS_CLUSTER)")
    tls = parser.add_argument_group("TLS (rediss:// URLs; the server's certificate is always verified)")
    tls.add_argument("--tls-ca", dest="tls_ca_file", metavar="PEM",
                     help="CA certificate(s) the server's certificate must chain to "
                          "(default: $WM_SIGNALS_TLS_CA_FILE, else the system's trust store)")
    tls.add_argument("--tls-cert", dest="tls_cert_file", metavar="PEM",
                     help="client certificate (default: $WM_SIGNALS_TLS_CERT_FILE)")
    tls.add_argument("--tls-key", dest="tls_key_file", metavar="PEM",
                     help="client certificate's private key (default: $WM_SIGNALS_TLS_KEY_FILE)")
    tls.add_argument("--tls-insecure-skip-verify", dest="tls_insecure_skip_verify", action="store_true",
                     default=None, help="INSECURE: do not verify the server's certificate "
                                        "(default: $WM_SIGNALS_TLS_INSECURE_SKIP_VERIFY)")
    add_sentinel_args(parser)
    parser.add_argument("--signing-key-file", metavar="PATH",
                        help="file holding the key that authenticates signals "
                             "(default: $WM_SIGNALS_SIGNING_KEY_FILE or $WM_SIGNALS_SIGNING_KEY)")


def add_lane_args(parser: argparse.ArgumentParser) -> None:
    """``--resource``, ``--thread`` and ``--scope``: at least one id (see :func:`lane_scope`)."""
    parser.add_argument("--resource", help="resource (user) id; may be left out with --thread")
    parser.add_argument("--thread", help="thread (conversation) id")
    parser.add_argument("--scope", choices=("resource", "thread"),
                        help="which document: resource (default) or thread (default when only --thread)")


def lane_scope(args: argparse.Namespace) -> Scope:
    """The scope a command addresses: ``--scope``; else ``thread`` when only ``--thread``
    is given; else ``resource`` (Mastra's default).

    Raises:
        InvalidInputError: neither ``--resource`` nor ``--thread`` was given.
    """
    if args.resource is None and args.thread is None:
        raise InvalidInputError(f"{args.command} needs --resource, --thread or both")
    if args.scope is not None:
        return cast(Scope, args.scope)
    return "thread" if args.resource is None else "resource"


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


def _cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_format, settings.log_level)
    settings.log_deprecations()

    from workers.processes import run_check, run_worker_command  # noqa: PLC0415 - keeps CLI start-up light

    return run_check(settings) if args.check else run_worker_command(settings)


def _cmd_write(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    sources = [x for x in (args.markdown, args.merge, args.file, args.markdown_file) if x is not None]
    if len(sources) != 1:
        raise InvalidInputError("give exactly one of --markdown, --merge, --file")
    if args.json and args.file is None:
        raise InvalidInputError("--json says what --file holds (inline JSON goes in --merge)")
    is_merge = args.merge is not None or (args.file is not None and (args.json or args.schema is not None))
    scope = lane_scope(args)
    config = WorkingMemoryConfig(scope=scope, schema=_load_schema(args.schema) if is_merge else None)
    path, flag = (args.file, "--file") if args.file is not None else (args.markdown_file, "--markdown-file")
    text: str = read_text(path, flag) if path is not None else sources[0]

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
        print(version)
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


def _cmd_demo(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_format, "warning")
    if settings.sentinel:
        raise InvalidInputError("demo runs on one Redis URL (or an embedded server), not through --sentinel")

    async def main() -> int:
        from workers.demo import run_demo  # noqa: PLC0415 - keeps CLI start-up light

        async with resolve_redis(settings) as url:
            await run_demo(url, settings)
        return 0

    return run_async(main)


def _cmd_subscribe(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    scope = lane_scope(args)

    async def main() -> int:
        import anyio  # noqa: PLC0415

        from signals.core.signing import Signer  # noqa: PLC0415
        from signals.streams.keys import lane_id  # noqa: PLC0415
        from signals.streams.replay import xrange_entries  # noqa: PLC0415
        from signals.streams.subscribe import Subscription  # noqa: PLC0415
        from workers.display import print_signal  # noqa: PLC0415

        seen = 0
        subscribed = False  # the namespace check and the stream probe answered
        # --timeout bounds the whole command: connecting, the namespace check and the probe
        # included (a server that accepts and never answers held it for the client's own timeout)
        with anyio.move_on_after(args.timeout) as deadline:
            async with open_client(settings) as redis:
                key = settings.signing_key_bytes()
                lane = lane_id(scope, args.resource, args.thread)
                stream = settings.keys().signals(lane)
                try:  # XRANGE + + reads nothing from a stream or no key: a probe every reading role may run (not TYPE)
                    await xrange_entries(redis, stream, start="+", end="+")
                except CorruptDataError as e:  # the library's live reader waits for a repair; a command says so
                    raise CorruptDataError(f"{stream} is not a signal stream (a worker repairs it at the lane's "
                                           "next write)") from e
                subscribed = True
                sub = Subscription(redis, settings.keys(), lane, block_ms=1000,
                                   signer=Signer(key) if key else None)
                items = await sub.bootstrap(from_start=args.from_start)
                for item in items:
                    print_signal(item, as_json=args.json)
                    seen += 1
                    if args.count and seen >= args.count:
                        return 0
                if args.from_start or args.count:
                    print(f"wm-signals: {_waiting_note(items, args, sub.refused)}", file=sys.stderr, flush=True)
                async for item in sub:
                    print_signal(item, as_json=args.json)
                    seen += 1
                    if args.count and seen >= args.count:
                        return 0
        if deadline.cancelled_caught and not subscribed:  # never reached the lane: not an empty tail (exit 0)
            raise RedisUnavailableError(f"--timeout {args.timeout:g}s expired before {_server_named(settings)} "
                                        "answered (connecting, the namespace check and the first read count)")
        if args.count:
            print(f"wm-signals: --timeout {args.timeout:g}s expired after {seen} of {args.count} signals "
                  "(no more were retained or written)", file=sys.stderr)
            return 1
        return 0

    return run_async(main)


def _server_named(settings: Settings) -> str:
    """How a message names the server a command talks to (its URL without credentials)."""
    from signals.streams.client import redact_url  # noqa: PLC0415

    if settings.sentinel:
        return f"the master {settings.sentinel_master!r} of sentinels {settings.sentinel}"
    return f"Redis at {redact_url(settings.redis_url)}" if settings.redis_url else "the embedded server"


def _waiting_note(items: list[Any], args: argparse.Namespace, refused: int = 0) -> str:
    """What ``subscribe`` has delivered from the stream, said when it starts waiting for new writes."""
    versions = f" (versions {items[0].signal.version}..{items[-1].signal.version})" if items else ""
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


def _count(text: str) -> int:
    """``subscribe --count``: a number of signals, at least 1 (0 tailed forever, -1 printed one)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--count takes a number of signals of at least 1, not {text!r}")
    return value


def register(sub: Any) -> None:
    """Add the Redis-backed commands to the CLI's sub-parsers."""
    worker = sub.add_parser("worker", help="run a worker process (consumer group over every partition)")
    add_common_args(worker)
    worker.add_argument("--policy", choices=("compact", "mastra"), help="signal policy (default compact)")
    worker.add_argument("--snapshot-every", type=int, help="every K-th signal of a lane is a snapshot")
    worker.add_argument("--retain-signals", type=int,
                        help="signals kept per lane at least (default 30; trimmed at snapshot boundaries)")
    worker.add_argument("--retain-age", metavar="DURATION",
                        help="also keep every signal younger than this (90s, 12h, 7d, 2w; default: none)")
    worker.add_argument("--keep-snapshots", type=int,
                        help="deprecated: N snapshot chains, taken as --retain-signals N x snapshot-every")
    worker.add_argument("--max-diff-edits", type=int,
                        help="line edits a delta may take before a snapshot is sent instead (default 300)")
    worker.add_argument("--token-counter", choices=("bytes4", "cl100k"),
                        help="tokens for the compact policy's delta-or-snapshot test (default bytes4; "
                             "cl100k needs the tokens extra)")
    worker.add_argument("--batch", type=int, help="entries per read")
    worker.add_argument("--consumer-name", help="consumer name (default host-pid)")
    worker.add_argument("--grace-s", type=float, help="seconds in-flight work gets on shutdown")
    worker.add_argument("--metrics-port", type=int, metavar="N",
                        help="serve /metrics, /livez, /readyz on this port (default: $WM_SIGNALS_METRICS_PORT, off)")
    worker.add_argument("--metrics-addr", metavar="ADDR",
                        help="address to serve them on (default: $WM_SIGNALS_METRICS_ADDR, else 127.0.0.1)")
    worker.add_argument("--processes", metavar="N|auto",
                        help="consumer processes under one supervisor, auto: one per core "
                             "(default: $WM_SIGNALS_PROCESSES, else 1)")
    worker.add_argument("--check", action="store_true",
                        help="probe: exit 0 when the worker's heartbeat (--consumer-name, else this host's) "
                             "is fresh in Redis, else 1")
    worker.set_defaults(handler=_cmd_worker)

    demo = sub.add_parser("demo", help="run the whole pipeline, scripted, and print what the model sees")
    add_common_args(demo)
    demo.set_defaults(handler=_cmd_demo)

    subscribe = sub.add_parser("subscribe", help="live tail of a lane's signals as the model receives them")
    add_common_args(subscribe)
    add_lane_args(subscribe)
    subscribe.add_argument("--json", action="store_true", help="one signal per line as JSON")
    subscribe.add_argument("--from-start", action="store_true",
                           help="begin at the oldest retained snapshot (the workers keep at least retain_signals "
                                "signals per lane, trimmed at snapshot boundaries), not the latest one")
    subscribe.add_argument("--count", type=_count,
                           help="exit after N signals (a note on stderr says when the retained ones are delivered "
                                "and it waits for new writes)")
    subscribe.add_argument("--timeout", type=_timeout, metavar="SECONDS",
                           help="stop after SECONDS, connecting included: exit 1 if --count signals have not arrived "
                                "by then (or Redis never answered), else 0")
    subscribe.set_defaults(handler=_cmd_subscribe)

    write = sub.add_parser("write", help="write a lane's working memory; prints the new version")
    add_common_args(write)
    add_lane_args(write)
    write.add_argument("--markdown", help="the whole Markdown document (template mode)")
    write.add_argument("--merge", help="a JSON object to deep-merge (schema mode; null deletes)")
    write.add_argument("--file", metavar="PATH",
                       help="read the document from a UTF-8 file ('-': stdin): the whole Markdown document, "
                            "or with --json or --schema a JSON object to deep-merge")
    write.add_argument("--markdown-file", metavar="PATH", help="same as --file, Markdown only (older name)")
    write.add_argument("--json", action="store_true",
                       help="--file holds a JSON object to deep-merge (schema mode; implied by --schema)")
    write.add_argument("--schema", help="JSON Schema file to validate merged documents against")
    write.add_argument("--if-version", type=int, help="fail with exit 3 unless the lane is at this version")
    write.add_argument("--idempotency-key", help="a retried write with the same key applies once")
    add_durability_args(write)
    write.set_defaults(handler=_cmd_write)

    get = sub.add_parser("get", help="print a lane's stored working memory")
    add_common_args(get)
    add_lane_args(get)
    get.add_argument("--json", action="store_true", help="print lane, version, format and data as JSON")
    get.set_defaults(handler=_cmd_get)

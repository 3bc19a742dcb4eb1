"""The flags every command shares, and how a command turns them into :class:`Settings`.

Every Redis command takes ``--redis-url`` (default ``WM_SIGNALS_REDIS_URL``), the TLS flags
(``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-insecure-skip-verify``), the Sentinel
flags and ``--signing-key-file``; a flag given wins over its variable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pydantic

from signals.core.memory import MAX_EVENT_CHARS
from signals.core.models import Scope
from signals.errors import InvalidInputError
from workers.runtime.connect import run
from workers.runtime.settings import Settings
from workers.runtime.stdio import stdin_closed

__all__ = (
    "MAX_INPUT_BYTES", "Handler", "add_common_args", "add_durability_args", "add_lane_args", "add_sentinel_args",
    "int_flag", "lane_scope", "read_text", "run_async", "settings_from",
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
        settings.warn_unknown_variables()
    return settings


def _describe(error: Any) -> str:
    """One validation error as ``field: message`` (whole-settings checks have no field)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    field = ".".join(str(p) for p in error["loc"])
    return f"{field}: {message}" if field else message


#: The largest file (or standard input) a command reads: four bytes for each character
#: of the largest write event a worker takes, so no document a worker could signal is
#: refused here; past it, reading stops (a 2 GB file, or /dev/zero, is never read whole).
MAX_INPUT_BYTES = 4 * MAX_EVENT_CHARS


def read_text(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a file (``-``: stdin) of at most ``limit`` bytes; unreadable, larger
    or not UTF-8 is bad input naming the file (a larger one is not read past the limit)."""
    name = "stdin" if path == "-" else path
    if path == "-" and stdin_closed():
        raise InvalidInputError(f"{what} -: standard input is closed (the command was started without one): "
                                "nothing to read; pipe the text in, or give a file")
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
    parser.add_argument("--redis-url", help="Redis URL (default: $WM_SIGNALS_REDIS_URL; with neither, only demo "
                                            "runs, on a throwaway server)")
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
    parser.add_argument("--verify-keys-file", metavar="PATH",
                        help="file holding further keys whose signals are accepted during a key rotation, one per "
                             "line (default: $WM_SIGNALS_VERIFY_KEYS_FILE or $WM_SIGNALS_VERIFY_KEYS, a JSON list)")


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


def add_sentinel_args(parser: argparse.ArgumentParser) -> None:
    """The Sentinel flags (every Redis command)."""
    group = parser.add_argument_group("Redis Sentinel (the sentinels name the master; --redis-url then carries "
                                      "only credentials, database and scheme: redis://USER:PASSWORD@/0)")
    group.add_argument("--sentinel", metavar="HOST:PORT[,HOST:PORT...]",
                       help="sentinel addresses (default: $WM_SIGNALS_SENTINEL)")
    group.add_argument("--sentinel-master", metavar="NAME",
                       help="the monitored master's service name (default: $WM_SIGNALS_SENTINEL_MASTER)")
    group.add_argument("--sentinel-username", metavar="USER",
                       help="ACL user on the sentinels (default: $WM_SIGNALS_SENTINEL_USERNAME)")
    group.add_argument("--sentinel-password", metavar="SECRET",
                       help="password on the sentinels (default: $WM_SIGNALS_SENTINEL_PASSWORD; prefer it)")


def add_durability_args(parser: argparse.ArgumentParser) -> None:
    """The durable-write flags (``write``)."""
    parser.add_argument("--min-replicas", dest="write_min_replicas", type=int, metavar="N",
                        help="acknowledge the write only once N replicas have it (Redis WAIT; "
                             "default: $WM_SIGNALS_WRITE_MIN_REPLICAS, else 0: the master's word)")
    parser.add_argument("--replica-timeout-ms", dest="write_replica_timeout_ms", type=int, metavar="MS",
                        help="how long to wait for them (default: $WM_SIGNALS_WRITE_REPLICA_TIMEOUT_MS, else 1000)")


def int_flag(flag: str, what: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type for ``flag``: a whole number from ``low`` to ``high`` (ASCII digits
    only), refused as ``--FLAG takes WHAT (LOW to HIGH), not 'TEXT'``."""
    def parse(text: str) -> int:
        digits = text[1:] if text.startswith("-") else text
        value = int(text) if digits.isascii() and digits.isdigit() and len(digits) <= 19 else None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{flag} takes {what} ({low:,} to {high:,}), not {text[:40]!r}")
        return value
    return parse

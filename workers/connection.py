"""High-availability connection options of the CLI: Redis Sentinel, and durable writes.

``--sentinel HOST:PORT[,HOST:PORT...] --sentinel-master NAME`` (settings ``sentinel``,
``sentinel_master``; ``WM_SIGNALS_SENTINEL``, ``WM_SIGNALS_SENTINEL_MASTER``) connect
every Redis command to the current master of a Sentinel service instead of a fixed
address. The sentinels authenticate with ``--sentinel-username``/``--sentinel-password``
(``WM_SIGNALS_SENTINEL_PASSWORD``: prefer the variable, a flag shows in ``ps``). The data
nodes keep the usual mechanism: ``--redis-url`` then carries only their credentials,
database and scheme, with no host (``redis://wm-worker:SECRET@/0``; ``rediss://...`` for
TLS, with the ``--tls-*`` settings applying to the data nodes and the sentinels alike). A
URL naming a host, ``--cluster``, or a ``unix://`` URL next to ``--sentinel`` is refused
(exit 2): the sentinels say where the master is, and a second address would be ignored
or contradict them.

``write --min-replicas N [--replica-timeout-ms MS]`` (``WM_SIGNALS_WRITE_MIN_REPLICAS``,
``WM_SIGNALS_WRITE_REPLICA_TIMEOUT_MS``, default 1000) acknowledges a write only once N
replicas have it (see :mod:`signals.streams.durability`); fewer is exit 1.
"""

from __future__ import annotations

import argparse
from urllib.parse import parse_qs, unquote, urlsplit

from signals.errors import InvalidInputError
from signals.streams.client import TLSOptions, redact_url
from signals.streams.sentinel import SentinelClient, connect_sentinel
from workers.settings import Settings

__all__ = ("add_durability_args", "add_sentinel_args", "open_sentinel")


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


def open_sentinel(settings: Settings, max_reply_bytes: int | None = None) -> tuple[SentinelClient, str]:
    """The client on the Sentinel service of ``settings``, and how to name it in messages.

    Raises:
        InvalidInputError: a URL that names a host, is not ``redis://``/``rediss://``, or
            carries options other than ``db``; a malformed sentinel address.
    """
    username, password, db, scheme = _node_credentials(settings.redis_url)
    tls = settings.tls()
    if scheme == "rediss" and tls is None:
        tls = TLSOptions()
    secret = settings.sentinel_password
    client = connect_sentinel(settings.sentinel or "", settings.sentinel_master or "", username=username,
                              password=password, db=db, tls=tls, sentinel_username=settings.sentinel_username,
                              sentinel_password=None if secret is None else secret.get_secret_value(),
                              max_reply_bytes=max_reply_bytes)
    return client, f"the master {settings.sentinel_master!r} of sentinels {settings.sentinel}"


def _node_credentials(url: str | None) -> tuple[str | None, str | None, int, str]:
    """``(username, password, db, scheme)`` from a host-less URL (``None``: no credentials)."""
    if not url:
        return None, None, 0, "redis"
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
        host = parts.hostname
    except ValueError as e:
        raise InvalidInputError(f"Redis URL {shown!r} is malformed: {e}") from e
    if parts.scheme not in ("redis", "rediss") or "://" not in url:
        raise InvalidInputError(f"with --sentinel the Redis URL must be redis:// or rediss://, not {shown!r}")
    if host or parts.port is not None:
        raise InvalidInputError(f"with --sentinel the Redis URL must not name a host ({shown!r}): the sentinels "
                                "name the master; give only credentials, database and scheme, e.g. "
                                "redis://USER:PASSWORD@/0")
    if set(query) - {"db"}:
        raise InvalidInputError(f"with --sentinel the Redis URL may carry only the db option, not "
                                f"{', '.join(sorted(set(query) - {'db'}))}")
    db_text = query["db"][0] if "db" in query else (parts.path.strip("/") or "0")
    if not db_text.isdigit() or not db_text.isascii():
        raise InvalidInputError(f"Redis URL {shown!r}: the database {db_text!r} is not a non-negative integer")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    return username, password, int(db_text), parts.scheme

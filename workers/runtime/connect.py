"""How a process runs its async code, and the one way it opens its Redis client.

anyio on asyncio, on uvloop when installed; :func:`open_client` is the one place a
command, the demo or a worker process turns its settings into a client (URL, TLS,
Sentinel, cluster; error translation; a shielded close). With no Redis configured, every
command but ``demo`` refuses (exit 2, :data:`NO_REDIS`): see docs/cli-defaults.md.

Sentinel:

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

import gc
import importlib.util
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import structlog
from redis import exceptions as redis_exc

from signals.errors import ConfigurationError, InvalidInputError, RedisBusyError, RedisUnavailableError
from signals.streams.client import Client, connect
from signals.streams.namespace import check_namespace
from signals.streams.sentinel import SentinelClient, connect_sentinel
from signals.streams.urls import TLSOptions, redact_url
from workers.runtime.embedded import RedisServer
from workers.runtime.settings import Settings

__all__ = ("CLOSE_TIMEOUT_S", "NO_REDIS", "open_client", "open_sentinel", "require_redis", "resolve_redis", "run",
           "tune_gc")

T = TypeVar("T")
_UVLOOP = importlib.util.find_spec("uvloop") is not None
#: How long closing a client may take at the end of a command (it runs shielded from cancellation).
CLOSE_TIMEOUT_S = 2.0
log = structlog.get_logger(__name__)


def run(fn: Callable[..., Awaitable[T]], *args: object) -> T:
    """``anyio.run`` on uvloop when it is installed (a dependency on Linux and macOS).

    uvloop's event loop cuts the per-command client overhead of redis.asyncio: measured
    here, one process's write rate is about 20,000 writes/s on it, 16,500 without. redis.asyncio
    is asyncio-only, so the backend is always asyncio.
    """
    return anyio.run(fn, *args, backend_options={"use_uvloop": _UVLOOP})


def tune_gc() -> None:
    """Garbage-collector settings for a long-running, latency-sensitive process.

    Freezes what start-up allocated (modules, settings: never garbage) so collections
    stop scanning it, and makes collections rarer: the worker's hot loop allocates many
    short-lived, acyclic objects, which reference counting frees, and each collection is
    a pause that lands in some signal's latency. Measured with the latency benchmark at
    10,000 writes/s: p99 about 9-10 ms with the default collector, about 6-7 ms with it off in
    the worker and the writer. Reference cycles are still collected, just less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


#: What a command with no Redis configured says (exit 2): see docs/cli-defaults.md.
NO_REDIS = ("no Redis configured: set WM_SIGNALS_REDIS_URL or pass --redis-url redis://HOST:PORT/0 (a Redis of your "
            "own keeps what the commands write); to try the whole pipeline on a throwaway server, run "
            "'wm-signals demo' (or 'make demo')")


def require_redis(settings: Settings) -> None:
    """Refuse a command that talks to Redis when none is configured (no URL, no Sentinel).

    Only ``demo`` starts a throwaway embedded server: any other command writing into a
    server that stops when the command ends would acknowledge what is then lost (see
    docs/cli-defaults.md).

    Raises:
        ConfigurationError: no Redis URL and no Sentinel (exit 2).
    """
    if not settings.redis_url and not settings.sentinel:
        raise ConfigurationError(NO_REDIS)


@asynccontextmanager
async def resolve_redis(settings: Settings, *, embedded: bool = False) -> AsyncIterator[str]:
    """Yield the Redis URL to use; with none configured, an embedded server's started for
    the block when ``embedded`` (the demo), else :class:`~signals.errors.ConfigurationError`
    (see :func:`require_redis`)."""
    if settings.redis_url:
        yield settings.redis_url
        return
    if not embedded:
        require_redis(settings)
    server = await anyio.to_thread.run_sync(lambda: RedisServer().start())
    print(f"wm-signals: no Redis URL configured: started an embedded redis-server at {server.url} "  # noqa: T201
          "(it stops at exit; set WM_SIGNALS_REDIS_URL or --redis-url to use your own)",
          file=sys.stderr)
    try:
        yield server.url
    finally:
        await anyio.to_thread.run_sync(server.stop)


@asynccontextmanager
async def _connect(settings: Settings, max_reply_bytes: int | None) -> AsyncIterator[tuple[Client, str]]:
    """The client for ``settings`` and how messages name the server (Sentinel: the
    service; else the URL)."""
    if settings.sentinel:

        yield open_sentinel(settings, max_reply_bytes)
        return
    async with resolve_redis(settings) as url:
        client = connect(url, cluster=settings.cluster, tls=settings.tls(), max_reply_bytes=max_reply_bytes)
        yield client, redact_url(url)


@asynccontextmanager
async def open_client(settings: Settings, *, check: bool = True, bounded: bool = False) -> AsyncIterator[Client]:
    """The command's Redis client, built from ``settings``, closed (shielded) at exit.

    With ``check`` (a CLI command), the namespace's stored partition count is checked
    first, without recording one: a command started with another count would read the
    wrong partitions and report nothing there (:class:`~signals.errors.NamespaceMismatchError`,
    exit 2). Worker processes check it themselves, backing off while Redis is away.

    Refuses when no URL (and no Sentinel) is configured (:func:`require_redis`); through
    Sentinel with ``settings.sentinel`` (:func:`open_sentinel`); applies the TLS settings
    (warning when verification is off); a malformed URL or unusable TLS file is
    :class:`~signals.errors.InvalidInputError` (from :func:`signals.streams.client.connect`).
    Inside the block, an unreachable Redis becomes
    :class:`~signals.errors.RedisUnavailableError`, a refused login (wrong user or
    password) :class:`~signals.errors.InvalidInputError`, and a Redis refusing work for a while
    (out of memory, loading, read-only) :class:`~signals.errors.RedisBusyError`, each one
    line for the CLI. With ``bounded`` (a worker), one reply may bring at most
    ``settings.max_reply_bytes`` into the process (see :func:`signals.streams.client.connect`).
    """
    async with _connect(settings, settings.max_reply_bytes if bounded else None) as (client, where):
        tls = settings.tls()
        if tls is not None and tls.insecure_skip_verify:
            log.warning("tls.verification_off", url=where,
                        detail="the server's certificate is NOT verified: anyone on the network path can "
                               "impersonate Redis (tls_insecure_skip_verify)")
        try:
            if check:
                await check_namespace(client, settings.keys(), record=False)
            yield client
        except RedisBusyError:
            raise
        except (redis_exc.OutOfMemoryError, redis_exc.BusyLoadingError, redis_exc.ReadOnlyError) as e:
            raise RedisBusyError(f"Redis refused the command for now: {e}") from e  # a Redis Cluster's node
        except redis_exc.AuthenticationError as e:  # reached, and refused: the credentials are the setting at fault
            raise InvalidInputError(f"Redis at {where} refused the login: {e} (check the URL's user and "
                                    "password)") from e
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"cannot reach Redis at {where}: {e}") from e
        finally:
            with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
                await client.aclose()


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

"""Small shared helpers: timestamps, Lua script loading, Redis connections.

:func:`connect` is where the library meets redis-py, so it is where redis-py's failure
modes become this library's: a URL redis-py would refuse (or a TLS option that would
silently weaken verification) is :class:`~signals.errors.InvalidInputError` before any
connection, TLS files are checked up front and named when unusable, and the replies of a
Redis that refuses work for a while (out of memory, loading, read-only replica) raise
errors that are both the redis-py class and :class:`~signals.errors.RedisBusyError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import hiredis
from redis import exceptions as redis_exc
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.commands.core import AsyncScript

from signals.core._time import now_iso
from signals.errors import CorruptDataError, InvalidInputError, RedisBusyError

__all__ = (
    "RESP_OPTIONS", "SERVER_CONDITIONS", "Client", "Entry", "RedisLoadingError", "RedisOutOfMemoryError",
    "RedisReadOnlyError", "RedisScriptBusyError", "ReplyTooLargeError", "TLSOptions", "acl_refused", "connect",
    "ids_exhausted", "lindex", "lua", "now_iso", "queue_script", "redact_url", "relayed_error", "smembers",
    "wrap_connection_class", "xrange", "xread",
)

Client = Redis | RedisCluster
"""A redis.asyncio client: one server (or a replicated primary), or a Redis Cluster."""


@cache
def lua(name: str) -> str:
    """The source of a bundled Lua script."""
    return resources.files("signals.streams").joinpath("lua", name + ".lua").read_text("utf-8")


@dataclass(frozen=True, slots=True)
class TLSOptions:
    """TLS for a ``rediss://`` connection (see :func:`connect`); the only way to set it.

    The server's certificate is always verified (chain and host name) unless
    ``insecure_skip_verify`` is set; URL query options such as ``ssl_cert_reqs=none`` are
    refused, so verification cannot be turned off by a URL copied from somewhere.

    Attributes:
        ca_file: PEM file of the CA certificate(s) the server's certificate must chain
            to; ``None``: the system's trust store.
        cert_file: PEM client certificate, for servers that authenticate clients
            (``tls-auth-clients yes``).
        key_file: PEM private key of ``cert_file`` (unencrypted); ``None``: the key is in
            ``cert_file``.
        insecure_skip_verify: do not verify the server at all. Anyone on the network path
            can then impersonate Redis and read or forge every signal: for a test bench
            only.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False

    def check(self) -> None:
        """Refuse missing, unreadable or malformed files, naming the file.

        Raises:
            InvalidInputError: a file cannot be read, the CA file holds no certificate,
                or the client certificate and key do not load as a pair.
        """
        if self.key_file and not self.cert_file:
            raise InvalidInputError("a TLS client key needs its client certificate (cert_file)")
        for what, path in (("CA file", self.ca_file), ("client certificate", self.cert_file),
                           ("client key", self.key_file)):
            if path is not None:
                _check_readable(path, f"TLS {what}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.ca_file:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except (ssl.SSLError, ValueError) as e:
                raise InvalidInputError(f"TLS CA file {self.ca_file}: no PEM certificate in it ({e})") from e
        if self.cert_file:
            try:  # an empty password: an encrypted key fails here instead of prompting on the tty
                context.load_cert_chain(self.cert_file, self.key_file, password=b"")
            except (ssl.SSLError, ValueError) as e:
                names = self.cert_file + (f" and key {self.key_file}" if self.key_file else "")
                raise InvalidInputError(f"TLS client certificate {names}: not a PEM certificate with its "
                                        f"unencrypted private key ({e})") from e

    def redis_options(self) -> dict[str, object]:
        """The redis-py ``ssl_*`` keyword arguments."""
        options: dict[str, object] = {"ssl_ca_certs": self.ca_file, "ssl_certfile": self.cert_file,
                                      "ssl_keyfile": self.key_file}
        if self.insecure_skip_verify:
            options.update(ssl_cert_reqs="none", ssl_check_hostname=False)
        else:
            options.update(ssl_cert_reqs="required", ssl_check_hostname=True)
        return options


def _check_readable(path: str, what: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise InvalidInputError(f"{what} {path}: {e.strerror or e}") from e


_SCHEMES = ("redis", "rediss", "unix")
#: URL query options that would override (or weaken) the TLS options, and what to use instead.
_SKIP_VERIFY = "the tls_insecure_skip_verify setting (--tls-insecure-skip-verify; TLSOptions.insecure_skip_verify)"
_TLS_SETTING = {
    "ssl_cert_reqs": _SKIP_VERIFY,
    "ssl_check_hostname": _SKIP_VERIFY,
    "ssl_exclude_verify_flags": _SKIP_VERIFY,
    "ssl_ca_certs": "the tls_ca_file setting (--tls-ca; TLSOptions.ca_file)",
    "ssl_ca_path": "the tls_ca_file setting (--tls-ca; TLSOptions.ca_file)",
    "ssl_ca_data": "the tls_ca_file setting (--tls-ca; TLSOptions.ca_file)",
    "ssl_certfile": "the tls_cert_file setting (--tls-cert; TLSOptions.cert_file)",
    "ssl_keyfile": "the tls_key_file setting (--tls-key; TLSOptions.key_file)",
}


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return parts._replace(netloc=f"{user}:***@{netloc[1]}").geturl()
    except ValueError:
        return "<unparsable URL>"


#: The URL query options a Redis URL may carry (redis-py's, but TLS's and those that would
#: change the replies this package reads: an unknown one became a keyword argument of every
#: connection, and ``protocol=3`` reshaped the replies the worker parses).
_URL_OPTIONS = frozenset({"db", "socket_timeout", "socket_connect_timeout", "socket_read_size", "socket_keepalive",
                          "retry_on_timeout", "max_connections", "health_check_interval", "timeout", "protocol",
                          "client_name"})


def _check_url(url: object, tls: TLSOptions | None) -> str:
    """Refuse a URL redis-py would refuse at its first command, or one that overrides TLS."""
    if not isinstance(url, str):
        raise InvalidInputError(f"the Redis URL must be a string, not {type(url).__name__}")
    try:
        url.encode("utf-8")
        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
    except (UnicodeEncodeError, ValueError) as e:
        raise InvalidInputError(f"Redis URL {redact_url(url)!r} is malformed: {e}") from e
    shown = redact_url(url)
    if "://" not in url or parts.scheme not in _SCHEMES:
        scheme = f"scheme {parts.scheme!r}" if "://" in url else "no scheme"
        raise InvalidInputError(f"Redis URL {shown!r} has {scheme}: it must start with redis://, rediss:// "
                                "(TLS) or unix://")
    for name, values in query.items():
        if name.lower().startswith("ssl"):
            instead = _TLS_SETTING.get(name.lower(), "the tls_* settings (TLSOptions)")
            raise InvalidInputError(f"Redis URL option {name!r} is refused: TLS is configured only through the "
                                    f"TLS settings, which it would silently override; use {instead} instead")
        if name == "protocol" and values != ["2"]:
            raise InvalidInputError(f"Redis URL option protocol={','.join(values)[:20]!r} is refused: wm-signals "
                                    "speaks RESP2 (protocol=2), whose replies it reads; leave the option out")
        if name not in _URL_OPTIONS:
            raise InvalidInputError(f"Redis URL option {name[:40]!r} is not one wm-signals passes on (redis-py "
                                    f"would take it as a connection argument); the options are "
                                    f"{', '.join(sorted(_URL_OPTIONS))}")
    if tls is not None and parts.scheme != "rediss":
        raise InvalidInputError(f"TLS settings need a rediss:// Redis URL, not {parts.scheme}://")
    return parts.scheme


def connect(url: str, *, cluster: bool = False, tls: TLSOptions | None = None, max_reply_bytes: int | None = None,
            **kwargs: object) -> Client:
    """A redis.asyncio client for ``url`` speaking RESP2 with ``str`` replies.

    RESP2 is pinned: redis-py 8 defaults to RESP3 but still shapes some replies as RESP2,
    and every reply this package parses is written against RESP2. Replies that are not
    UTF-8 decode with ``surrogateescape`` instead of raising. With ``cluster`` the
    URL names any node of a Redis Cluster; the client discovers the rest. Its socket
    timeout is off, as for a single server, since subscriptions block for seconds.

    ``rediss://`` URLs speak TLS and always verify the server (against ``tls.ca_file``,
    else the system's trust store) unless ``tls.insecure_skip_verify``; ``tls`` needs a
    ``rediss://`` URL, and TLS cannot be set through ``ssl_*`` URL options or keyword
    arguments. On one server, a reply refusing work for a while (``OOM``, ``LOADING``,
    ``READONLY``) raises an error that is both redis-py's class (``OutOfMemoryError``,
    ``BusyLoadingError``, ``ReadOnlyError``) and :class:`~signals.errors.RedisBusyError`.
    On one server the client opens up to ``max_connections`` (100) connections, and a
    command finding them all in use waits for one (:class:`WaitsForConnections`, up to
    ``pool_wait_s``) rather than failing.

    ``max_reply_bytes`` bounds what one round trip's replies (one command's, or a whole
    pipeline's together) may bring into the process on one server (and through Sentinel):
    past it, the read stops, the connection is closed and
    :class:`ReplyTooLargeError` is raised, so that what a writer put in Redis (a 100 MB
    stream entry, a document field of any size) costs this process at most that much
    memory, never a ``MemoryError``. ``None`` (the default): no bound. It needs the
    hiredis parser (a dependency); a Redis Cluster client is not bounded.

    Raises:
        InvalidInputError: a malformed URL or unknown scheme, an ``ssl_*`` URL option or
            keyword, TLS options on a URL that is not ``rediss://``, an unusable TLS file.
    """
    _check_url(url, tls)
    refused = sorted(k for k in kwargs if k.startswith("ssl"))
    if refused:
        raise InvalidInputError(f"pass TLS options as tls=TLSOptions(...), not {', '.join(refused)}")
    options: dict[str, object] = dict(RESP_OPTIONS)
    if tls is not None:
        tls.check()
        options.update(tls.redis_options())
    options.update(kwargs)
    try:
        if cluster:
            options["socket_timeout"] = None
            return RedisCluster.from_url(url, **options)
        options.setdefault("max_connections", MAX_CONNECTIONS)
        pool = WaitsForConnections.from_url(url, **options)
    except ValueError as e:
        raise InvalidInputError(f"Redis URL {redact_url(url)!r}: {e}") from e
    pool.connection_class = wrap_connection_class(pool, max_reply_bytes)
    client = Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # aclose() closes the pool too, as with Redis.from_url
    return client


#: Connections one client opens at most (``connect(url, max_connections=...)``).
MAX_CONNECTIONS = 100
#: How long a command waits for a free connection when all are in use
#: (``connect(url, pool_wait_s=...)``).
POOL_WAIT_S = 20.0


class WaitsForConnections(ConnectionPool):
    """A redis-py connection pool (first among the bases of a subclass of another pool,
    as for Sentinel), except that a
    command finding all ``max_connections`` in use waits for one to be released (up to
    ``pool_wait_s``) instead of failing at once with "Too many connections": what the 101st
    concurrent call of a busy agent server met, on a healthy Redis. While a connection is
    free the pool's own path runs, and nothing more is paid (redis-py's
    ``BlockingConnectionPool`` takes a lock and a timer on every command: ~20 us more per
    command, measured).
    """

    def __init__(self, *args: Any, pool_wait_s: float = POOL_WAIT_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_wait_s = pool_wait_s
        self._released = asyncio.Event()

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            self._released.clear()  # a release from here on wakes the wait below
            try:
                return cast(AbstractConnection, await super().get_connection(*args, **kwargs))  # type: ignore[no-untyped-call]
            except redis_exc.MaxConnectionsError:
                deadline = deadline or loop.time() + self.pool_wait_s
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise redis_exc.MaxConnectionsError(
                        f"all {self.max_connections} connections of this client stayed in use for "
                        f"{self.pool_wait_s:g} s (connect(..., max_connections=N) allows more)") from None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._released.wait(), remaining)

    async def release(self, connection: AbstractConnection) -> None:
        await super().release(connection)
        self._released.set()


#: The reply options of every client of this package (see :func:`connect`). surrogateescape:
#: a reply that is not UTF-8 never raises while being read (one bad byte in Redis must not
#: end a read loop); its bytes come back as lone surrogates, which every check of this
#: package refuses, and go back to Redis unchanged if sent again.
RESP_OPTIONS: dict[str, object] = {"protocol": 2, "decode_responses": True, "encoding_errors": "surrogateescape"}


def wrap_connection_class(pool: Any, max_reply_bytes: int | None = None) -> type[AbstractConnection]:
    """The connection class of ``pool`` with busy replies raised as :class:`RedisBusyError`,
    replies bounded by ``max_reply_bytes`` (see :func:`connect`) and, for UTF-8 pools,
    commands packed by hiredis (one class per base class and bound)."""
    if max_reply_bytes is not None and (isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int)
                                        or max_reply_bytes < MIN_REPLY_BYTES):
        raise InvalidInputError(f"max_reply_bytes is a number of bytes of at least {MIN_REPLY_BYTES:,} (1 MiB), "
                                f"not {max_reply_bytes!r}")
    base = cast(type[AbstractConnection], pool.connection_class)
    utf8 = pool.connection_kwargs.get("encoding", "utf-8") == "utf-8"
    wrapped = _hiredis_packing(base) if utf8 else _busy_errors(base)
    if max_reply_bytes is None:
        return wrapped
    key = (wrapped, max_reply_bytes)
    if key not in _BOUNDED_CLASSES:
        _BOUNDED_CLASSES[key] = type(base.__name__, (wrapped,), {"max_reply_bytes": max_reply_bytes})
    return _BOUNDED_CLASSES[key]


#: The smallest reply bound :func:`connect` takes: a document is 64 KiB by default, an
#: event at most 4 Mi characters; a bound below a few of those would refuse honest reads.
MIN_REPLY_BYTES = 1 << 20
_BOUNDED_CLASSES: dict[tuple[type[AbstractConnection], int], type[AbstractConnection]] = {}


class ReplyTooLargeError(redis_exc.RedisError, CorruptDataError):
    """A reply from Redis over the client's ``max_reply_bytes`` (see :func:`connect`): the
    read was stopped and the connection closed, so nothing of it reached the caller. The
    command ran on the server (an XREADGROUP's entries are pending for the consumer)."""


class RedisOutOfMemoryError(redis_exc.OutOfMemoryError, RedisBusyError):
    """Redis is at ``maxmemory`` and refuses writes (``OOM``, under ``noeviction``)."""

    condition = "out of memory (maxmemory reached)"


class RedisLoadingError(redis_exc.BusyLoadingError, RedisBusyError):
    """Redis is loading its dataset and answers nothing yet (``LOADING``)."""

    condition = "loading its dataset"


class RedisReadOnlyError(redis_exc.ReadOnlyError, RedisBusyError):
    """The server is a read-only replica (``READONLY``): a failover is under way or the URL names a replica."""

    condition = "a read-only replica"


class RedisScriptBusyError(redis_exc.ResponseError, RedisBusyError):
    """Redis is running a script past its busy threshold and answers nothing else until it
    ends or is killed (``BUSY``)."""

    condition = "busy running a script"


#: The first words of the error replies about the whole server rather than one key: out of
#: memory, loading, a failover or a cluster reconfiguring, a script past the busy
#: threshold, a master cut off from the replicas ``min-replicas-to-write`` asks for.
SERVER_CONDITIONS = ("OOM", "LOADING", "MASTERDOWN", "BUSY", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")
#: What Redis 6.2 puts before the error of a command a script ran: the script's location
#: (``@user_script: 65: -OOM ...``), after its own words when the script raised it
#: (``Error running script (call to f_<sha>): @user_script:65: @user_script: 65: -OOM ...``).
#: Redis 7 relays the command's error as it is, with the location after it.
_SCRIPT_LOCATION = re.compile(r"(?:Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: )?"
                              r"(?:@user_script: ?\d+: )?-?")


#: How Redis words a script's command that the caller's ACL refuses (a plain error reply
#: from inside a script, not NOPERM).
_ACL_REFUSALS = ("NOPERM", "can't run this command", "can't access at least one of the keys", "No permissions")


def acl_refused(error: BaseException) -> bool:
    """Whether ``error`` is the deployment's ACL refusing a command (a script's too)."""
    return isinstance(error, redis_exc.NoPermissionError) or (
        isinstance(error, redis_exc.ResponseError) and any(words in str(error) for words in _ACL_REFUSALS))


def ids_exhausted(error: BaseException) -> bool:
    """Whether ``error`` is a stream refusing a new entry because an entry with the largest
    id there is was added to it (by hand: ``XADD`` with an explicit id)."""
    return "exhausted the last possible ID" in str(error)


def relayed_error(error: BaseException) -> str:
    """An error reply's text as Redis 7 words it, beginning with its code (``OOM ...``,
    ``NOREPLICAS ...``) also when Redis 6.2 relayed it from a script."""
    text = str(error)
    match = _SCRIPT_LOCATION.match(text)
    return text[match.end():] if match else text


_BUSY_REPLIES: dict[str, type[Exception]] = {
    "OOM": RedisOutOfMemoryError, "LOADING": RedisLoadingError, "READONLY": RedisReadOnlyError,
    "BUSY": RedisScriptBusyError,
}


class _BusyErrors:
    """A connection whose parser raises the busy replies as :class:`RedisBusyError` too.

    redis-py's parsers map an error reply's first word to an exception class through
    ``EXCEPTION_CLASSES``; the connection gets a subclass of its parser whose table maps
    ``OOM``, ``LOADING`` and ``READONLY`` to subclasses of the classes redis-py would
    raise, so every ``except`` written against redis-py still catches them.
    """

    max_reply_bytes: int | None = None  # see connect(); set on the classes wrap_connection_class makes

    def set_parser(self, parser_class: type[Any]) -> None:
        super().set_parser(_busy_parser(parser_class, self.max_reply_bytes))  # type: ignore[misc]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        await super().send_packed_command(command, check_health)  # type: ignore[misc]
        parser = getattr(self, "_parser", None)
        if isinstance(parser, _BoundedReplies):  # the replies to this send are counted from here
            parser.round_trip()


_BUSY_PARSERS: dict[tuple[type[Any], int | None], type[Any]] = {}


def _busy_parser(base: type[Any], max_reply_bytes: int | None = None) -> type[Any]:
    """``base`` with the busy replies mapped to this library's classes and, for the hiredis
    parser, replies bounded by ``max_reply_bytes``; one class per base and bound."""
    key = (base, max_reply_bytes)
    if key not in _BUSY_PARSERS:
        table = {**base.EXCEPTION_CLASSES, **_BUSY_REPLIES}
        namespace: dict[str, object] = {"EXCEPTION_CLASSES": table}
        bases: tuple[type[Any], ...] = (base,)
        if max_reply_bytes is not None and hasattr(base, "read_from_socket") and "_reader" in getattr(
                base, "__slots__", ()):  # the hiredis parser: what it feeds its reader is counted
            bases, namespace["max_reply_bytes"] = (_BoundedReplies, base), max_reply_bytes
        _BUSY_PARSERS[key] = type(base.__name__, bases, namespace)
    return _BUSY_PARSERS[key]


class _BoundedReplies:
    """A hiredis parser that stops a round trip's replies past ``max_reply_bytes``: it
    counts the bytes it reads from the socket since the connection last sent (one command,
    or a whole pipeline, whose replies count together: a pipeline of many replies each
    under the bound brought in their sum), and raises :class:`ReplyTooLargeError` before
    feeding hiredis more (redis-py closes the connection on any error of a read, so the
    rest is never read). Its body is redis-py's ``read_from_socket`` with the count."""

    max_reply_bytes: int
    _stream: Any
    _reader: Any
    _read_size: int
    _taken = 0

    def round_trip(self) -> None:
        """Count anew: the connection has sent a command (or a pipeline's commands)."""
        self._taken = 0

    async def read_from_socket(self) -> bool:
        buffer = await self._stream.read(self._read_size)
        if not buffer or not isinstance(buffer, bytes):
            raise redis_exc.ConnectionError("Connection closed by server.") from None
        self._taken += len(buffer)
        if self._taken > self.max_reply_bytes:
            raise ReplyTooLargeError(f"a reply from Redis over {self.max_reply_bytes:,} bytes (the client's "
                                     "max_reply_bytes): not read")
        self._reader.feed(buffer)
        return True


_BUSY_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _busy_errors(base: type[AbstractConnection]) -> type[AbstractConnection]:
    if base not in _BUSY_CLASSES:
        _BUSY_CLASSES[base] = type(base.__name__, (_BusyErrors, base), {})
    return _BUSY_CLASSES[base]


class _HiredisPacking(_BusyErrors):
    """Serialise commands with hiredis's C packer.

    redis-py's synchronous client packs with hiredis when it is installed; its asyncio
    client always packs in Python, which costs about a fifth of a small command's client
    CPU (measured on the write path). Arguments are ``str`` (UTF-8), ``bytes``, ``int``
    or ``float``, as with redis-py's own packer; anything else is a ``DataError``.
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str):  # "XINFO GROUPS" and the like go out as separate words
            args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            pass
        plain: Any = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args)
        try:  # buffers other than bytes, which hiredis does not take
            return [hiredis.pack_command(plain)]
        except TypeError as e:
            raise redis_exc.DataError(f"cannot send a command argument to Redis: {e}") from e


_PACKING_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _hiredis_packing(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` (TCP, TLS or Unix socket connection) with hiredis packing; one class per base."""
    if base not in _PACKING_CLASSES:
        _PACKING_CLASSES[base] = type(base.__name__, (_HiredisPacking, base), {})
    return _PACKING_CLASSES[base]


async def queue_script(pipe: Pipeline | ClusterPipeline, script: AsyncScript, keys: list[str],
                       args: Sequence[str | int | bytes]) -> None:
    """Queue a Lua script call in a pipeline: EVALSHA on one server, EVAL on a cluster.

    redis-py's cluster pipeline refuses EVALSHA (it cannot reload a script missing on one
    node in the middle of a pipeline); EVAL carries the source, and Redis caches it.
    """
    if isinstance(pipe, ClusterPipeline):
        pipe.eval(cast(str, script.script), len(keys), *keys, *args)
    else:
        await script(keys=keys, args=args, client=pipe)


# Typed views of the replies this package reads. The client is created with
# ``decode_responses=True`` and RESP2 (see :func:`connect`), so every reply holds ``str``;
# redis-py's annotations cover every mode, hence these casts at the boundary.
Entry = tuple[str, dict[str, str]]


async def xrange(redis: Client, key: str, *, start: str = "-", end: str = "+", count: int | None = None) -> list[Entry]:
    """XRANGE with ``str`` entries."""
    return cast(list[Entry], await redis.xrange(key, min=start, max=end, count=count))


async def xread(
    redis: Client, streams: dict[str, str], *, count: int, block: int | None
) -> list[tuple[str, list[Entry]]]:
    """XREAD with ``str`` entries (empty on timeout)."""
    reply = await redis.xread(streams, count=count, block=block)  # type: ignore[arg-type]
    return cast(list[tuple[str, list[Entry]]], reply or [])


async def smembers(redis: Client, key: str) -> list[str]:
    """SMEMBERS, sorted."""
    return sorted(cast(set[str], await redis.smembers(key)))


async def lindex(redis: Client, key: str, index: int) -> str | None:
    """LINDEX."""
    return cast(str | None, await redis.lindex(key, index))

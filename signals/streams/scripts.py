"""The project's code on the server: one Redis Functions library, called with ``FCALL``.

What it does: the bundled Lua scripts (``signals/streams/lua/*.lua``) become the functions
of one library, ``wmsignals_<digest>`` (the digest of its source, so that two releases of
wm-signals sharing a server each find their own), one function ``wms_<digest>_<script>``
each. :class:`ServerScript` calls one of them: ``FCALL`` on Redis 7, ``EVALSHA`` of the
script's SHA-1 on Redis 6.2 (which has no functions), ``EVAL`` in a Redis Cluster pipeline
of 6.2 (redis-py refuses EVALSHA there).

Who loads: a worker (at its start, and whenever it finds the library missing) or an
operator (``wm-signals deploy functions``). The ACL of the roles that face callers
(writer, reader, agent) has ``FCALL`` only, never ``EVAL``, ``SCRIPT LOAD`` or
``FUNCTION LOAD``, so no role that callers hold runs code of its own on the server. A
library is persisted with the data (RDB and AOF) and survives ``FLUSHALL``; it is gone
after ``FUNCTION FLUSH`` or a restart without persistence. A caller that finds it missing
tries to load it (which its ACL refuses under the generated ACL) and otherwise raises
:class:`ScriptsNotLoadedError`, a :class:`~signals.errors.RedisBusyError`: nothing was
run, and the call succeeds once a worker has loaded the library again (a running worker
checks it at every readiness tick), so callers retry it as any other passing condition.

What it does not do: it reads nothing from Redis but the calls' replies.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from redis import exceptions as redis_exc
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster

from signals.errors import RedisBusyError
from signals.streams.client import Client, lua
from signals.streams.redis_errors import acl_refused

__all__ = ("SCRIPT_NAMES", "ScriptsNotLoadedError", "ServerScript", "ensure_loaded", "function_name",
           "library", "library_name", "missing")

#: The bundled scripts, each a function of the library.
SCRIPT_NAMES = ("write", "thread", "commit", "compact", "chain", "dead_letter", "requeue", "leave", "claim")

#: Function flags per script (none: a function that may write, refused as a whole while
#: Redis is out of memory, before it runs).
_FLAGS: dict[str, tuple[str, ...]] = {"chain": ("no-writes",)}

Mode = Literal["function", "script"]


class ScriptsNotLoadedError(redis_exc.ResponseError, RedisBusyError):
    """The wm-signals functions (or, on Redis 6.2, scripts) are not loaded on the server and
    this client may not load them (its ACL refuses ``FUNCTION LOAD``): the call did not run.
    A worker loads them when it starts and when it finds them missing; retry then."""

    condition = "without the wm-signals functions (a worker or an operator loads them)"


@cache
def _digest() -> str:
    text = "\x00".join(f"{name}\x00{lua(name)}" for name in SCRIPT_NAMES)
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]


def library_name() -> str:
    """The library's name: ``wmsignals_<digest of its source>``."""
    return f"wmsignals_{_digest()}"


def function_name(script: str) -> str:
    """The function of a bundled script (``wms_<digest>_<script>``; ``ping``: the presence check)."""
    return f"wms_{_digest()}_{script}"


@cache
def library() -> str:
    """The library's source, as ``FUNCTION LOAD`` takes it: each script's body is the body
    of its function's callback, with ``KEYS`` and ``ARGV`` as its parameters."""
    parts = [f"#!lua name={library_name()}",
             f"redis.register_function{{function_name='{function_name('ping')}', "
             "callback=function() return 1 end, flags={'no-writes', 'allow-stale', 'allow-oom'}}"]
    for name in SCRIPT_NAMES:
        flags = ", ".join(f"'{flag}'" for flag in _FLAGS.get(name, ()))
        parts.append(f"redis.register_function{{function_name='{function_name(name)}', flags={{{flags}}}, "
                     f"callback=function(KEYS, ARGV)\n{lua(name)}\nend}}")
    return "\n".join(parts) + "\n"


def missing(reply: object) -> bool:
    """Whether ``reply`` (a call's error) says the function or script is not on the server."""
    if isinstance(reply, redis_exc.NoScriptError):
        return True
    return isinstance(reply, redis_exc.ResponseError) and "Function not found" in str(reply)


def _unknown_command(error: BaseException) -> bool:
    return isinstance(error, redis_exc.ResponseError) and "unknown command" in str(error).lower()


@dataclass(slots=True)
class _Server:
    """What is known of one client's server: functions or scripts."""

    mode: Mode | None = None


_SERVERS: weakref.WeakKeyDictionary[Any, _Server] = weakref.WeakKeyDictionary()


def _server(redis: Client) -> _Server:
    state = _SERVERS.get(redis)
    if state is None:
        state = _SERVERS[redis] = _Server()
    return state


async def server_mode(redis: Client) -> Mode:
    """``function`` on a Redis with functions (7.0 on), else ``script`` (found once per client)."""
    state = _server(redis)
    if state.mode is None:
        try:
            await redis.fcall(function_name("ping"), 0)
            state.mode = "function"
        except redis_exc.ResponseError as e:
            if _unknown_command(e):
                state.mode = "script"
            elif missing(e) or acl_refused(e):
                state.mode = "function"
            else:
                raise
    return state.mode


async def loaded(redis: Client) -> bool:
    """Whether the library (6.2: every script) is on the server."""
    if await server_mode(redis) == "function":
        try:
            await redis.fcall(function_name("ping"), 0)
        except redis_exc.ResponseError as e:
            if missing(e):
                return False
            raise
        return True
    shas = [_sha(lua(name)) for name in SCRIPT_NAMES]
    return all(await redis.script_exists(*shas))


async def ensure_loaded(redis: Client) -> bool:
    """Load the library (6.2: the scripts) unless it is there; returns whether this call loaded it.

    Raises:
        ScriptsNotLoadedError: it is missing and this client's ACL refuses loading it.
    """
    if await loaded(redis):
        return False
    try:
        if await server_mode(redis) == "function":
            try:
                await redis.function_load(library())
            except redis_exc.ResponseError as e:
                if "already exists" not in str(e):
                    raise
        else:
            for name in SCRIPT_NAMES:
                await redis.script_load(lua(name))
    except redis_exc.ResponseError as e:
        if acl_refused(e):
            raise ScriptsNotLoadedError(_not_loaded_text(redis)) from e
        raise
    return True


def _not_loaded_text(redis: Client) -> str:
    what = f"functions (library {library_name()})" if _server(redis).mode == "function" else "scripts"
    return (f"the wm-signals {what} are not loaded on this Redis (flushed, restarted without persistence, "
            "or no worker of this release has started), and this user may not load them: a worker loads them at "
            "its start and within its readiness interval, or an operator runs `wm-signals deploy functions`; "
            "nothing was run: retry then")


def _sha(source: str) -> str:
    return hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


class ServerScript:
    """One bundled script as the server runs it (see the module header).

    Called as redis-py's ``AsyncScript`` is (``await script(keys=..., args=...)``), and
    queued in pipelines with :meth:`queue`. A call finding the library missing loads it
    when this client may (a worker, an operator, an unrestricted user) and runs again;
    otherwise it raises :class:`ScriptsNotLoadedError`.
    """

    def __init__(self, redis: Client, name: str) -> None:
        if name not in SCRIPT_NAMES:
            raise ValueError(f"no bundled script {name!r}")
        self.redis = redis
        self.name = name
        self.script = lua(name)
        self.sha = _sha(self.script)
        self.function = function_name(name)

    async def __call__(self, keys: Sequence[str] = (), args: Sequence[str | int | bytes] = (),
                       client: Any = None) -> Any:
        if client is not None and isinstance(client, (Pipeline, ClusterPipeline)):
            await self.queue(client, keys, args)
            return client
        for attempt in range(2):
            try:
                return await self.redis.execute_command(*await self.command(keys, args))
            except redis_exc.ResponseError as e:
                if not missing(e) or attempt:
                    raise
            await self.load()
        raise AssertionError("unreachable")  # pragma: no cover

    async def command(self, keys: Sequence[str], args: Sequence[str | int | bytes]) -> tuple[Any, ...]:
        """The command that runs the script (FCALL, EVALSHA, or EVAL in a 6.2 cluster)."""
        if await server_mode(self.redis) == "function":
            return ("FCALL", self.function, len(keys), *keys, *args)
        if isinstance(self.redis, RedisCluster):
            return ("EVAL", self.script, len(keys), *keys, *args)
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    async def queue(self, pipe: Pipeline | ClusterPipeline, keys: Sequence[str],
                    args: Sequence[str | int | bytes]) -> None:
        """Queue a call in a pipeline (its reply, or its error, is the pipeline's)."""
        pipe.execute_command(*await self.command(keys, args))

    async def load(self) -> None:
        """Load the library (every script on 6.2).

        Raises:
            ScriptsNotLoadedError: this client may not load it.
        """
        await ensure_loaded(self.redis)

    def not_loaded(self, reply: object) -> ScriptsNotLoadedError | None:
        """The error to raise for a pipeline's reply saying the library is missing, else ``None``."""
        return ScriptsNotLoadedError(_not_loaded_text(self.redis)) if missing(reply) else None

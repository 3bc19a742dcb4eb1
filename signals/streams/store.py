"""The write API: read, replace and merge a lane's working memory on redis.asyncio.

Every write is a compare-and-set on the lane's version, done by one Lua script on the
lane's slot that also appends the write event to the partition write stream, so a
committed write always has its event and a refused one leaves nothing behind. Without
an explicit ``if_version`` a write that loses the race is recomputed on the fresh
document and retried (merges never lose a field); with one, a mismatch raises
:class:`~signals.errors.ConflictError`. An ``idempotency_key`` makes a retried write
apply once: the retry returns the version the first attempt produced (keys expire after
``idempotency_ttl_s``). The key remembers a fingerprint of its request (the operation and
its text, or its merge object with sorted keys): the same key with another request is
refused with :class:`~signals.errors.IdempotencyKeyReusedError`, naming the version the
key made, and nothing is written.

A thread belongs to one resource forever: the first write or :meth:`create_thread`
records the owner; a write naming another resource is refused. For thread scope the
check is inside the write script; for resource scope it is a separate step, safe because
the owner never changes once set.

What the store builds on: the write script's calls and the meaning of their refusals
(:mod:`signals.streams.write_script`), thread owners (:mod:`signals.streams.threads`),
replica acknowledgements (:mod:`signals.streams.durability`), request fingerprints
(:mod:`signals.streams.idempotency`), the stored document (:mod:`signals.streams.documents`)
and the answer to a retry (:mod:`signals.streams.retries`); this module decides what to
write, and when to retry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import anyio
from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.core.lru import LRU
from signals.core.memory import (
    WorkingMemoryConfig,
    apply_merge,
    apply_replace,
    check_size,
    template_text,
)
from signals.core.models import Scope
from signals.core.wire import MAX_VERSION
from signals.errors import (
    ConflictError,
    CorruptDataError,
    InvalidInputError,
    ReadOnlyError,
    RedisUnavailableError,
    WmSignalsError,
)
from signals.streams.backoff import full_jitter
from signals.streams.client import Client, connect
from signals.streams.documents import Document, read_document
from signals.streams.durability import Durability
from signals.streams.idempotency import canonical_merge, request_fingerprint
from signals.streams.keys import Keys, lane_id, validate_id
from signals.streams.namespace import NamespaceCheck
from signals.streams.retries import RetryAnswers
from signals.streams.threads import ThreadOwners
from signals.streams.write_script import LaneRef, WriteScript

__all__ = ("LaneRef", "WorkingMemoryStore")

log = get_logger(__name__)


class WorkingMemoryStore(RetryAnswers):
    """Reads and writes working memory; one instance per process is plenty.

    Args:
        redis: a redis.asyncio client (see :func:`signals.streams.client.connect`).
        keys: namespace and partition count; must match the workers'.
        config: the working-memory shape (scope, template or schema, size limit).
        read_only: refuse every write (:class:`~signals.errors.ReadOnlyError`).
        idempotency_ttl_s: how long an idempotency key is remembered.
        max_attempts: compare-and-set attempts before giving up under contention.
        cache_size: documents remembered from this client's own reads and writes; a write
            is computed against the remembered version and the script's compare-and-set
            rejects it if the lane moved, so a single writer needs one round trip per
            write and a stale entry costs one re-read.
        durability: acknowledge a write only once this many replicas have it (Redis
            ``WAIT``, see :mod:`signals.streams.durability`); fewer within the timeout is
            :class:`~signals.errors.DurabilityError`. ``None``: the master's word (a
            failover can lose an acknowledged write).
    """

    def __init__(
        self,
        redis: Client,
        *,
        keys: Keys | None = None,
        config: WorkingMemoryConfig | None = None,
        read_only: bool = False,
        idempotency_ttl_s: int = 86_400,
        max_attempts: int = 100,
        cache_size: int = 10_000,
        durability: Durability | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys or Keys()
        self.read_only = read_only
        self.max_attempts = max_attempts
        #: the write script's calls (keys, arguments, refusals), for bulk loaders too; it
        #: holds the settings its calls depend on (``config``, ``durability``, ``idempotency_ttl_s``)
        self.write_script = WriteScript(redis, self.keys, config or WorkingMemoryConfig(),
                                        idempotency_ttl_s=idempotency_ttl_s, durability=durability)
        #: thread owners: read, checked and claimed (remembered once a check passed)
        self.threads = ThreadOwners(redis, self.keys, cache_size)
        self._known: LRU[str, Document] = LRU(cache_size)  # this client's own reads and writes
        self._namespace = NamespaceCheck(redis, self.keys)

    @property
    def config(self) -> WorkingMemoryConfig:
        """The working-memory shape (the ``config`` argument)."""
        return self.write_script.config

    @property
    def durability(self) -> Durability | None:
        """The replicas a write waits for (the ``durability`` argument)."""
        return self.write_script.durability

    @property
    def idempotency_ttl_s(self) -> int:
        """How long an idempotency key is remembered (the ``idempotency_ttl_s`` argument)."""
        return self.write_script.idempotency_ttl_s

    @property
    def cache_size(self) -> int:
        """How many documents this client remembers (the ``cache_size`` argument; settable)."""
        return self._known.capacity

    @cache_size.setter
    def cache_size(self, value: int) -> None:
        self._known.capacity = value

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> WorkingMemoryStore:
        """A store on a new connection pool for ``url``."""
        return cls(connect(url), **kwargs)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()

    def ref(
        self, resource_id: str | None, thread_id: str | None = None, scope: Scope | None = None
    ) -> LaneRef:
        """Resolve which lane a call addresses (scope defaults to the config's)."""
        scope = scope or self.config.scope
        if resource_id is not None:
            validate_id(resource_id, "resource id")
        if thread_id is not None:
            validate_id(thread_id, "thread id")
        if scope == "resource" and resource_id is None:
            raise InvalidInputError("resource scope needs a resource id")
        return LaneRef(lane_id(scope, resource_id, thread_id), scope, resource_id, thread_id)

    async def get(
        self, resource_id: str | None, thread_id: str | None = None, scope: Scope | None = None
    ) -> Document | None:
        """The stored document, or ``None`` when the lane has none.

        A thread-scope read that names its resource is refused when the thread belongs to
        another resource (:class:`ThreadOwnerError`), as a write would be: one user's thread
        memory never reaches another user's model through a shared or guessed thread id.

        A document at version 0 is refused too (no write stores it, and no delivery record
        may name it); writes still go over it (:meth:`replace` repairs the lane). Its size
        is not bounded here: the system-message delivery bounds what it puts in front of a
        model (:meth:`signals.agent.AgentWorkingMemory.before_model_call`).

        Raises:
            ThreadOwnerError: the thread belongs to another resource.
            CorruptDataError: the document (or the thread's owner record) is not what the
                write script stores, invalid UTF-8 or version 0 included.
        """
        ref = self.ref(resource_id, thread_id, scope)
        await self._check_namespace(record=False)
        if ref.scope == "thread" and ref.resource_id is not None and ref.thread_id is not None:
            await self.check_owner(ref.thread_id, ref.resource_id)
        doc = await self._read(ref.lane)
        if doc is not None and doc.version == 0:  # a delivery record of it would be refused by the log's readers
            raise CorruptDataError(f"{self.keys.doc(ref.lane)} field version is 0: no write stores it (the first "
                                   "is version 1)")
        return doc

    async def _read(self, lane: str) -> Document | None:
        doc = await read_document(self.redis, self.keys, lane)
        if doc is not None:
            self._known.put(lane, doc)
        return doc

    async def thread_owner(self, thread_id: str) -> str | None:
        """The resource that owns a thread, or ``None`` when the thread does not exist
        (see :meth:`ThreadOwners.owner <signals.streams.threads.ThreadOwners.owner>`)."""
        return await self.threads.owner(thread_id)

    async def check_owner(self, thread_id: str, resource_id: str) -> None:
        """Refuse ``resource_id`` on a thread another resource owns (see
        :meth:`ThreadOwners.check <signals.streams.threads.ThreadOwners.check>`).

        Raises:
            ThreadOwnerError: the thread belongs to another resource.
            CorruptDataError: its owner record is not a resource id.
            RedisUnavailableError: Redis could not be reached.
        """
        await self.threads.check(thread_id, resource_id)

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        initial: str | dict[str, Any] | None = None,
    ) -> int | None:
        """Create a thread owned by ``resource_id``; write ``initial`` working memory if given.

        Creating an existing thread with the same owner is a no-op. Returns the version of
        the initial write, if any.

        Raises:
            ThreadOwnerError: the thread exists and belongs to another resource.
        """
        self._check_writable()
        await self.threads.claim(validate_id(thread_id, "thread id"), validate_id(resource_id, "resource id"))
        if initial is None:
            return None
        if isinstance(initial, dict) or self.config.format == "json":
            return await self.merge(resource_id, initial, thread_id=thread_id, op="create")
        return await self.replace(resource_id, initial, thread_id=thread_id, op="create")

    async def replace(
        self,
        resource_id: str | None,
        text: str,
        *,
        thread_id: str | None = None,
        scope: Scope | None = None,
        if_version: int | None = None,
        idempotency_key: str | None = None,
        op: Literal["replace", "create"] = "replace",
    ) -> int:
        """Template mode: replace the whole Markdown document. Returns the new version."""
        if self.config.format != "markdown":
            raise InvalidInputError("this store is in schema mode (JSON): use merge()")
        return await self._commit(
            self.ref(resource_id, thread_id, scope),
            lambda existing: apply_replace(existing, text, self.config),
            if_version=if_version,
            idempotency_key=idempotency_key,
            op=op,
            request=lambda: template_text(text),
        )

    async def merge(
        self,
        resource_id: str | None,
        update: str | dict[str, Any],
        *,
        thread_id: str | None = None,
        scope: Scope | None = None,
        if_version: int | None = None,
        idempotency_key: str | None = None,
        op: Literal["merge", "create"] = "merge",
    ) -> int:
        """Schema mode: deep-merge ``update`` (null deletes, arrays replace), validate, store."""
        if self.config.format != "json":
            raise InvalidInputError("this store is in template mode (Markdown): use replace()")
        return await self._commit(
            self.ref(resource_id, thread_id, scope),
            lambda existing: apply_merge(existing, update, self.config),
            if_version=if_version,
            idempotency_key=idempotency_key,
            op=op,
            request=lambda: canonical_merge(update),
        )

    async def _check_namespace(self, *, record: bool = True) -> None:
        """Record (writes) or check (reads) the namespace's partition count (see
        :mod:`signals.streams.namespace`): a writer whose count differs from the workers'
        would append events no worker reads, and a reader would look for lanes in the
        wrong partitions and find nothing."""
        try:
            await self._namespace(record=record and not self.read_only)
        except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
            raise RedisUnavailableError(f"reading {self.keys.config()}: {e}") from e

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError("this working-memory client is read-only")

    async def _resolve_owner(self, ref: LaneRef) -> tuple[LaneRef, str]:
        """Apply the thread-owner rule; returns the ref and the owner the script must check.

        Thread scope: the write script checks (and records) the owner atomically. Resource
        scope naming a thread: checked here, safe because an owner never changes once set.
        A thread named without a resource resolves to its owner.
        """
        if ref.thread_id is None:
            return ref, ""
        if ref.resource_id is None:
            existing = await self.thread_owner(ref.thread_id)
            if existing is None:
                raise InvalidInputError(f"thread {ref.thread_id!r} does not exist: name its resource")
            return LaneRef(ref.lane, ref.scope, existing, ref.thread_id), ""
        if ref.scope == "thread":
            return ref, ref.resource_id
        await self.threads.claim(ref.thread_id, ref.resource_id)
        return ref, ""

    def _check_current(self, ref: LaneRef, current: Document | None, if_version: int | None) -> int:
        """The version to write over, after the expected-version and format checks."""
        version = current.version if current else 0
        if if_version is not None and version != if_version:
            raise ConflictError(f"{ref.lane} is at document version {version}, expected {if_version}",
                                expected=if_version, actual=version)
        if current is not None and current.format != self.config.format:
            raise InvalidInputError(f"{ref.lane} holds {current.format} working memory, not {self.config.format}")
        return version

    def _fingerprint(self, idempotency_key: str | None, op: str, request: Callable[[], str]) -> str:
        """The request's fingerprint for its idempotency key (checked), ``""`` without one."""
        if idempotency_key is None:
            return ""
        validate_id(idempotency_key, "idempotency key")
        return request_fingerprint(op, self.config.format, request())

    async def _current(self, ref: LaneRef, if_version: int | None) -> Document | None:
        """The lane's document as last known here, read afresh when unknown or not the
        version the caller expects."""
        current = self._known.peek(ref.lane)
        if current is None or (if_version is not None and current.version != if_version):
            current = await self._read(ref.lane)
        return current

    def _prepare(self, ref: LaneRef, current: Document | None, if_version: int | None,
                 compute: Callable[[str | None], str]) -> tuple[int, str]:
        """The version to write over and the new text (refused as the checks say)."""
        version = self._check_current(ref, current, if_version)
        data = compute(current.data if current else None)
        check_size(data, self.config.max_bytes)
        return version, data

    async def _commit(
        self,
        ref: LaneRef,
        compute: Callable[[str | None], str],
        *,
        if_version: int | None,
        idempotency_key: str | None,
        op: Literal["replace", "merge", "create"],
        request: Callable[[], str],
    ) -> int:
        """Compute and write (``request``: the caller's request as text, fingerprinted with
        an idempotency key; see :mod:`signals.streams.idempotency`). An ``if_version`` no
        lane can be at (not an integer from 0 to 2**53) is bad input, not a conflict."""
        self._check_writable()
        if if_version is not None and (isinstance(if_version, bool) or not isinstance(if_version, int)
                                       or not 0 <= if_version <= MAX_VERSION):
            raise InvalidInputError(f"if_version {if_version!r} is no lane's version (an integer from 0 to 2**53; "
                                    "0: the lane has no document yet): nothing was written")
        fingerprint = self._fingerprint(idempotency_key, op, request)
        await self._check_namespace()
        ref, owner = await self._resolve_owner(ref)
        script_keys = self.write_script.keys_for(ref, owner, idempotency_key)
        # a retry is answered before the lane's version or text is looked at
        if (done := await self._retried(ref, owner, idempotency_key, fingerprint)) is not None:
            return done
        current = await self._current(ref, if_version)
        for attempt in range(self.max_attempts):
            try:
                version, data = self._prepare(ref, current, if_version, compute)
            except WmSignalsError:  # refused: unless the first attempt landed since the key was read
                if (done := await self._retried(ref, owner, idempotency_key, fingerprint)) is not None:
                    return done
                raise
            args = self.write_script.args(ref, version, data, op=op, owner=owner, idempotency_key=idempotency_key,
                                          fingerprint=fingerprint)
            status, detail, acked = await self.write_script.run(ref, script_keys, args)
            if status == "ok":
                log.debug("wm.written", lane=ref.lane, version=version + 1, op=op)
                self._known.put(ref.lane, Document(ref.lane, data, version + 1, self.config.format))
                await self._check_replicated(ref, version + 1, acked)
                return version + 1
            if status == "dup":  # the key's value as stored: this is its retry, or another request
                return await self._answer_retry(ref, idempotency_key, detail, fingerprint)
            self._known.discard(ref.lane)
            refusal = self.write_script.refusal(ref, status, detail, if_version)
            if refusal is not None:
                raise refusal
            if attempt:  # the first retry re-reads at once; later ones back off (contention)
                await anyio.sleep(full_jitter(attempt, first_s=0.001, cap_s=0.05))
            current = await self._read(ref.lane)
        raise WmSignalsError(f"{ref.lane}: gave up after {self.max_attempts} conflicting writes")


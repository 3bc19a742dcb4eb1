"""The error hierarchy of wm-signals: one root, then one family per way a caller reacts.

- :class:`InvalidInputError`: the caller's own input is wrong (fix the call);
- :class:`CorruptDataError`: data read from Redis is malformed or hostile (the lane is
  repaired or dead-lettered; a reader reports it);
- :class:`ConfigurationError`: the deployment is wrong (a namespace's stored settings
  disagree, an optional extra is missing);
- :class:`RedisUnavailableError` (and :class:`RedisBusyError`): Redis cannot serve now
  (back off and retry);
- :class:`ConflictError`: another writer won (re-read and retry);
- :class:`VerifyError`: a replay check found a break.

Callers catch :class:`WmSignalsError` for "anything this library refused", or one family.
The CLI maps the families to its exit codes itself (:mod:`workers.runtime.exits`).
"""

from __future__ import annotations

__all__ = (
    "ConcurrentUseError",
    "ConfigurationError",
    "ConflictError",
    "CorruptDataError",
    "DocumentTooLargeError",
    "DurabilityError",
    "EmptyTemplateOverwriteError",
    "GroupMissingError",
    "HistoryTrimmedError",
    "IdempotencyKeyReusedError",
    "InvalidInputError",
    "MissingDependencyError",
    "NamespaceMismatchError",
    "PatchError",
    "ReadOnlyError",
    "RedisBusyError",
    "RedisUnavailableError",
    "ScenarioError",
    "SchemaValidationError",
    "ThreadOwnerError",
    "VerifyError",
    "WmSignalsError",
)


class WmSignalsError(Exception):
    """Root of every error raised by wm-signals."""


class InvalidInputError(WmSignalsError):
    """Raised when a caller's input is malformed: unknown scope or format, bad JSON, a missing id."""


class IdempotencyKeyReusedError(InvalidInputError):
    """Raised when an idempotency key that made a lane's version ``version`` comes back with
    another write (other text, another merge, another operation): a retry must repeat its
    request exactly, and a new write needs a new key. Nothing is written."""

    def __init__(self, message: str, *, version: int) -> None:
        super().__init__(message)
        self.version = version


class ScenarioError(InvalidInputError):
    """Raised by ``simulate`` when a scenario is not in the documented shape; names the step and field."""


class PatchError(InvalidInputError):
    """Raised when a unified-diff patch is malformed or does not fit the prior text."""


class SchemaValidationError(InvalidInputError):
    """Raised when a schema-mode document fails validation; ``fields`` names the failing paths."""

    def __init__(self, message: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fields = fields


class EmptyTemplateOverwriteError(InvalidInputError):
    """Raised when a template-mode write equals the empty template, or is blank, while data
    exists (no data loss)."""


class DocumentTooLargeError(InvalidInputError):
    """Raised when a working-memory document exceeds the configured size limit."""


class ThreadOwnerError(InvalidInputError):
    """Raised when a write or thread creation names a resource other than the thread's owner."""


class CorruptDataError(WmSignalsError):
    """Raised when something read from Redis is not in the documented shape (a document hash
    with a non-integer version, an undecodable stream entry); names the key and the field.

    Nothing read from Redis is trusted; this is not the caller's input, so it is not an
    :class:`InvalidInputError`.
    """


class ConfigurationError(WmSignalsError):
    """Raised when the deployment, not the call, is wrong: settings that disagree with the
    namespace's stored ones, or a feature whose optional extra is not installed."""


class NamespaceMismatchError(ConfigurationError):
    """Raised when a process's settings disagree with those stored for its namespace (the
    partition count): it would address keys no other process reads."""


class ConcurrentUseError(InvalidInputError):
    """Raised when :meth:`~signals.agent.AgentWorkingMemory.before_model_call` is called while
    another call of it on the same object has not returned: one object tracks one model's
    context window, whose calls come one after the other, and two calls at once would each
    add the same new version. Give each concurrent model context its own object."""


class MissingDependencyError(ConfigurationError):
    """Raised when a feature needs an optional extra that is not installed (names the extra)."""


class ReadOnlyError(WmSignalsError):
    """Raised when a read-only client is asked to write."""


class ConflictError(WmSignalsError):
    """Raised when a write's expected version is not the lane's current version."""

    def __init__(self, message: str, *, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class RedisUnavailableError(WmSignalsError):
    """Raised when Redis cannot be reached after the bounded retries."""


class RedisBusyError(RedisUnavailableError):
    """Raised when Redis answers but refuses work for a while: out of memory under
    ``noeviction``, loading its dataset, a read-only replica, a script running past the
    busy threshold, a cluster reconfiguring."""


class DurabilityError(WmSignalsError):
    """Raised when a write with a durability setting is stored on the master but fewer
    replicas than required acknowledged it within the timeout (``WAIT``): a failover may
    still lose it. Retrying with the same idempotency key is safe: it applies once, and
    waits for the replicas again.

    Attributes:
        lane: the lane written.
        version: the version the write produced on the master.
        acked: how many replicas acknowledged it (``None``: ``WAIT`` itself failed).
        required: how many were required.
    """

    def __init__(self, message: str, *, lane: str, version: int, acked: int | None, required: int) -> None:
        super().__init__(message)
        self.lane = lane
        self.version = version
        self.acked = acked
        self.required = required


class GroupMissingError(WmSignalsError):
    """Raised when a consumer group vanished under a running worker (NOGROUP): fatal."""


class VerifyError(WmSignalsError):
    """Raised by replay verification; names the first broken signal."""


class HistoryTrimmedError(VerifyError):
    """A lane's signal stream was trimmed (by the workers' retention) past the entries read
    so far while its history was read in pages; ``read_signals`` reads it again."""

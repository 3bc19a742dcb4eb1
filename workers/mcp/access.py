"""Who is calling, and what they may touch: their own resource and the threads it owns.

Over stdio (and in-process) the resource is fixed when the server is built
(``--resource``). Over HTTP it comes from the bearer token: the SDK's bearer middleware
verifies the token (:mod:`workers.mcp.tokens`, or a verifier the deployer plugs in) and
the access token's ``subject`` is the resource id.

A thread is the caller's when its owner record names the caller's resource (a thread
belongs to one resource forever, :mod:`signals.streams.threads`). Reading or subscribing
to a thread needs that record; a write to a thread that has none yet claims it for the
caller (the store's write script records the owner atomically). Every refusal raises the
protocol's error (:class:`~mcp.shared.exceptions.MCPError`, ``INVALID_PARAMS``) with a
message, and is logged (``mcp.refused``). A thread of another resource and a thread that
does not exist get the same message, so a refusal does not tell whether it exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from signals.errors import InvalidInputError
from signals.streams.keys import validate_id
from signals.streams.store import WorkingMemoryStore

__all__ = ("Access", "Caller", "refuse")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Caller:
    """The resource a request acts for, and the thread its tools default to (stdio ``--thread``)."""

    resource_id: str
    thread_id: str | None = None


def refuse(caller: Caller | None, action: str, reason: str) -> MCPError:
    """The protocol error refusing ``action`` (logged as ``mcp.refused``)."""
    log.warning("mcp.refused", resource=caller.resource_id if caller else None, action=action, reason=reason)
    return MCPError(INVALID_PARAMS, f"refused: {reason}")


class Access:
    """Resolves the caller of a request and checks what it names.

    Args:
        store: the store whose thread records say who owns a thread.
        fixed: the caller of every request (stdio, in-process); ``None``: the bearer
            token of each HTTP request names it.
    """

    def __init__(self, store: WorkingMemoryStore, fixed: Caller | None = None) -> None:
        if fixed is not None:
            validate_id(fixed.resource_id, "resource id")
            if fixed.thread_id is not None:
                validate_id(fixed.thread_id, "thread id")
        self.store = store
        self.fixed = fixed

    def caller(self, action: str) -> Caller:
        """The caller of the current request.

        Raises:
            MCPError: an HTTP request without an access token naming a resource.
        """
        if self.fixed is not None:
            return self.fixed
        token = get_access_token()
        if token is None:
            raise refuse(None, action, "no bearer token: this server serves authenticated requests only")
        try:
            return Caller(validate_id(token.subject, "resource id"))
        except InvalidInputError as e:
            raise refuse(None, action, f"the access token names no valid resource (its subject): {e}") from e

    def check_resource(self, caller: Caller, resource_id: str, action: str) -> None:
        """Refuse a resource other than the caller's."""
        if resource_id != caller.resource_id:
            raise refuse(caller, action, f"resource {resource_id[:80]!r} is not this caller's (it acts for "
                                         f"resource {caller.resource_id!r})")

    async def check_thread(self, caller: Caller, thread_id: str, action: str, *, may_create: bool = False) -> None:
        """Refuse a thread the caller's resource does not own (``may_create``: or one no
        resource owns yet, which the caller's write then claims).

        Raises:
            MCPError: the refusal.
            CorruptDataError: the thread's owner record is not a resource id.
            RedisUnavailableError: Redis could not be reached.
        """
        owner = await self.store.thread_owner(thread_id)
        if owner == caller.resource_id or (owner is None and may_create):
            return
        raise refuse(caller, action, f"thread {thread_id[:80]!r} is not one of resource {caller.resource_id!r}'s "
                                     "threads")

"""wm-signals: working-memory state signals for LLM agents, on Redis Streams.

The pure core (:mod:`signals.core`: cache keys, the jsdiff-compatible diff, the decision,
rendering, merge) does no I/O; the Redis edge (:mod:`signals.streams`: store, subscription,
delivery log, replay) uses redis.asyncio; :mod:`signals.agent` and :mod:`signals.tool` sit
on top. Worker processes and the CLI live in the separate ``workers`` package.

What is exported here, and what is not. A name is in ``__all__`` when a user of the
library calls it, constructs it, catches it or handles a value of its type that a call
here returns: connecting, the write API, subscribing and the agent loop, replay and
verification, delivery logs, the key layout and lane ids (a subscription and replay take
a lane), the tool, signing, the wire types a user decodes, rendering the model's markup,
the scenario simulator, and every public error class. Everything else is an internal of
the machinery (the decision and lane numbering, cache-key and diff helpers, merge
primitives, token counting, the window tracker the agent facade drives): it stays
importable from its own module (``signals.core.X``, ``signals.streams.X``), and workers,
benchmarks and tests import it from there, but this surface does not promise it.
``tests/unit/test_public_api.py`` lists the surface name by name, so changing it is a
deliberate edit.

``signals.__version__`` is the installed distribution's version, read from its metadata: the
one place it is written is ``version`` in pyproject.toml (``wm-signals --version`` reads the
same).
"""

from importlib import metadata as _metadata

from signals.agent import AgentWorkingMemory, ModelCallResult
from signals.core.memory import DEFAULT_TEMPLATE, WorkingMemoryConfig
from signals.core.models import Attributes, Delivery, Signal, WriteEvent
from signals.core.render import render_markup
from signals.core.signing import Signer
from signals.core.simulate import run_scenario
from signals.core.system_message import working_memory_system_message
from signals.core.window import Injection
from signals.errors import (
    ConcurrentUseError,
    ConfigurationError,
    ConflictError,
    CorruptDataError,
    DocumentTooLargeError,
    DurabilityError,
    EmptyTemplateOverwriteError,
    GroupMissingError,
    HistoryTrimmedError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    MissingDependencyError,
    NamespaceMismatchError,
    PatchError,
    ReadOnlyError,
    RedisBusyError,
    RedisUnavailableError,
    ScenarioError,
    SchemaValidationError,
    ThreadOwnerError,
    VerifyError,
    WmSignalsError,
)
from signals.streams.client import Client, connect
from signals.streams.deliveries import NO_WINDOW, DeliveryLog, ModelView
from signals.streams.documents import Document
from signals.streams.durability import Durability
from signals.streams.keys import Keys, lane_id
from signals.streams.redis_errors import (
    RedisConnectionError,
    RedisConnectionTimeoutError,
    RedisLoadingError,
    RedisOutOfMemoryError,
    RedisReadOnlyError,
    RedisScriptBusyError,
    ReplyTooLargeError,
)
from signals.streams.replay import Materialised, materialise, read_signals
from signals.streams.scripts import ScriptsNotLoadedError
from signals.streams.sentinel import SentinelClient, connect_sentinel
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from signals.streams.urls import TLSOptions
from signals.streams.verify import VerifyReport, verify_lane
from signals.tool import handle_tool_call, tool_definition

try:
    __version__ = _metadata.version("wm-signals")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = (
    "DEFAULT_TEMPLATE",
    "NO_WINDOW",
    "AgentWorkingMemory",
    "Attributes",
    "Client",
    "ConcurrentUseError",
    "ConfigurationError",
    "ConflictError",
    "CorruptDataError",
    "Delivery",
    "DeliveryLog",
    "Document",
    "DocumentTooLargeError",
    "Durability",
    "DurabilityError",
    "EmptyTemplateOverwriteError",
    "GroupMissingError",
    "HistoryTrimmedError",
    "IdempotencyKeyReusedError",
    "Injection",
    "InvalidInputError",
    "Keys",
    "Materialised",
    "MissingDependencyError",
    "ModelCallResult",
    "ModelView",
    "NamespaceMismatchError",
    "PatchError",
    "ReadOnlyError",
    "RedisBusyError",
    "RedisConnectionError",
    "RedisConnectionTimeoutError",
    "RedisLoadingError",
    "RedisOutOfMemoryError",
    "RedisReadOnlyError",
    "RedisScriptBusyError",
    "RedisUnavailableError",
    "ReplyTooLargeError",
    "ScenarioError",
    "SchemaValidationError",
    "ScriptsNotLoadedError",
    "SentinelClient",
    "Signal",
    "Signer",
    "Subscription",
    "TLSOptions",
    "ThreadOwnerError",
    "VerifyError",
    "VerifyReport",
    "WmSignalsError",
    "WorkingMemoryConfig",
    "WorkingMemoryStore",
    "WriteEvent",
    "connect",
    "connect_sentinel",
    "handle_tool_call",
    "lane_id",
    "materialise",
    "read_signals",
    "render_markup",
    "run_scenario",
    "tool_definition",
    "verify_lane",
    "working_memory_system_message",
)

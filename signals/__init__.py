"""wm-signals: working-memory state signals for LLM agents, on Redis Streams.

The pure core (cache keys, the jsdiff-compatible diff, the decision, rendering, merge)
does no I/O; the Redis side (store, subscription, delivery log, replay) uses
redis.asyncio. Worker processes and the CLI live in the separate ``workers`` package.
"""

from signals.agent import AgentWorkingMemory
from signals.core.cachekey import cache_key, js_trim
from signals.core.diff import apply_patch, unified_patch
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.memory import DEFAULT_TEMPLATE, WorkingMemoryConfig
from signals.core.merge import deep_merge, merge_patch
from signals.core.models import Attributes, Delivery, Signal, WriteEvent
from signals.core.processor import Proposal, apply_delta, decide
from signals.core.render import render_markup
from signals.core.signing import Signer
from signals.core.simulate import run_scenario
from signals.core.system_message import working_memory_system_message
from signals.core.tokens import approx_tokens
from signals.core.window import Injection, StepResult, WindowTracker, trim_window
from signals.errors import (
    ConflictError,
    CorruptDataError,
    DocumentTooLargeError,
    EmptyTemplateOverwriteError,
    GroupMissingError,
    InvalidInputError,
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
from signals.streams.client import Client, TLSOptions, connect
from signals.streams.deliveries import DeliveryLog, ModelView
from signals.streams.keys import Keys, lane_id
from signals.streams.replay import Materialised, VerifyReport, materialise, read_signals, verify_lane
from signals.streams.store import Document, WorkingMemoryStore
from signals.streams.subscribe import Subscription
from signals.tool import handle_tool_call, tool_definition

__all__ = (
    "DEFAULT_TEMPLATE",
    "AgentWorkingMemory",
    "Attributes",
    "Client",
    "ConflictError",
    "CorruptDataError",
    "Delivery",
    "DeliveryLog",
    "Document",
    "DocumentTooLargeError",
    "EmptyTemplateOverwriteError",
    "GroupMissingError",
    "Injection",
    "InvalidInputError",
    "Keys",
    "LaneOptions",
    "LaneTracking",
    "Materialised",
    "ModelView",
    "NamespaceMismatchError",
    "PatchError",
    "Proposal",
    "ReadOnlyError",
    "RedisBusyError",
    "RedisUnavailableError",
    "ScenarioError",
    "SchemaValidationError",
    "Signal",
    "Signer",
    "StepResult",
    "Subscription",
    "TLSOptions",
    "ThreadOwnerError",
    "VerifyError",
    "VerifyReport",
    "WindowTracker",
    "WmSignalsError",
    "WorkingMemoryConfig",
    "WorkingMemoryStore",
    "WriteEvent",
    "advance",
    "apply_delta",
    "apply_patch",
    "approx_tokens",
    "cache_key",
    "connect",
    "decide",
    "deep_merge",
    "handle_tool_call",
    "js_trim",
    "lane_id",
    "materialise",
    "merge_patch",
    "read_signals",
    "render_markup",
    "run_scenario",
    "tool_definition",
    "trim_window",
    "unified_patch",
    "verify_lane",
    "working_memory_system_message",
)

"""The curated public API: ``signals.__all__`` is what a user calls, complete and importable."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from pathlib import Path

import signals

# The surface, name by name: adding or removing a top-level name is a deliberate edit here
# (the rule for what belongs is in the docstring of signals/__init__.py).
EXPECTED = frozenset({
    # connecting
    "Client", "Durability", "SentinelClient", "TLSOptions", "connect", "connect_sentinel",
    # the write API and the key layout
    "DEFAULT_TEMPLATE", "Document", "Keys", "WorkingMemoryConfig", "WorkingMemoryStore", "lane_id",
    # subscribing and the agent loop
    "AgentWorkingMemory", "Injection", "ModelCallResult", "Subscription", "working_memory_system_message",
    # the tool
    "handle_tool_call", "tool_definition",
    # replay, verification, delivery logs, signing
    "DeliveryLog", "NO_WINDOW", "Materialised", "ModelView", "Signer", "VerifyReport", "materialise", "read_signals",
    "verify_lane",
    # wire types, rendering, the simulator
    "Attributes", "Delivery", "Signal", "WriteEvent", "render_markup", "run_scenario",
    # errors
    "ConcurrentUseError", "ConfigurationError",
    "ConflictError", "CorruptDataError", "DocumentTooLargeError", "DurabilityError", "EmptyTemplateOverwriteError",
    "GroupMissingError", "HistoryTrimmedError", "IdempotencyKeyReusedError",
    "InvalidInputError", "MissingDependencyError", "NamespaceMismatchError", "PatchError",
    "ReadOnlyError",
    "RedisBusyError", "RedisConnectionError", "RedisConnectionTimeoutError", "RedisLoadingError",
    "RedisOutOfMemoryError", "RedisReadOnlyError", "RedisScriptBusyError",
    "RedisUnavailableError", "ReplyTooLargeError", "ScenarioError", "SchemaValidationError", "ScriptsNotLoadedError",
    "ThreadOwnerError",
    "VerifyError",
    "WmSignalsError",
})


def _public_modules() -> list[types.ModuleType]:
    """Every module of the package, subpackages included, whose dotted name has no ``_`` part."""
    modules = [signals]
    for info in pkgutil.walk_packages(signals.__path__, "signals."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            modules.append(importlib.import_module(info.name))
    return modules


def test_all_names_resolve() -> None:
    """Every name in ``__all__`` exists on the package, and none is listed twice."""
    for name in signals.__all__:
        assert hasattr(signals, name), name
    assert len(set(signals.__all__)) == len(signals.__all__)


def test_surface_is_the_expected_list() -> None:
    """``__all__`` is exactly the curated list above: no internal slips in, nothing drops out."""
    assert set(signals.__all__) == EXPECTED


def test_no_top_level_name_is_a_module_internal() -> None:
    """Each exported class or function is defined in the library and is public in its own
    module (listed in that module's ``__all__``, in a module with no ``_`` in its path)."""
    for name in signals.__all__:
        obj = getattr(signals, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # Client (a type alias) and DEFAULT_TEMPLATE (a str)
        module = obj.__module__
        assert module.startswith("signals."), (name, module)
        assert not any(part.startswith("_") for part in module.split(".")), (name, module)
        assert name in importlib.import_module(module).__all__, (name, module)


def test_no_stray_public_attribute() -> None:
    """Every public attribute of the package other than its submodules is listed in ``__all__``."""
    stray = [name for name, value in vars(signals).items()
             if not name.startswith("_") and not isinstance(value, types.ModuleType) and name not in signals.__all__]
    assert stray == []


def test_public_errors_are_exported() -> None:
    """Every public error class of every module (subpackages included) is re-exported."""
    missing = []
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, Exception) and name not in signals.__all__:
                missing.append(f"{module.__name__}.{name}")
    assert missing == []


def test_library_never_imports_workers() -> None:
    """signals is a library: no module of it, subpackages included, imports the workers package."""
    modules = [importlib.import_module(info.name) for info in pkgutil.walk_packages(signals.__path__, "signals.")]
    assert len(modules) > 20  # the walk reaches signals.core and signals.streams
    for module in modules:
        text = Path(module.__spec__.origin).read_text(encoding="utf-8")  # type: ignore[union-attr,arg-type]
        assert "from workers" not in text and "import workers" not in text, module.__name__

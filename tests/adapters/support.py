"""Shared machinery for the framework adapter tests: what the model received, checked.

Every adapter test records, per model call, the working-memory markups the (scripted)
model actually received, in order, and the stored document right before the call. The
:class:`Audit` then asserts the issue's guarantees from those records alone, against the
thread's delivery log:

* every working-memory message the model received is byte-equal to the delivery log's
  record (:func:`signals.core.render.signal_markup` of it) of a step at or before that
  call, and every record of step N is in call N's input;
* applying the last snapshot and the deltas after it, in the order received, rebuilds
  the stored document (the lane's latest version) before every call, and the log's
  ``view_at(step)`` agrees;
* no version is held twice in one call's input.

:func:`write_from_other_process` is the second writer: ``python -m workers write`` in its
own process (a CLI, a background job, another agent: memory the loop did not write).
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from signals.core.cachekey import js_trim
from signals.core.models import Delivery
from signals.core.processor import apply_delta
from signals.core.render import signal_markup
from signals.streams.client import Client
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import spawn_worker, wait_ready

__all__ = ("Audit", "CallRecord", "next_memory", "parse_markup", "rebuild", "worker_process",
           "write_from_other_process")

ROOT = Path(__file__).parents[2]
_TAG = re.compile(r'<working-memory((?: [A-Za-z_][A-Za-z0-9_.-]*="[^"]*")*)(?: />|>([^<]*)</working-memory>)',
                  re.DOTALL)
_ATTR = re.compile(r'([A-Za-z_][A-Za-z0-9_.-]*)="([^"]*)"')


def parse_markup(markup: str) -> tuple[dict[str, str], str]:
    """A ``<working-memory ...>`` markup's attributes and (unescaped) contents."""
    match = _TAG.fullmatch(markup)
    assert match is not None, f"not a working-memory markup: {markup[:120]!r}"
    attrs = {k: html.unescape(v) for k, v in _ATTR.findall(match.group(1))}
    return attrs, html.unescape(match.group(2) or "")


def rebuild(markups: list[str]) -> str | None:
    """What a model can rebuild from the markups it received: the last snapshot, then the deltas after it."""
    parsed = [parse_markup(m) for m in markups]
    snapshots = [i for i, (attrs, _) in enumerate(parsed) if "patch" not in attrs]
    if not snapshots:
        return None
    text = parsed[snapshots[-1]][1]
    for attrs, contents in parsed[snapshots[-1] + 1:]:
        text = apply_delta(text, contents, attrs["patch"])
    return text


@dataclass
class CallRecord:
    """One model call as the scripted model saw it."""

    markups: list[str]  # the working-memory markups it received, in order
    expected: str  # the stored document (trimmed) right before the call
    system: str | None = None  # the system prompt it received


@dataclass
class Audit:
    """Checks recorded calls against the delivery log (one thread, one lane)."""

    redis: Client
    keys: Keys
    thread_id: str
    calls: list[CallRecord] = field(default_factory=list)

    async def expect(self, store: WorkingMemoryStore, resource_id: str, thread_id: str | None = None) -> str:
        """The stored document now, trimmed (what the model must be able to rebuild at its next call)."""
        doc = await store.get(resource_id, thread_id)
        return js_trim(doc.data) if doc else ""

    async def check(self) -> list[Delivery]:
        """Assert the guarantees for every recorded call (step N is the N-th call); returns the log."""
        log = DeliveryLog(self.redis, self.keys)
        records = await log.read(self.thread_id)
        assert self.calls, "no model call was recorded"
        for step, call in enumerate(self.calls, start=1):
            known = [r for r in records if r.step <= step]
            by_markup: dict[str, set[int]] = {}
            for r in known:
                by_markup.setdefault(signal_markup(r.contents, r.attributes), set()).add(r.version)
            versions: list[int] = []
            for markup in call.markups:
                assert markup in by_markup, f"call {step}: a working-memory message that is in no log record " \
                                            f"of step <= {step}: {markup[:160]!r}"
                versions += sorted(by_markup[markup])  # a catch-up message may cover several versions
            for r in records:
                if r.step == step:
                    assert signal_markup(r.contents, r.attributes) in call.markups, \
                        f"call {step}: logged v{r.version} {r.mode} is not in the model's input"
            assert len(versions) == len(set(versions)), f"call {step}: a version held twice: {versions}"
            if call.expected:
                assert rebuild(call.markups) == call.expected, f"call {step}: the model cannot rebuild the latest " \
                                                              f"version from {call.markups}"
                view = await log.view_at(self.thread_id, step)
                assert view is not None and view.text == call.expected, f"call {step}: view_at disagrees"
        return records


def write_from_other_process(url: str, keys: Keys, resource_id: str, markdown: str) -> None:
    """Write the resource's document from another process (``python -m workers write``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "workers", "write", "--redis-url", url, "--namespace", keys.namespace,
         "--partitions", str(keys.partitions), "--resource", resource_id, "--markdown", markdown],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


@asynccontextmanager
async def worker_process(url: str, keys: Keys) -> AsyncIterator[None]:
    """A real worker process (``python -m workers worker``) for the namespace, stopped on exit."""
    proc = spawn_worker(url, keys, "adapter-test")
    try:
        await wait_ready(proc)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def next_memory(markups: list[str], turn: int) -> str:
    """What a scripted model writes with setWorkingMemory: the memory it rebuilt, plus one fact.

    A model that writes what it was shown plus a change: if the adapter delivered a stale
    or partial memory, the written document shows it (and the audit catches it).
    """
    current = rebuild(markups) or "# Notes"
    return f"{current}\n- fact from turn {turn}: the user mentioned item number {turn}"

"""Replays a scenario through the decision with Mastra's single-agent runtime. Pure: no I/O.

A scenario (the format of the reference vectors) lists what storage returns at each step
and whether the agent's context window still holds the lane's last snapshot. The runtime
keeps the history of accepted signals and Mastra's tracking (current cacheKey, mode and
version); a re-injected snapshot is a new accepted signal here, so the version rule of
:func:`~signals.core.processor.mastra_version` applies.

The delta base is chosen as Mastra does: the ``value`` of the last delta since the last
snapshot, else the snapshot's ``value``, else its ``contents`` (``"history": "no-value"``
strips ``value`` from past signals, which makes deltas cumulative against the snapshot).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from signals.core.models import STATE_ID, TAG_NAME, Format, Scope
from signals.core.processor import DEFAULT_MAX_DIFF_EDITS, Policy, decide, mastra_version
from signals.errors import ScenarioError

__all__ = ("DELTA_KEYS", "SNAPSHOT_KEYS", "run_scenario", "validate_scenario")

SNAPSHOT_KEYS = ("id", "mode", "cacheKey", "tagName", "contents", "value", "attributes")
DELTA_KEYS = ("id", "mode", "cacheKey", "tagName", "contents", "delta", "value", "attributes")
_FORMATS = ("markdown", "json")
_SCOPES = ("resource", "thread")


@dataclass(slots=True)
class _Accepted:
    mode: str
    contents: str
    value: str | None


@dataclass(frozen=True, slots=True)
class _Step:
    data: str | None
    has_snapshot: bool
    fmt: Format
    scope: Scope
    configured: bool


def _fail(where: str, message: str) -> ScenarioError:
    return ScenarioError(f"{where}: {message}")


def _format(value: Any, where: str) -> Format:
    if value not in _FORMATS:
        raise _fail(where, f"'format' must be 'markdown' or 'json', got {value!r}")
    return cast(Format, value)


def _scope(value: Any, where: str) -> Scope:
    if value is None:
        return "resource"
    if value not in _SCOPES:
        raise _fail(where, f"'scope' must be 'resource', 'thread' or null, got {value!r}")
    return cast(Scope, value)


def validate_scenario(scenario: Any) -> tuple[list[_Step], bool]:
    """Check a decoded scenario; return its steps and whether history keeps ``value``.

    Raises:
        ScenarioError: naming the step and the field that is wrong.
    """
    if not isinstance(scenario, Mapping):
        raise ScenarioError("scenario: must be a JSON object")
    fmt = _format(scenario.get("format"), "scenario")
    scope = _scope(scenario.get("scope"), "scenario")
    history = scenario.get("history")
    if history not in (None, "no-value"):
        raise _fail("scenario", f"'history' must be 'no-value' when present, got {history!r}")
    steps = scenario.get("steps")
    if not isinstance(steps, list):
        raise _fail("scenario", "'steps' must be a list")
    out: list[_Step] = []
    for i, step in enumerate(steps):
        where = f"step {i}"
        if not isinstance(step, Mapping):
            raise _fail(where, "must be a JSON object")
        if "data" not in step:
            raise _fail(where, "'data' is missing (a string, or null for no working memory)")
        data = step["data"]
        if data is not None and not isinstance(data, str):
            raise _fail(where, f"'data' must be a string or null, got {type(data).__name__}")
        has = step.get("hasSnapshot")
        if not isinstance(has, bool):
            raise _fail(where, f"'hasSnapshot' must be true or false, got {has!r}")
        step_fmt = _format(step["format"], where) if "format" in step else fmt
        step_scope = _scope(step["scope"], where) if "scope" in step else scope
        configured = not ("template" in step and step["template"] is None)
        out.append(_Step(data, has, step_fmt, step_scope, configured))
    return out, history is None


def run_scenario(scenario: Any, *, policy: Policy = "mastra") -> Iterator[dict[str, Any]]:
    """Yield one output object per step, in the reference vectors' shape.

    Raises:
        ScenarioError: the scenario is invalid (raised before any output).
    """
    steps, keep_value = validate_scenario(scenario)
    history: list[_Accepted] = []
    version = 0
    current_key: str | None = None
    current_mode: str | None = None
    for i, step in enumerate(steps):
        prior = _prior(history) if step.has_snapshot else None
        proposal = decide(
            data=step.data,
            fmt=step.fmt,
            scope=step.scope,
            has_snapshot=step.has_snapshot,
            current_cache_key=current_key,
            prior=prior,
            policy=policy,
            configured=step.configured,
            # Mastra's runtime has no diff budget: the mastra policy reproduces it exactly
            max_diff_edits=None if policy == "mastra" else DEFAULT_MAX_DIFF_EDITS,
        )
        if proposal is None:
            yield {
                "step": i,
                "emitted": False,
                **dict.fromkeys(
                    ("id", "tagName", "mode", "cacheKey", "contents", "attributes", "value", "delta", "keys")
                ),
                "version": version or None,
            }
            continue
        version = mastra_version(version, current_key, current_mode, proposal.cache_key, proposal.mode)
        current_key, current_mode = proposal.cache_key, proposal.mode
        history.append(
            _Accepted(proposal.mode, proposal.contents, proposal.value if keep_value else None)
        )
        attributes: dict[str, str] = {"format": proposal.attributes.format, "scope": proposal.attributes.scope}
        if proposal.attributes.patch is not None:
            attributes["patch"] = proposal.attributes.patch
        yield {
            "step": i,
            "emitted": True,
            "id": STATE_ID,
            "tagName": TAG_NAME,
            "mode": proposal.mode,
            "cacheKey": proposal.cache_key,
            "contents": proposal.contents,
            "attributes": attributes,
            "value": proposal.value,
            "delta": proposal.delta,
            "keys": list(DELTA_KEYS if proposal.mode == "delta" else SNAPSHOT_KEYS),
            "version": version,
        }


def _prior(history: list[_Accepted]) -> str | None:
    """Mastra's delta base: last delta's value since the snapshot, else the snapshot's."""
    snap = next((k for k in range(len(history) - 1, -1, -1) if history[k].mode == "snapshot"), None)
    if snap is None:
        return None
    deltas = [s for s in history[snap + 1 :] if s.mode == "delta"]
    if deltas and deltas[-1].value is not None:
        return deltas[-1].value
    snapshot = history[snap]
    return snapshot.value if snapshot.value is not None else snapshot.contents

"""Token economics: working-memory tokens sent to the model over scripted conversations.

Each conversation has 200 turns; about 10% of turns update the working memory; the agent
window is trimmed either to the last 20 messages or to a token budget. Per conversation
it prints the working-memory tokens sent under:

  (a) system   - the whole memory with its instructions in the system prompt every turn
                 (Mastra's default delivery);
  (b) mastra   - state signals with the mastra policy (JSON always snapshots);
  (c) compact  - state signals with the compact policy (ours);

and the lower bound: a window that drops old messages must receive the whole document
again at least once per window period (the turns a message survives in the window), so
the floor is one bare snapshot per period plus the new text of every changed line.

It also counts cache-friendly turns, a proxy for provider prompt caching: turns whose
system prompt is byte-identical to the previous turn's (the prefix every provider cache
starts from). Tokens are approximated as UTF-8 bytes / 4 (``signals.core.tokens``).
Pure computation: the worker's numbering (``signals.core.lane``) and the agent's window
tracker (``signals.core.window``) run in-process without Redis.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from signals.core.cachekey import js_trim
from signals.core.diff import compact_patch
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.memory import WorkingMemoryConfig, apply_merge
from signals.core.merge import merge_patch
from signals.core.models import WriteEvent
from signals.core.processor import Policy
from signals.core.render import render_markup
from signals.core.system_message import working_memory_system_message
from signals.core.tokens import approx_tokens
from signals.core.window import WindowTracker, trim_window

TURNS = 200
SCHEMA = {"type": "object"}


@dataclass
class Conversation:
    """A scripted conversation: the document after each turn (None: unchanged)."""

    name: str
    fmt: str
    updates: list[str | None]
    trim: tuple[str, int]


def _markdown_profile(rng: random.Random) -> list[str]:
    return ["# User Information", "- **First Name**: Ada", "- **Last Name**: Lovelace", "- **Location**: London",
            "- **Occupation**: mathematician", "- **Interests**: engines, poetry", "- **Goals**: publish notes",
            "- **Events**: salon on Friday", "- **Facts**: prefers tea", "- **Projects**: analytical engine"]


def _big_document(rng: random.Random) -> list[str]:
    lines = ["# Project notebook"]
    while sum(len(x) + 1 for x in lines) < 10_000:
        lines.append(f"- note {len(lines):03d}: {rng.choice(['measured', 'decided', 'asked', 'planned'])} "
                     f"{rng.choice(['the gear ratio', 'a supplier', 'the budget', 'the schedule'])} "
                     f"({rng.randint(1, 999)}) and wrote it down for later reference")
    return lines


def _markdown_conversation(name: str, lines: list[str], rng: random.Random, trim: tuple[str, int]) -> Conversation:
    updates: list[str | None] = ["\n".join(lines)]
    for _ in range(1, TURNS):
        if rng.random() < 0.10:
            r = rng.random()
            if r < 0.6:
                i = rng.randrange(1, len(lines))
                lines[i] = lines[i].split(":")[0] + f": updated {rng.randint(0, 9999)}"
            else:
                lines.append(f"- fact {len(lines)}: learned {rng.randint(0, 9999)}")
            updates.append("\n".join(lines))
        else:
            updates.append(None)
    return Conversation(name, "markdown", updates, trim)


def _json_conversation(name: str, rng: random.Random, trim: tuple[str, int]) -> Conversation:
    config = WorkingMemoryConfig(schema=SCHEMA)
    doc = apply_merge(None, {"name": "Ada", "city": "London", "trip": {"to": "Kyoto", "days": 9},
                             "likes": ["tea", "engines"], "notes": "prefers trains; allergic to peanuts"}, config)
    updates: list[str | None] = [doc]
    for _ in range(1, TURNS):
        if rng.random() < 0.10:
            update = rng.choice([{"city": f"City{rng.randint(0, 99)}"}, {"trip": {"days": rng.randint(1, 20)}},
                                 {"likes": ["tea", "engines", f"hobby{rng.randint(0, 9)}"]},
                                 {"budget": rng.randint(100, 999)}])
            doc = apply_merge(doc, update, config)
            updates.append(doc)
        else:
            updates.append(None)
    return Conversation(name, "json", updates, trim)


def conversations(seed: int = 11) -> list[Conversation]:
    """The scripted conversations (each with a count window and a token-budget window)."""
    out = []
    for trim_name, small_budget, big_budget, json_budget in (("count", 20, 20, 20), ("tokens", 1200, 9000, 1200)):
        kind = "count" if trim_name == "count" else "tokens"
        rng = random.Random(seed)
        out.append(_markdown_conversation(f"profile/{trim_name}", _markdown_profile(rng), rng, (kind, small_budget)))
        rng = random.Random(seed)
        out.append(_markdown_conversation(f"10KB doc/{trim_name}", _big_document(rng), rng, (kind, big_budget)))
        rng = random.Random(seed)
        out.append(_json_conversation(f"json/{trim_name}", rng, (kind, json_budget)))
    return out


def _trim(window: list[tuple[str | None, str]], trim: tuple[str, int]) -> list[tuple[str | None, str]]:
    kind, limit = trim
    return trim_window(window, max_messages=limit) if kind == "count" else trim_window(window, max_tokens=limit)


def _user_turn(turn: int) -> tuple[str, str]:
    return (f"user: message {turn} about the project, with a question or two about what comes next",
            f"assistant: reply {turn} with a short, helpful answer that refers to what the user said")


def run_signals(conv: Conversation, policy: Policy) -> dict[str, int]:
    """Tokens sent as state signals; the window period seen; cache-friendly turns."""
    tracker = WindowTracker("r:bench")
    tracking = LaneTracking()
    options = LaneOptions(policy=policy, snapshot_every=1_000_000)
    window: list[tuple[str | None, str]] = []
    sent = 0
    version = 0
    for turn, data in enumerate(conv.updates):
        if data is not None:
            version += 1
            event = WriteEvent(lane="r:bench", scope="resource", format=conv.fmt,  # type: ignore[arg-type]
                               version=version, data=data, op="replace", resource_id="bench")
            tracking, signal = advance(tracking, event, options, now="t")
            if signal is not None:
                tracker.offer(signal, tracking.value)
        result = tracker.step({mid for mid, _ in window if mid})
        window = [(mid, text) for mid, text in window if mid not in result.drop]
        for inj in result.add:
            window.append((inj.id, inj.markup))
            sent += approx_tokens(inj.markup)
        user, assistant = _user_turn(turn)
        window += [(None, user), (None, assistant)]
        window = _trim(window, conv.trim)
    return {"tokens": sent, "cache_turns": TURNS}  # the system prompt never changes


def run_system(conv: Conversation) -> dict[str, int]:
    """Tokens of the system-message delivery, and turns whose system prompt is unchanged."""
    config = WorkingMemoryConfig(schema=SCHEMA) if conv.fmt == "json" else WorkingMemoryConfig()
    sent = 0
    stable = 0
    previous = None
    data = None
    for update in conv.updates:
        data = update if update is not None else data
        message = working_memory_system_message(config, data)["content"]
        sent += approx_tokens(message)
        stable += message == previous
        previous = message
    return {"tokens": sent, "cache_turns": stable + 1}


def _snapshot_tokens(conv: Conversation) -> float:
    """Mean tokens of the document as a rendered snapshot (what the model must receive)."""
    docs = [js_trim(d) for d in conv.updates if d is not None]
    attrs = {"format": conv.fmt, "scope": "resource"}
    return sum(approx_tokens(render_markup(d, attrs)) for d in docs) / len(docs)


def window_period(conv: Conversation) -> int:
    """How many turns a snapshot-sized message survives in this conversation's window."""
    window: list[tuple[str | None, str]] = [("probe", "x" * round(4 * _snapshot_tokens(conv)))]
    for turn in range(TURNS):
        user, assistant = _user_turn(turn)
        window += [(None, user), (None, assistant)]
        window = _trim(window, conv.trim)
        if not any(mid == "probe" for mid, _ in window):
            return turn + 1
    return TURNS


def lower_bound(conv: Conversation) -> int:
    """One rendered snapshot per window period plus the changed lines of every update.

    Changed lines are the removed and added lines of a line diff (what any line-based
    delta must carry); for JSON, the RFC 7396 merge patch. Hunk headers and the delta's own
    markup are not counted, so the bound is below what any Mastra-compatible delta sends.
    """
    period = window_period(conv)
    docs = [js_trim(d) for d in conv.updates if d is not None]
    changed = 0
    for previous, doc in itertools.pairwise(docs):
        if previous == doc:
            continue
        if conv.fmt == "json":  # the smallest JSON change: an RFC 7396 merge patch
            changed += approx_tokens(json.dumps(merge_patch(json.loads(previous), json.loads(doc)),
                                                separators=(",", ":")))
        else:
            patch = compact_patch(previous, doc) or ""
            changed += sum(approx_tokens(line) for line in patch.split("\n") if not line.startswith("@@"))
    return math.ceil(TURNS / period) * round(_snapshot_tokens(conv)) + changed


def envelope_floor(conv: Conversation) -> int:
    """The floor plus, per update, the markup any Mastra-compatible delta message carries
    (its ``<working-memory ... patch=...>`` tags and one hunk header): what a compatible
    delivery cannot avoid, for comparison with the bare floor. Approximate: a change that
    lands when a fresh snapshot is due anyway needs no delta, so ratios slightly under 1
    are possible."""
    patch = "json-merge-patch" if conv.fmt == "json" else "unified-diff"
    empty = render_markup("x", {"format": conv.fmt, "scope": "resource", "patch": patch})
    per_update = approx_tokens(empty) + (0 if conv.fmt == "json" else approx_tokens("@@ -1,1 +1,1 @@\n"))
    docs = [js_trim(d) for d in conv.updates if d is not None]
    changes = sum(a != b for a, b in itertools.pairwise(docs))
    return lower_bound(conv) + changes * per_update


def run() -> list[dict[str, Any]]:
    """Every conversation under every delivery; one row each."""
    rows = []
    for conv in conversations():
        system = run_system(conv)
        mastra = run_signals(conv, "mastra")
        compact = run_signals(conv, "compact")
        floor = lower_bound(conv)
        enveloped = envelope_floor(conv)
        rows.append({
            "conversation": conv.name, "updates": sum(u is not None for u in conv.updates) - 1,
            "system": system["tokens"], "mastra": mastra["tokens"], "compact": compact["tokens"],
            "floor": floor, "compact_vs_floor": compact["tokens"] / floor,
            "floor_env": enveloped, "compact_vs_floor_env": compact["tokens"] / enveloped,
            "compact_vs_system": compact["tokens"] / system["tokens"],
            "cache_system": system["cache_turns"], "cache_signals": compact["cache_turns"],
            "period": window_period(conv),
        })
    return rows


def print_table(rows: list[dict[str, Any]], out: Callable[[str], None] = print) -> None:
    """Print the rows as an aligned table."""
    out(f"{'conversation':18} {'upd':>4} {'(a) system':>11} {'(b) mastra':>11} {'(c) compact':>12} "
        f"{'floor':>7} {'c/floor':>8} {'c/env.floor':>12} {'c/(a)':>6} {'cache (a)':>10} {'cache (c)':>10}")
    for r in rows:
        out(f"{r['conversation']:18} {r['updates']:>4} {r['system']:>11,} {r['mastra']:>11,} {r['compact']:>12,} "
            f"{r['floor']:>7,} {r['compact_vs_floor']:>8.2f} {r['compact_vs_floor_env']:>12.2f} "
            f"{r['compact_vs_system']:>6.1%} "
            f"{r['cache_system']:>6}/{TURNS} {r['cache_signals']:>6}/{TURNS}")
    out("targets: compact <= mastra, compact <= 1.25x floor, compact <= 15% of (a)")


if __name__ == "__main__":
    print_table(run())

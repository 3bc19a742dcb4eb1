"""The token benchmark's targets hold (its figures are deterministic: no timing involved)."""

from __future__ import annotations

from bench import bench_tokens


def test_token_targets_are_met() -> None:
    """In bytes / 4 and in cl100k: coalesced compact <= 1.05x the enveloped floor on every
    conversation, bursty ones included, and never more than uncoalesced or mastra."""
    rows = bench_tokens.run()
    missed = [label for label, met in bench_tokens.targets(rows) if not met]
    assert missed == []
    assert any("(cl100k" in label for label, _ in bench_tokens.targets(rows)), "the tokens extra is part of dev"
    assert sum(r["bursty"] for r in rows) == 2


def test_the_enveloped_floor_charges_each_change_its_smallest_message() -> None:
    """On a conversation with one change, the floor is the first snapshot plus the smaller
    of the change's snapshot and delta messages."""
    lines = [f"- fact {i}: a line long enough to matter" for i in range(12)]
    first = "# Notes\n" + "\n".join(lines)
    second = first.replace("fact 3: a line", "fact 3: the line")
    conv = bench_tokens.Conversation("one change", "markdown", [[first], [second]] + [[]] * 3, ("count", 20))
    count = bench_tokens.approx_tokens
    delta = bench_tokens._delta_messages(conv, first, second)
    expected = count(bench_tokens._snapshot(conv, first)) + min(count(m) for m in delta)
    assert bench_tokens.floors(conv, count)["enveloped"] == expected

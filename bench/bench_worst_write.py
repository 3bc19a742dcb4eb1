"""Worst-case cost of one write (issue 10: bounded cost per write).

Prints the CPU time of ``decide`` (what the worker runs per write) for 64 KiB Markdown
documents rewritten so that the line diff needs thousands of edits: 12,500 distinct lines
shuffled (the issue's case) or reversed, 58,000 mostly blank lines shuffled, 12,500 lines
drawn from two shuffled. Both policies, each past the diff budget, so each is a snapshot.
Baselines from the same run: ``decide`` on the same document with no delta to compute
(snapshot only) and with one line edited (a small delta), and, for scale, the unbudgeted
diff (Mastra's behaviour) of a much smaller shuffled document. Target: <= 100 ms for the
worst write.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from signals.core.processor import DEFAULT_MAX_DIFF_EDITS, POLICIES, Policy, Proposal, decide

TARGET_MS = 100.0


def _distinct(lines: int) -> list[str]:
    return [f"{i:04x}" for i in range(lines)]


def _shuffled(lines: int = 12_500) -> tuple[str, str]:
    old = _distinct(lines)
    new = old[:]
    random.Random(7).shuffle(new)
    return "\n".join(old), "\n".join(new)


def _reversed() -> tuple[str, str]:
    old = _distinct(12_500)
    return "\n".join(old), "\n".join(reversed(old))


def _mostly_blank() -> tuple[str, str]:
    rng = random.Random(7)
    old = ["# Notes"] + ["" if rng.random() < 0.98 else "- a" for _ in range(57_998)] + ["- end"]
    middle = old[1:-1]
    rng.shuffle(middle)
    return "\n".join(old), "\n".join([old[0], *middle, old[-1]])


def _two_lines() -> tuple[str, str]:
    rng = random.Random(7)
    old = [rng.choice(["- a", "- b"]) for _ in range(12_500)]
    new = old[:]
    rng.shuffle(new)
    return "\n".join(old), "\n".join(new)


SHAPES: dict[str, Callable[[], tuple[str, str]]] = {
    "12,500 distinct lines, shuffled": _shuffled,
    "12,500 distinct lines, reversed": _reversed,
    "58,000 lines, 98% blank, shuffled": _mostly_blank,
    "12,500 lines of two kinds, shuffled": _two_lines,
}


def _decide(prior: str, data: str, policy: Policy, **extra: Any) -> Proposal | None:
    return decide(data=data, fmt="markdown", scope="resource", has_snapshot=True, current_cache_key=None,
                  prior=prior, policy=policy, **extra)


def _median_cpu_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median CPU time (this process), so that other processes on the host count less."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def run(repeat: int = 9, unbudgeted_lines: int = 1_000) -> dict[str, Any]:
    """Measure every shape under both policies, then the baselines; return rows and the worst."""
    rows: list[dict[str, Any]] = []
    for name, shape in SHAPES.items():
        prior, data = shape()
        for policy in POLICIES:
            proposal = _decide(prior, data, policy)
            assert proposal is not None
            ms = _median_cpu_ms(partial(_decide, prior, data, policy), repeat)
            rows.append({"document": name, "bytes": len(data.encode()), "policy": policy, "ms": ms,
                         "mode": proposal.mode})
    prior, data = _shuffled()
    lines = prior.split("\n")
    lines[6_000] = "- one line edited"
    edited = "\n".join(lines)
    snapshot_ms = max(_median_cpu_ms(partial(
        decide, data=data, fmt="markdown", scope="resource", has_snapshot=False, current_cache_key=None,
        prior=None, policy=policy), repeat) for policy in POLICIES)
    edit_ms = max(_median_cpu_ms(partial(_decide, prior, edited, policy), repeat) for policy in POLICIES)
    small_prior, small_data = _shuffled(unbudgeted_lines)
    unbudgeted_ms = _median_cpu_ms(partial(_decide, small_prior, small_data, "mastra", max_diff_edits=None), 1)
    return {
        "rows": rows,
        "worst_ms": max(r["ms"] for r in rows),
        "snapshot_ms": snapshot_ms,
        "edit_ms": edit_ms,
        "unbudgeted_lines": unbudgeted_lines,
        "unbudgeted_ms": unbudgeted_ms,
        "budget": DEFAULT_MAX_DIFF_EDITS,
        "target_ms": TARGET_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    r = run(repeat=args.repeat)
    print(f"{'document':<38} {'bytes':>7} {'policy':>8} {'median CPU ms':>14} {'signal':>9}")
    for row in r["rows"]:
        print(f"{row['document']:<38} {row['bytes']:>7,} {row['policy']:>8} {row['ms']:>14.1f} {row['mode']:>9}")
    print(f"worst write: {r['worst_ms']:.1f} ms (target <= {r['target_ms']:.0f} ms; diff budget "
          f"{r['budget']} line edits)")
    print(f"baselines: snapshot only {r['snapshot_ms']:.2f} ms; one line edited {r['edit_ms']:.2f} ms; "
          f"no budget (Mastra), {r['unbudgeted_lines']:,} shuffled lines: {r['unbudgeted_ms']:.0f} ms")


if __name__ == "__main__":
    main()

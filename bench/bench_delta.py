"""Delta computation time by document size (issue: signal core).

Prints the median time to compute a Mastra-compatible hunks-only patch for 10-, 100- and
2,000-line Markdown documents with a few changed lines, beside difflib's unified_diff
(context 0) on the same inputs, measured in the same run. Target: < 2 ms at 2,000 lines.
"""

from __future__ import annotations

import argparse
import difflib
import random
import statistics
import time

from signals.core.diff import unified_patch


def _doc(lines: int, rng: random.Random) -> str:
    return "\n".join(f"- fact {i}: {rng.choice(['likes', 'lives in', 'works on'])} item {rng.randint(0, 99)}"
                     for i in range(lines))


def _edit(doc: str, rng: random.Random, changes: int = 3) -> str:
    lines = doc.split("\n")
    for _ in range(changes):
        lines[rng.randrange(len(lines))] = f"- changed {rng.random():.6f}"
    return "\n".join(lines)


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def run(sizes: tuple[int, ...] = (10, 100, 2000), repeat: int = 200) -> list[dict[str, float]]:
    """Measure and return one row per size."""
    rng = random.Random(7)
    rows = []
    for size in sizes:
        prior = _doc(size, rng)
        nxt = _edit(prior, rng)
        a, b = prior.split("\n"), nxt.split("\n")
        ours = _median_ms(lambda p=prior, n=nxt: unified_patch(p, n), repeat)
        base = _median_ms(lambda a=a, b=b: list(difflib.unified_diff(a, b, n=0, lineterm="")), repeat)
        rows.append({"lines": size, "ours_ms": ours, "difflib_ms": base, "ratio": ours / base})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"{'lines':>6} {'delta median ms':>16} {'difflib ms':>11} {'ours/difflib':>13}")
    for row in run(repeat=args.repeat):
        print(f"{row['lines']:>6} {row['ours_ms']:>16.3f} {row['difflib_ms']:>11.3f} {row['ratio']:>13.2f}")
    print("target: < 2 ms at 2000 lines")


if __name__ == "__main__":
    main()

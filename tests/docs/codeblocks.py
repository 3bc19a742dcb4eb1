"""The fenced code blocks of README.md and docs/**/*.md, and what each is marked as.

The convention (docs/contributing.md, "Code blocks in the docs"): an HTML comment on the
line right before a fence (blank lines between are allowed) marks the block:

- ``<!-- test: fragment -->`` (a reason may follow the word): not run, on purpose: a
  piece of a larger program, a configuration file for another system, a command that
  needs Docker or Kubernetes, an output;
- ``<!-- test: worker -->``: run with a worker process serving the page's Redis;
- ``<!-- test: quickstart -->``: a step of the README's quickstart, run in order by
  ``tests/docs/test_quickstart.py``.

A block with no marker runs as it is: ``python`` as a script, ``sh`` with bash (``set -eu``),
``json`` is parsed. A block of any other language must be marked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = ("python", "sh", "json")
MARKS = ("fragment", "worker", "quickstart")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*test:\s*(?P<mark>[a-z-]+)(?P<rest>[^>]*)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its mark and its text."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    mark: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site (the hooks' folder has none)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _mark_before(lines: list[str], index: int, path: Path) -> str | None:
    """The mark on the nearest non-blank line before ``lines[index]``, if it is one."""
    i = index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0:
        return None
    found = _MARK.match(lines[i])
    if found is None:
        if "<!-- test" in lines[i]:
            raise ValueError(f"{path}:{i + 1}: malformed test marker {lines[i].strip()!r}")
        return None
    mark = found["mark"]
    if mark not in MARKS:
        raise ValueError(f"{path}:{i + 1}: unknown test marker {mark!r} (known: {', '.join(MARKS)})")
    return mark


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order (indented fences in lists too)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        lang = opening["info"].strip().split(" ")[0].split("{")[0].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and not lines[j].strip().strip(fence[0])):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: code block never closed")
        found.append(Block(path, i + 1, lang, _mark_before(lines, i, path), "\n".join(body) + "\n"))
        i = j + 1
    return found

"""The file list is the architecture: no import cycles, modules of a readable size, and
comments that state what holds now (history lives in commit messages)."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("signals", "workers")
MAX_LINES = 400


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_import_cycles() -> None:
    """No module of signals/ or workers/ reaches itself through its imports, deferred
    imports included (grimp counts an import inside a function too)."""
    graph = grimp.build_graph(*PACKAGES)
    cycles = sorted({
        tuple(sorted((module, imported)))
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(imported, module)
    })
    assert cycles == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_the_size_limit(path: Path) -> None:
    """Each module is one concern: past about 400 lines it is split at its seams."""
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"


_HISTORY = re.compile(r"\b(used to|no longer|previously|formerly|the old |older records|was cubic|before the fix|"
                      r"the rule before|it was)\b", re.IGNORECASE)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_comments_state_what_holds_now(path: Path) -> None:
    """No comment or docstring tells history ("used to", "before", ...)."""
    found = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if _HISTORY.search(line)]
    assert found == []

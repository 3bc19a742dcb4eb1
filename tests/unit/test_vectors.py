"""Every reference vector of Mastra's published packages (tests/vectors, copied from shared/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from signals.core.cachekey import cache_key
from signals.core.diff import apply_patch, unified_patch
from signals.core.merge import deep_merge
from signals.core.render import render_markup
from signals.core.simulate import run_scenario
from workers.cli.app import main

VECTORS = Path(__file__).parent.parent / "vectors"
UNITS = json.loads((VECTORS / "units.json").read_text())
SCENARIOS = sorted((VECTORS / "scenarios").glob("*.json"))


@pytest.mark.parametrize("case", UNITS["cacheKey"], ids=lambda c: c["cacheKey"][7:15])
def test_cache_key(case: dict) -> None:
    """The cacheKey is sha256 over format, NUL, data."""
    assert cache_key(case["format"], case["data"]) == case["cacheKey"]
    assert len(case["cacheKey"]) == 71


@pytest.mark.parametrize("case", UNITS["patch"])
def test_patch(case: dict) -> None:
    """The hunks-only patch equals jsdiff's, and applying it gives the next text."""
    patch = unified_patch(case["prior"], case["next"])
    assert patch == case["patch"]
    assert apply_patch(case["prior"], patch) == case["next"]


@pytest.mark.parametrize("case", UNITS["render"])
def test_render(case: dict) -> None:
    """Rendering escapes contents and attributes and self-closes when empty."""
    assert render_markup(case["contents"], case["attributes"]) == case["rendered"]


@pytest.mark.parametrize("case", UNITS["merge"])
def test_merge(case: dict) -> None:
    """Schema-mode merge: null deletes, objects deep-merge, arrays replace."""
    assert deep_merge(case["existing"], case["update"]) == case["result"]


def _expected(path: Path) -> list[dict]:
    expected = VECTORS / "expected" / (path.stem + ".jsonl")
    return [json.loads(line) for line in expected.read_text().splitlines()]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    """The simulated runtime reproduces each expected step (the ``keys`` field too)."""
    got = list(run_scenario(json.loads(path.read_text())))
    assert got == _expected(path)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_simulate_command_is_byte_identical(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``wm-signals simulate --policy mastra FILE`` prints the expected file byte for byte."""
    assert main(["simulate", "--policy", "mastra", str(path)]) == 0
    expected = (VECTORS / "expected" / (path.stem + ".jsonl")).read_text()
    assert capsys.readouterr().out == expected

"""Differential tests against the real thing: jsdiff 8.0.4 and @mastra/memory 1.31.0.

The packages are installed from the npm registry into ``tests/.oracle`` (once, cached)
and driven by ``oracle.mjs``; fresh random cases are generated on every run and compared
field by field. Skipped, with the reason, when Node.js or npm is absent or the install
fails (no registry).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from signals.core.cachekey import js_trim
from signals.core.diff import unified_patch
from signals.core.simulate import run_scenario

pytestmark = pytest.mark.node

HERE = Path(__file__).parent
ORACLE_DIR = HERE.parent / ".oracle"
PACKAGES = ("diff@8.0.4", "@mastra/memory@1.31.0", "@mastra/core@1.71.0")
WEIRD = ["\u001c", "\u0085", "\ufeff", "\u2028", "\u180e", "\u00a0", "\u3000", "\t", "\r"]
WORDS = ["alpha", "beta", "- item", "", "# H", "x\r", "é", "😀", "a & <b>", "  indented", "- item"]


def _oracle_modules() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed: the differential oracle needs Node.js")
    modules = ORACLE_DIR / "node_modules"
    if not (modules / "@mastra" / "memory" / "package.json").exists():
        ORACLE_DIR.mkdir(exist_ok=True)
        (ORACLE_DIR / "package.json").write_text('{"name":"oracle","private":true}')
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *PACKAGES],
            cwd=ORACLE_DIR, capture_output=True, text=True, timeout=600, check=False,
        )
        if proc.returncode != 0:
            pytest.skip(f"npm could not install the oracle packages: {proc.stderr[-300:]}")
    return modules


def _ask(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    modules = _oracle_modules()
    proc = subprocess.run(
        ["node", str(HERE / "oracle.mjs")],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True, text=True, timeout=600, check=True,
        env={"WM_ORACLE_NODE_MODULES": str(modules), "WM_ORACLE_MASTRA": "1", "PATH": _path()},
    )
    return [json.loads(line) for line in proc.stdout.split("\n") if line]


def _path() -> str:
    return os.environ.get("PATH", "")


def _doc(rng: random.Random, lines: int) -> list[str]:
    return [rng.choice(WORDS) + (rng.choice(WEIRD) if rng.random() < 0.05 else "") for _ in range(lines)]


def _edit(rng: random.Random, doc: list[str]) -> list[str]:
    new = list(doc)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.4 and new:
            new[rng.randrange(len(new))] = rng.choice(WORDS)
        elif r < 0.7:
            new.insert(rng.randint(0, len(new)), rng.choice(WORDS))
        elif new:
            del new[rng.randrange(len(new))]
    return new


def test_patches_match_jsdiff() -> None:
    """Random prior/next pairs (repeats, CRLF, unicode) give jsdiff's exact hunks."""
    rng = random.Random()
    cases = []
    for _ in range(1500):
        old = _doc(rng, rng.randint(0, 30))
        new = _edit(rng, old)
        sep = rng.choice(["\n", "\n", "\r\n"])
        cases.append({"prior": sep.join(old), "next": sep.join(new)})
    cases.append({"prior": "\n".join(f"line {i}" for i in range(2000)),
                  "next": "\n".join(f"line {i}" if i % 500 else "changed" for i in range(2000))})
    answers = _ask(cases)
    for case, answer in zip(cases, answers, strict=True):
        assert unified_patch(case["prior"], case["next"]) == answer["patch"], case


def test_js_trim_matches_node() -> None:
    """js_trim strips exactly what String.prototype.trim strips."""
    texts = [w + "x" + w for w in [*WEIRD, "\u2029", "\u200b", "\u001f", "\u000b", " \n"]]
    answers = _ask([{"kind": "trim", "text": t} for t in texts])
    assert [js_trim(t) for t in texts] == [a["trimmed"] for a in answers]


def _scenario(rng: random.Random) -> dict[str, Any]:
    fmt = rng.choice(["markdown", "markdown", "json"])
    doc = _doc(rng, rng.randint(1, 12))
    steps = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.6:
            doc = _edit(rng, doc)
        step: dict[str, Any] = {"hasSnapshot": rng.random() < 0.75}
        pad = rng.choice(["", " ", "\n", "\ufeff", "\u0085", "\r\n"])
        sep = rng.choice(["\n"] * 4 + ["\r\n"])
        step["data"] = None if rng.random() < 0.05 else pad + sep.join(doc) + pad
        if rng.random() < 0.04:
            step["data"] = rng.choice([" \n ", "", "\ufeff"])
        if rng.random() < 0.05:
            step["template"] = None
        if rng.random() < 0.05:
            step["format"] = rng.choice(["markdown", "json"])
        if rng.random() < 0.05:
            step["scope"] = rng.choice(["thread", "resource", None])
        steps.append(step)
    sc: dict[str, Any] = {"format": fmt, "scope": rng.choice(["resource", "thread", None]), "steps": steps}
    if rng.random() < 0.2:
        sc["history"] = "no-value"
    return sc


def test_scenarios_match_mastra_processor() -> None:
    """Random scenarios through Mastra's real processor equal ``simulate --policy mastra``."""
    rng = random.Random()
    scenarios = [_scenario(rng) for _ in range(400)]
    answers = _ask([{"kind": "scenario", "scenario": sc} for sc in scenarios])
    fields = ("emitted", "mode", "cacheKey", "contents", "value", "delta", "attributes", "version")
    for sc, answer in zip(scenarios, answers, strict=True):
        ours = list(run_scenario(sc))
        for mine, theirs in zip(ours, answer["steps"], strict=True):
            for field in fields:
                assert mine[field] == theirs.get(field), (sc, mine["step"], field)

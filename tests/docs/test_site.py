"""The docs site builds in strict mode (every warning an error: a broken link or anchor, a
missing page, an API reference that does not resolve), and its CLI reference is the parser's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.codeblocks import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                reason="the docs extra is not installed (pip install -e '.[docs]')")


def _hook() -> object:
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "_hooks" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with ``mkdocs build --strict`` into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return out


def test_site_builds_strict(site: Path) -> None:
    """Every page of the nav is built."""
    for page in ("index.html", "cli/index.html", "api/index.html", "operations/index.html", "changelog/index.html"):
        assert (site / page).is_file(), page


def test_cli_reference_is_generated_from_the_parser(site: Path) -> None:
    """Every command and subcommand of build_parser() has its section on the CLI page, with
    every one of its flags."""
    hook = _hook()
    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    commands = hook.commands()  # type: ignore[attr-defined]
    assert "wm-signals worker" in commands and "wm-signals deploy acl" in commands
    for command in commands:
        assert f"<code>{command}</code>" in page, command
    for flag in ("--redis-url", "--if-version", "--from-start", "--policy", "--lag-per-replica"):
        assert flag in page, flag
    assert "<!-- cli-reference -->" not in page


def test_api_reference_covers_the_public_surface(site: Path) -> None:
    """Every name of ``signals.__all__`` has an entry in the API reference."""
    import signals  # noqa: PLC0415

    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    missing = [name for name in signals.__all__ if f'id="signals.{name}"' not in page]
    assert not missing, f"not in the API reference: {missing}"
    roles = sorted(set(re.findall(r":(?:class|meth|func|data|mod|attr|exc):", page)))
    assert not roles, f"Sphinx roles printed as they are (docs/_hooks/sphinx_roles.py): {roles}"

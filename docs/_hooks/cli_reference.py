"""MkDocs hook: the CLI reference, generated from the ``wm-signals`` argument parser.

argparse has no public way to list a parser's arguments and subcommands, so this build-time
hook reads ``_actions`` (what ``format_help`` itself reads); the CLI's own code does not.

``docs/cli.md`` holds a ``<!-- cli-reference -->`` marker; at build time this hook
replaces it with one section per command, walked from ``build_parser()`` (its usage, its
description and a table of its arguments with their defaults and help), so the reference
cannot drift from the parser. ``render()`` is also what ``tests/docs`` calls.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"
WIDTH = 100


def _build_parser() -> argparse.ArgumentParser:
    """The CLI's parser, from wherever the CLI's app module lives."""
    for name in ("workers.cli.app", "workers.cli"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        build = getattr(module, "build_parser", None)
        if build is not None:
            return build()  # type: ignore[no-any-return]
    raise RuntimeError("no build_parser() in workers.cli.app or workers.cli")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """``(name, parser, help)`` of each subcommand, in the parser's order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias
                    continue
                seen.add(id(sub))
                found.append((name, sub, helps.get(name, "")))
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help in (None, argparse.SUPPRESS):
        return ""
    formatter = parser._get_formatter()
    return _cell(formatter._expand_help(action))


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{option}`" for option in action.option_strings)
    metavar = action.metavar or action.dest.upper()
    if action.choices and not action.metavar:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    if action.nargs == "?":
        metavar = f"[{metavar}]"
    elif action.nargs in ("*", "+"):
        metavar = f"{metavar} ..."
    return ", ".join(f"`{option} {metavar}`" for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.option_strings and action.nargs == 0:  # a switch
        return ""
    if action.default in (None, argparse.SUPPRESS) or action.default == []:
        return ""
    return f"`{action.default}`"


def _section(path: list[str], parser: argparse.ArgumentParser, summary: str, depth: int) -> list[str]:
    title = " ".join(path)
    lines = [f"{'#' * depth} `{title}`", ""]
    text = parser.description or summary
    if text:
        lines += [" ".join(text.split()), ""]
    usage = parser.format_usage().strip().removeprefix("usage: ")
    lines += ["```text", usage, "```", ""]
    rows = [action for action in parser._actions
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)]
    if rows:
        lines += ["| argument | default | what |", "|---|---|---|"]
        lines += [f"| {_name(a)} | {_default(a)} | {_help(parser, a)} |" for a in rows]
        lines.append("")
    if parser.epilog:
        lines += [" ".join(parser.epilog.split()), ""]
    for name, sub, help_text in _subcommands(parser):
        lines += _section([*path, name], sub, help_text, min(depth + 1, 6))
    return lines


def render() -> str:
    """The reference: one section per command and subcommand, in the parser's order
    (usage lines wrapped at a fixed width, whatever the terminal)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        parser = _build_parser()
        lines: list[str] = []
        for name, sub, help_text in _subcommands(parser):
            lines += _section(["wm-signals", name], sub, help_text, 3)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(lines)


def commands() -> list[str]:
    """Every command path the reference documents (``wm-signals dlq list``, ...)."""
    found: list[str] = []

    def walk(path: list[str], parser: argparse.ArgumentParser) -> None:
        for name, sub, _ in _subcommands(parser):
            found.append(" ".join([*path, name]))
            walk([*path, name], sub)

    walk(["wm-signals"], _build_parser())
    return found


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Put the generated reference in place of the marker on the CLI page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise RuntimeError(f"docs/{PAGE} has no {MARKER} marker for the generated CLI reference")
    return markdown.replace(MARKER, render())

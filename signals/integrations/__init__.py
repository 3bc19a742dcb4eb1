"""Adapters that put working memory into the agent frameworks people already run.

One module per framework, each importing its framework lazily (install the extra named
in its docstring), each thin over the one agent-side core in :mod:`signals.agent`.
"""

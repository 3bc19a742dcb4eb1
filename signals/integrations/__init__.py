"""Adapters that put working memory into the agent frameworks people already run.

One module per framework, each importing its framework lazily (install the extra named
in its docstring), each thin over the one agent-side core on top of
:class:`signals.agent.AgentWorkingMemory`: :mod:`signals.integrations._windows` (where the
working-memory messages go in the framework's message list, what its trimming does to
them) and :mod:`signals.integrations._core` (the codec interface, the tool spec, helpers).
"""

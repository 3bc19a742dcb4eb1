"""Adapters that put working memory into the agent frameworks people already run.

One module per framework, each importing its framework lazily (install the extra named
in its docstring), each thin over the one agent-side core: :mod:`signals.integrations._core` (where the
working-memory messages go in the framework's message list, what its trimming does to
them, the tool spec) on top of :class:`signals.agent.AgentWorkingMemory`.
"""

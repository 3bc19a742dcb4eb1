"""The Redis edge: the client, the key layout and ACL roles, the Lua scripts, and
everything that reads or writes Redis on the library side (the write API, subscriptions,
replay and verification, delivery logs, dead letters, status). It builds on
:mod:`signals.core` and never imports the agent-facing API above it."""

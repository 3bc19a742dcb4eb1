"""The pure core: wire types, cache keys, the diff, the signal decision, lane numbering,
context-window tracking, rendering and the working-memory rules. No I/O: nothing here
imports Redis, anyio or :mod:`signals.streams` (an import-linter contract checks it), so
every rule of the contract can be tested, replayed and simulated without a server."""

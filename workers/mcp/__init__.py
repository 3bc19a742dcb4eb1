"""``wm-signals mcp``: working memory for every MCP client, with changes pushed as they happen.

A server on the official MCP Python SDK (the ``mcp`` extra): tools to read, set and look
back at the caller's working memory (:mod:`workers.mcp.tools`), resources with URI
templates rendering it as the model receives it (:mod:`workers.mcp.resources`,
:mod:`workers.mcp.uris`), and resource-updated notifications, both the 2025
``resources/subscribe`` and the 2026 ``subscriptions/listen``, sent when a worker commits
a new signal for the lane, read from the lane's signal stream in Redis whichever process
wrote (:mod:`workers.mcp.fanout`, :mod:`workers.mcp.subscriptions`). Over stdio the
resource is fixed by flags; over streamable HTTP a bearer token names it
(:mod:`workers.mcp.tokens`, :mod:`workers.mcp.access`). Nothing here imports the CLI.
"""

"""Serve the UI with uvicorn on the caller's event loop, over the caller's Redis client."""

from __future__ import annotations

from typing import Any

import uvicorn

from signals.core.signing import Signer
from signals.streams.keys import Keys
from workers.ui.app import create_app
from workers.ui.options import UiOptions

__all__ = ("serve",)

#: Seconds open live pages get to close at a stop before they are cut.
GRACE_S = 3


async def serve(redis: Any, keys: Keys, options: UiOptions, *, signer: Signer | None = None,
                access_log: bool = True) -> None:
    """Serve until SIGINT or SIGTERM (uvicorn's handlers), then close open live pages within :data:`GRACE_S`."""
    config = uvicorn.Config(create_app(redis, keys, options, signer=signer), host=options.host, port=options.port,
                            lifespan="off", proxy_headers=False, server_header=False, date_header=True,
                            access_log=access_log, log_level="info", timeout_graceful_shutdown=GRACE_S,
                            loop="none", http="h11", ws="none")
    await uvicorn.Server(config).serve()

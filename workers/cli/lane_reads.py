"""What ``replay`` and ``export`` read of a lane: its retained signals, and a thread's
delivery log, with the same refusals for both."""

from __future__ import annotations

import argparse
from typing import Any

from redis import exceptions as redis_exc

from signals.core.models import Delivery, Signal
from signals.core.signing import Signer
from signals.core.wire import parse_version
from signals.errors import CorruptDataError, InvalidInputError
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys, lane_id
from signals.streams.progress import lane_progress
from signals.streams.replay import read_signals
from workers.cli.args import lane_scope

__all__ = ("NO_SIGNALS_HINT", "compacted_version", "load_lane", "processed_version")

#: Why a lane read from Redis may hold no signal: ``replay`` and ``export`` say the same.
NO_SIGNALS_HINT = "no worker has processed its writes yet, or check --namespace, --scope and the ids"


async def load_lane(redis: Any, keys: Keys, args: argparse.Namespace,
                signer: Signer | None = None) -> tuple[list[tuple[str, Signal]], list[Delivery]]:
    deliveries: list[Delivery] = []
    if getattr(args, "deliveries", False):
        if not args.thread:
            raise InvalidInputError("--deliveries needs --thread")
        deliveries = await DeliveryLog(redis, keys).read(args.thread)
    elif args.command == "export" and args.thread and not args.no_deliveries:
        try:
            deliveries = await DeliveryLog(redis, keys).read(args.thread)
        except CorruptDataError as e:  # any agent user may append to any thread's log
            raise CorruptDataError(f"{e}; no file was written (--no-deliveries exports the lane's signals "
                                   "without the thread's delivery log)") from e
    signals: list[tuple[str, Signal]] = []
    if not getattr(args, "deliveries", False):
        lane = lane_id(lane_scope(args), args.resource, args.thread)
        signals = await read_signals(redis, keys, lane, signer=signer)
    return signals, deliveries


async def processed_version(redis: Any, keys: Any, lane: str) -> int | None:
    """The document version the workers processed the lane up to (``None``: unreadable, or a
    Redis user that may not read the workers' tracking)."""
    try:
        [progress] = await lane_progress(redis, keys, [lane])
    except redis_exc.ResponseError:
        return None
    return None if isinstance(progress, CorruptDataError) else progress[1]


async def compacted_version(redis: Any, keys: Keys, lane: str) -> int | None:
    """The version a compaction left the lane's history starting at (its tracking's ``cv``),
    or ``None``: never compacted, not readable (a reader's ACL user has no access to the
    tracking), or not a version."""
    try:
        raw = await redis.hget(keys.track(lane), "cv")
    except redis_exc.ResponseError:
        return None
    try:
        return parse_version(raw, "cv") if raw is not None else None
    except CorruptDataError:
        return None

"""The delivery log: what an agent loop put into its model's window, step by step.

Per thread, an append-only Redis stream of :class:`~signals.models.Delivery` records
(step, lane version, mode, reason, contents), bounded by ``retention`` entries
(approximate trimming). :meth:`DeliveryLog.view_at` answers "what working memory could
the model rebuild at step N" from the log: the last snapshot delivered at or before N
plus the deltas delivered after it, up to N.
"""

from __future__ import annotations

from dataclasses import dataclass

from signals._time import now_iso
from signals._util import Client, xrange
from signals.codec import FIELD, decode_delivery, encode_json
from signals.keys import Keys, validate_id
from signals.models import Delivery
from signals.processor import apply_delta
from signals.window import StepResult

__all__ = ("DeliveryLog", "ModelView")


@dataclass(frozen=True, slots=True)
class ModelView:
    """The working memory the model could rebuild at a step."""

    step: int
    version: int
    text: str
    deliveries: tuple[Delivery, ...]


class DeliveryLog:
    """Append and read a thread's delivery log."""

    def __init__(self, redis: Client, keys: Keys, *, retention: int = 10_000) -> None:
        self.redis = redis
        self.keys = keys
        self.retention = retention

    async def record(self, thread_id: str, lane: str, result: StepResult) -> list[Delivery]:
        """Append the step's additions (nothing when it added nothing)."""
        if not result.add:
            return []
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        now = now_iso()
        records = [Delivery(thread_id=thread_id, step=inj.step, lane=lane, version=inj.version,
                            mode=inj.mode, reason=inj.reason, cache_key=inj.cache_key,
                            contents=inj.contents, attributes=inj.attributes, at=now)
                   for inj in result.add]
        async with self.redis.pipeline(transaction=False) as pipe:
            for record in records:
                pipe.xadd(stream, {FIELD: encode_json(record)}, maxlen=self.retention, approximate=True)
            await pipe.execute()
        return records

    async def read(self, thread_id: str, *, from_step: int = 0, to_step: int | None = None) -> list[Delivery]:
        """The thread's retained deliveries in order, optionally within a step range."""
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        out: list[Delivery] = []
        cursor = "-"
        while True:
            entries = await xrange(self.redis, stream, start=cursor, count=1000)
            for _, fields in entries:
                record = decode_delivery(fields[FIELD])
                if record.step >= from_step and (to_step is None or record.step <= to_step):
                    out.append(record)
            if len(entries) < 1000:
                return out
            cursor = "(" + entries[-1][0]

    async def view_at(self, thread_id: str, step: int) -> ModelView | None:
        """What the model could rebuild at ``step`` (``None`` before any delivery)."""
        records = await self.read(thread_id, to_step=step)
        snapshot = max((i for i, r in enumerate(records) if r.mode == "snapshot"), default=None)
        if snapshot is None:
            return None
        chain = records[snapshot:]
        text = chain[0].contents
        for record in chain[1:]:
            if record.mode == "delta":
                text = apply_delta(text, record.contents, record.attributes.patch)
            else:
                text = record.contents
        return ModelView(step, chain[-1].version, text, tuple(chain))

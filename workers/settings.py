"""Worker and CLI configuration: one typed object from flags and ``WM_SIGNALS_*`` variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from signals.keys import Keys
from signals.lane import LaneOptions
from workers.consumer import ConsumerOptions

__all__ = ("Settings",)


class Settings(BaseSettings):
    """Everything a worker or the CLI needs; environment variables use the ``WM_SIGNALS_`` prefix.

    ``redis_url`` unset means: start an embedded Redis server for the run. ``cluster``
    means the URL names a node of a Redis Cluster (the embedded server is never one).
    """

    model_config = SettingsConfigDict(env_prefix="WM_SIGNALS_", extra="ignore")

    redis_url: str | None = None
    cluster: bool = False
    namespace: str = "wm"
    partitions: int = Field(16, ge=1, le=4096)
    policy: Literal["mastra", "compact"] = "compact"
    snapshot_every: int = Field(20, ge=1)
    keep_snapshots: int = Field(3, ge=1)
    omit_delta_value: bool = False
    batch: int = Field(500, ge=1, le=10_000)
    block_ms: int = Field(100, ge=1)
    claim_idle_ms: int = Field(15_000, ge=100)
    maintenance_interval_s: float = Field(2.0, gt=0)
    max_attempts: int = Field(3, ge=1)
    grace_s: float = Field(10.0, ge=0)
    reconnect_timeout_s: float = Field(300.0, gt=0)
    consumer_name: str | None = None
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "info"

    @model_validator(mode="after")
    def _cluster_needs_url(self) -> Settings:
        if self.cluster and not self.redis_url:
            raise ValueError("cluster mode needs a Redis URL (a node of the cluster)")
        return self

    def keys(self) -> Keys:
        """The key layout."""
        return Keys(self.namespace, self.partitions)

    def consumer_options(self) -> ConsumerOptions:
        """The consumer's options."""
        return ConsumerOptions(
            lane=LaneOptions(self.policy, self.snapshot_every, self.omit_delta_value),
            batch=self.batch,
            block_ms=self.block_ms,
            keep_snapshots=self.keep_snapshots,
            claim_idle_ms=self.claim_idle_ms,
            max_attempts=self.max_attempts,
        )

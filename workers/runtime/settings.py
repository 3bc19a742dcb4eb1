"""Worker and CLI configuration: one typed object from flags and ``WM_SIGNALS_*`` variables."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Literal

import structlog
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from signals.core.lane import LaneOptions
from signals.core.retention import DEFAULT_RETAIN_SIGNALS, MAX_AGE_MS, parse_duration
from signals.core.signing import MAX_VERIFY_KEYS, Signer
from signals.core.tokens import CounterName
from signals.errors import InvalidInputError, MissingDependencyError
from signals.streams.durability import Durability
from signals.streams.keys import Keys
from signals.streams.sentinel import parse_sentinels
from signals.streams.urls import TLSOptions
from signals.tokenizers import check_counter

__all__ = ("MIN_SIGNING_KEY_BYTES", "Settings")

log = structlog.get_logger(__name__)
_LANE = LaneOptions()

#: The shortest signing key accepted (bytes of its UTF-8 text), e.g. ``openssl rand -hex 32`` gives 64.
MIN_SIGNING_KEY_BYTES = 16


class Settings(BaseSettings):
    """Everything a worker or the CLI needs; environment variables use the ``WM_SIGNALS_`` prefix.

    ``redis_url`` unset (and no Sentinel): only ``demo`` runs, on an embedded server it
    starts for the run; every other command refuses (see docs/cli-defaults.md). ``cluster``
    means the URL names a node of a Redis Cluster.

    TLS (``rediss://`` URLs only): ``tls_ca_file`` is the CA the server's certificate must
    chain to (default: the system's trust store), ``tls_cert_file``/``tls_key_file`` the
    client certificate and its key for servers with ``tls-auth-clients yes``. The server is
    always verified; ``tls_insecure_skip_verify`` is the only way to turn that off (URL
    options such as ``ssl_cert_reqs=none`` are refused).

    ``signing_key`` (or ``signing_key_file``, a file holding it: one line of text, surrounding
    whitespace ignored) is the key shared by workers and agent loops to authenticate signals;
    at least :data:`MIN_SIGNING_KEY_BYTES` bytes. ``verify_keys`` (a JSON list in
    ``WM_SIGNALS_VERIFY_KEYS``, or ``verify_keys_file``: one key per line, blank lines
    ignored) are further keys whose signals readers accept while a rotation overlaps
    (see :meth:`signer` and ``docs/operations/signing-keys.md``); they need a signing key.

    Retention (see :mod:`signals.core.retention`): ``retain_signals`` signals at least per lane
    and, with ``retain_age`` (``90s``, ``12h``, ``7d``, seconds, or ISO 8601), everything
    younger. The engine's own tuning (``batch``, ``block_ms``, ``claim_idle_ms``,
    ``max_attempts``) is ``None`` unless set: the engine's defaults
    (:class:`workers.engine.options.ConsumerOptions`) apply, and lane shaping defaults to
    :class:`signals.core.lane.LaneOptions`' own.
    Compaction (see :mod:`workers.engine.compaction`): a lane whose last signal is older
    than ``compact_after`` (a duration as ``retain_age`` takes it; one day by default) and
    than ``retain_age`` keeps one snapshot of its last version; the maintenance looks at
    ``compact_batch`` lanes per pass (500 by default; 0: no compaction). ``omit_delta_value``
    (true by default) leaves a delta's whole text out of its stream entry (readers rebuild it).
    Operations (see :mod:`workers.ops.health`, :mod:`workers.runtime.supervisor`): ``metrics_port``
    serves ``/metrics``, ``/livez`` and ``/readyz`` on ``metrics_addr`` (off by default;
    loopback unless told, containers pass ``0.0.0.0``); ``processes`` consumer processes
    (``auto``: one per core, at most one per partition) under one supervisor;
    ``health_interval_s`` paces the monitor task (readiness, gauges, heartbeat),
    ``heartbeat_ttl_s`` is the heartbeat's TTL, ``liveness_s`` the liveness bound (at
    least 3 x ``block_ms``).
    ``sentinel`` (``HOST:PORT,...``) with ``sentinel_master`` connects through Redis
    Sentinel (see :func:`workers.runtime.connect.open_sentinel`); ``sentinel_username``/``sentinel_password``
    authenticate on the sentinels. ``write_min_replicas`` N > 0 makes writes wait for N
    replicas (``write_replica_timeout_ms``), see :mod:`signals.streams.durability`.

    Every text setting must be valid UTF-8 (an environment variable holding other bytes is
    refused, not passed on with escapes).
    """

    # every number finite: an infinite heartbeat TTL would crash the worker (OverflowError), an
    # infinite grace or interval would silently mean never
    model_config = SettingsConfigDict(env_prefix="WM_SIGNALS_", extra="ignore", allow_inf_nan=False)

    redis_url: str | None = None
    cluster: bool = False
    sentinel: str | None = None
    sentinel_master: str | None = None
    sentinel_username: str | None = None
    sentinel_password: SecretStr | None = None
    write_min_replicas: int = Field(0, ge=0, le=1000)
    write_replica_timeout_ms: int = Field(1000, ge=1, le=600_000)
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_insecure_skip_verify: bool = False
    signing_key: SecretStr | None = None
    signing_key_file: str | None = None
    verify_keys: list[SecretStr] = Field(default_factory=list)
    verify_keys_file: str | None = None
    namespace: str = "wm"
    partitions: int = Field(16, ge=1, le=4096)
    policy: Literal["mastra", "compact"] = _LANE.policy
    snapshot_every: int = Field(_LANE.snapshot_every, ge=1)
    retain_signals: int = Field(DEFAULT_RETAIN_SIGNALS, ge=1)
    retain_age: timedelta | None = None
    omit_delta_value: bool = _LANE.omit_delta_value
    compact_after: timedelta | None = None
    compact_batch: int | None = Field(None, ge=0, le=100_000)
    max_diff_edits: int = Field(_LANE.max_diff_edits or 0, ge=0, le=100_000)
    batch: int | None = Field(None, ge=1, le=10_000)
    block_ms: int | None = Field(None, ge=1, le=60_000)  # a read blocks this long, and a stop waits for it
    # a worker's bound on one reply (signals.streams.client.connect): a writer's huge entry is dead-lettered unread
    max_reply_bytes: int = Field(32 << 20, ge=1 << 20, le=1 << 31)
    claim_idle_ms: int | None = Field(None, ge=100, le=7 * 86_400_000)  # within Redis's XAUTOCLAIM range
    maintenance_interval_s: float = Field(2.0, gt=0)
    max_attempts: int | None = Field(None, ge=1)
    grace_s: float = Field(10.0, ge=0, le=86_400)  # the --processes supervisor waits grace_s + 5 for a child
    reconnect_timeout_s: float = Field(300.0, gt=0)
    consumer_name: str | None = None
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    # the compact policy's size test counts with it: bytes4, or cl100k (the tokens extra)
    token_counter: CounterName = "bytes4"  # noqa: S105 - a counter's name, not a secret
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_addr: str = "127.0.0.1"
    processes: int | Literal["auto"] = 1
    health_interval_s: float = Field(1.0, gt=0, le=60)
    heartbeat_ttl_s: float = Field(10.0, gt=0, le=86_400)  # Redis refused a longer one: no heartbeat, ever
    liveness_s: float = Field(30.0, gt=0)

    @field_validator("*", mode="after")
    @classmethod
    def _utf8(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"not valid UTF-8 (an undecodable byte at position {e.start})") from e
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, value: object) -> object:
        """Any case, and the standard library's aliases ``warn`` and ``fatal`` (logging
        accepts them, so a deployment may set them)."""
        if not isinstance(value, str):
            return value
        level = value.strip().lower()
        return {"warn": "warning", "fatal": "critical"}.get(level, level)

    @field_validator("token_counter", mode="after")
    @classmethod
    def _counter_available(cls, value: str) -> str:
        try:
            check_counter(value)
        except MissingDependencyError as e:
            raise ValueError(str(e)) from e
        return value

    @field_validator("metrics_addr")
    @classmethod
    def _ip_address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError as e:
            raise ValueError(f"{value!r} is not an IP address (e.g. 127.0.0.1, 0.0.0.0 or ::)") from e
        return value

    @model_validator(mode="after")
    def _heartbeat_outlives_a_tick(self) -> Settings:
        if self.heartbeat_ttl_s <= self.health_interval_s:
            raise ValueError(f"heartbeat_ttl_s ({self.heartbeat_ttl_s}) must exceed health_interval_s "
                             f"({self.health_interval_s}): the heartbeat would expire between two writes")
        return self

    @model_validator(mode="after")
    def _processes_fit(self) -> Settings:
        if isinstance(self.processes, int) and not 1 <= self.processes <= self.partitions:
            raise ValueError(f"processes must be between 1 and the partition count ({self.partitions}): "
                             "each process reads its own partitions")
        return self

    @model_validator(mode="after")
    def _cluster_needs_url(self) -> Settings:
        if self.cluster and not self.redis_url:
            raise ValueError("cluster mode needs a Redis URL (a node of the cluster)")
        return self

    @model_validator(mode="after")
    def _sentinel_mode(self) -> Settings:
        if (self.sentinel is None) != (self.sentinel_master is None):
            raise ValueError("sentinel and sentinel_master go together (--sentinel HOST:PORT,... --sentinel-master "
                             "NAME)")
        if self.sentinel is None:
            return self
        if self.cluster:
            raise ValueError("sentinel and cluster are two connection modes: give one")
        try:
            parse_sentinels(self.sentinel)
        except InvalidInputError as e:
            raise ValueError(str(e)) from e
        if not self.sentinel_master or not self.sentinel_master.strip():
            raise ValueError("sentinel_master must name the monitored master")
        return self

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> Settings:
        if self.tls() is not None and not (self.redis_url or "").startswith("rediss://"):
            shown = "none is configured" if not self.redis_url else "it is not rediss://"
            hint = "; with sentinel, a host-less one: rediss://USER:PASSWORD@/0" if self.sentinel else ""
            raise ValueError(f"TLS settings (tls_*) need a rediss:// Redis URL ({shown}{hint})")
        return self

    @model_validator(mode="after")
    def _load_signing_key(self) -> Settings:
        path = self.signing_key_file
        if path is not None:
            if self.signing_key is not None:
                raise ValueError("set one of signing_key and signing_key_file, not both")
            try:
                text = Path(path).read_bytes().decode("utf-8").strip()
            except OSError as e:
                raise ValueError(f"signing_key_file {path}: {e.strerror or e}") from e
            except UnicodeDecodeError as e:
                raise ValueError(f"signing_key_file {path}: not UTF-8 text (byte {e.start})") from e
            self.signing_key = SecretStr(text)
        if self.signing_key is not None and len(self.signing_key.get_secret_value().encode()) < MIN_SIGNING_KEY_BYTES:
            raise ValueError(f"the signing key must be at least {MIN_SIGNING_KEY_BYTES} bytes")
        return self

    @model_validator(mode="after")
    def _load_verify_keys(self) -> Settings:
        path = self.verify_keys_file
        if path is not None:
            if self.verify_keys:
                raise ValueError("set one of verify_keys and verify_keys_file, not both")
            try:
                text = Path(path).read_bytes().decode("utf-8")
            except OSError as e:
                raise ValueError(f"verify_keys_file {path}: {e.strerror or e}") from e
            except UnicodeDecodeError as e:
                raise ValueError(f"verify_keys_file {path}: not UTF-8 text (byte {e.start})") from e
            self.verify_keys = [SecretStr(line.strip()) for line in text.splitlines() if line.strip()]
        if self.verify_keys and self.signing_key is None:
            raise ValueError("verify_keys need a signing key (signing_key or signing_key_file): they are the keys "
                             "accepted besides it while a rotation overlaps")
        for n, key in enumerate(self.verify_keys, 1):
            if len(key.get_secret_value().encode()) < MIN_SIGNING_KEY_BYTES:
                raise ValueError(f"verification key {n} must be at least {MIN_SIGNING_KEY_BYTES} bytes")
        if len(self.verify_keys) > MAX_VERIFY_KEYS:
            raise ValueError(f"at most {MAX_VERIFY_KEYS} verification keys, got {len(self.verify_keys)}")
        return self

    @field_validator("retain_age", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return _duration_setting(value)

    @field_validator("compact_after", mode="before")
    @classmethod
    def _compact_after(cls, value: object) -> object:
        """A duration as ``retain_age`` takes it; zero (or empty) compacts every lane whose
        last signal is older than the retention's age."""
        if value is None:
            return None
        parsed = _duration_setting(value)
        return timedelta(0) if parsed is None else parsed

    @field_validator("retain_age", "compact_after", mode="after")
    @classmethod
    def _not_negative(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(0):
            raise ValueError("a duration cannot be negative")
        if value is not None and value > timedelta(milliseconds=MAX_AGE_MS):
            raise ValueError("a duration longer than 100 years")
        return value

    def warn_unknown_variables(self) -> None:
        """Log a warning per ``WM_SIGNALS_*`` variable that names no setting (a misspelt one
        would otherwise leave its setting at the default without a word), once logging is
        configured (a worker configures it from these very settings)."""
        for name in unknown_variables(os.environ):
            log.warning("settings.unknown_variable", variable=name[:80],
                        note="no setting has this name: it is ignored (see docs/operations/worker.md, Settings)")

    def keys(self) -> Keys:
        """The key layout."""
        return Keys(self.namespace, self.partitions)

    def tls(self) -> TLSOptions | None:
        """The TLS options, or ``None`` when no TLS setting is given (``rediss://`` then
        verifies against the system's trust store)."""
        if not (self.tls_ca_file or self.tls_cert_file or self.tls_key_file or self.tls_insecure_skip_verify):
            return None
        return TLSOptions(ca_file=self.tls_ca_file, cert_file=self.tls_cert_file, key_file=self.tls_key_file,
                          insecure_skip_verify=self.tls_insecure_skip_verify)

    def durability(self) -> Durability | None:
        """The write durability setting, or ``None`` when writes take the master's word."""
        if not self.write_min_replicas:
            return None
        return Durability(self.write_min_replicas, self.write_replica_timeout_ms)

    def signing_key_bytes(self) -> bytes | None:
        """The signal signing key as bytes (its UTF-8 text), or ``None`` when signing is off."""
        return None if self.signing_key is None else self.signing_key.get_secret_value().encode("utf-8")

    def signer(self) -> Signer | None:
        """The signer of these settings: signs with ``signing_key``, accepts it and every
        one of ``verify_keys`` (``None`` when signing is off)."""
        key = self.signing_key_bytes()
        if key is None:
            return None
        return Signer(key, tuple(k.get_secret_value().encode("utf-8") for k in self.verify_keys))

    def process_count(self) -> int:
        """How many consumer processes to run: ``processes``, ``auto`` being one per core
        (at most one per partition)."""
        if self.processes == "auto":
            return max(1, min(os.cpu_count() or 1, self.partitions))
        return self.processes


#: ``WM_SIGNALS_*`` variables read outside the settings (the CLI's traceback switch).
_OTHER_VARIABLES = frozenset({"WM_SIGNALS_TRACEBACK"})


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """The ``WM_SIGNALS_*`` variables of ``environ`` that name no setting (any case)."""
    known = {"WM_SIGNALS_" + name.upper() for name in Settings.model_fields} | _OTHER_VARIABLES
    return sorted(name for name in environ if name.upper().startswith("WM_SIGNALS_") and name.upper() not in known)


def _duration_setting(value: object) -> object:
    """``retain_age`` before pydantic's own parsing: ``None``, empty or zero mean none; a
    text (``90s``, ``30m``, ``12h``, ``7d``, ``2w``, ``500ms``, or seconds: ``3600``) is
    parsed here, except ISO 8601 (``P1D``), which pydantic's ``timedelta`` parses as it
    does numbers of seconds.

    Raises:
        ValueError: a text that is not a duration (pydantic reports it, naming the setting).
    """
    if isinstance(value, str) and not value.strip().upper().startswith(("P", "-")):
        try:
            value = parse_duration(value) if value.strip() else None
        except InvalidInputError as e:
            raise ValueError(str(e)) from e
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return None
    if isinstance(value, timedelta) and not value:
        return None
    return value

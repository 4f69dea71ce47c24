"""The store's frozen configuration, kept apart from its running state."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from .errors import InvalidArgumentError

__all__ = ["StoreConfig", "SyncPolicy"]

SyncPolicy = Literal["always", "interval", "none"]
_SYNC_POLICIES = ("always", "interval", "none")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Container-level settings (Pravega's service config). Validated at construction.

    - ``max_watermark_lag_ms``: a segment idle for longer than this gets its watermark
      advanced by the watermark advancer (PDP-26 "Max Watermark Lag").
    - ``polling_period_ms``: how often the advancer looks for idle segments.
    - ``advancer_thread``: run the advancer as a background thread on the wall clock.
      ``None`` means "when the clock is a ``WallClock``"; simulations drive passes
      themselves with ``SegmentStore.advance_idle_watermarks()``.
    - ``sync``: durability of appends with a data directory: ``"always"`` (fsync before
      the acknowledgement), ``"interval"`` (group commit every ``sync_interval_ms``),
      ``"none"`` (the OS decides).
    - ``snapshot_every_ops``: write a metadata snapshot and truncate the log after this
      many logged operations.
    - ``eviction_age_ms`` / ``max_active_segments``: segments unused for that long, or
      the least recently used beyond that count, leave the in-memory active set.
    - ``cache_bytes``: segment bytes kept in memory when there is a data directory.
    - ``max_append_bytes``: the largest single append accepted; by default 8 MiB + 8 bytes,
      a Pravega writer's largest block (an 8 MiB event and its 8-byte header), which the
      Pravega endpoints (``segmentstore.pravega``) store as one append.
    - ``transaction_lease_ms``: an open transaction with no write (append, attribute
      update, ``ping``) for this long, on the ingestion clock, is aborted by the
      advancer's pass, as Pravega's transaction lease: a writer that died or a failed
      Spark task attempt does not leave it open for ever. Sealed (committing)
      transactions are not aborted.
    """

    max_watermark_lag_ms: int = 10_000
    polling_period_ms: int = 1_000
    advancer_thread: bool | None = None
    sync: SyncPolicy = "none"
    sync_interval_ms: int = 50
    snapshot_every_ops: int = 100_000
    eviction_age_ms: int = 600_000
    max_active_segments: int = 100_000
    cache_bytes: int = 256 * 1024 * 1024
    max_append_bytes: int = 8 * 1024 * 1024 + 8
    transaction_lease_ms: int = 600_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "sync":
                if value not in _SYNC_POLICIES:
                    raise InvalidArgumentError(
                        f"StoreConfig.sync must be one of {_SYNC_POLICIES}, got {value!r}"
                    )
            elif f.name == "advancer_thread":
                if value is not None and not isinstance(value, bool):
                    raise InvalidArgumentError(
                        f"StoreConfig.advancer_thread must be a bool or None, got {value!r}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgumentError(
                    f"StoreConfig.{f.name} must be an int, got {type(value).__name__} {value!r}"
                )
            elif value <= 0:
                raise InvalidArgumentError(f"StoreConfig.{f.name} must be > 0, got {value}")

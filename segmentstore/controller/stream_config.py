"""A stream's configuration as Pravega's controller keeps it: scaling and retention policies, tags.

``StreamConfig`` is what ``create`` and ``update`` records carry (``to_record``) and what
``get_stream_config`` answers. What ingestwm does with it:

- ``min_segments`` is the number of segments a stream starts with; an update that asks
  for a fixed count other than the active one, or for more than are active, rescales
  the stream to that many equal ranges (as Pravega's update does).
- Auto-scaling by event or byte rate (``target_rate``, ``scale_factor``) is kept and
  answered, not enforced: ingestwm scales when asked (``scale_stream``, the simulator's
  load scaling), never by itself.
- Retention by time or size is kept and answered, not enforced: ingestwm never deletes
  data on its own (truncate a stream at a cut for that).
- Tags are kept in order, without repeats, at most ``MAX_TAGS`` of ``MAX_TAG_CHARS``.

A stream created through ingestwm's API has ``default_config(initial_segments)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import DataCorruptionError, InvalidArgumentError
from ..limits import INT64_MAX, MAX_STREAM_SEGMENTS

__all__ = [
    "StreamConfig",
    "SCALING_KINDS",
    "RETENTION_KINDS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "default_config",
]

SCALING_KINDS = ("fixed", "by_rate_kbytes", "by_rate_events")
"""Pravega's ``FIXED_NUM_SEGMENTS``, ``BY_RATE_IN_KBYTES_PER_SEC``, ``BY_RATE_IN_EVENTS_PER_SEC``."""
RETENTION_KINDS = ("none", "time", "size")
"""No retention, by time (``retention_param`` in ms) or by size (in bytes), as Pravega's."""
MAX_TAGS = 128
MAX_TAG_CHARS = 256
_I32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """A stream's policies and tags; checked on construction (``InvalidArgumentError`` names the field)."""

    scaling_kind: str = "fixed"
    target_rate: int = 0
    scale_factor: int = 0
    min_segments: int = 1
    retention_kind: str = "none"
    retention_param: int = 0
    retention_max: int = 0
    tags: tuple[str, ...] = ()
    timestamp_aggregation_timeout_ms: int = 0
    rollover_size_bytes: int = 0

    def __post_init__(self) -> None:
        if self.scaling_kind not in SCALING_KINDS:
            raise InvalidArgumentError(
                f"scaling policy kind must be one of {SCALING_KINDS}, got {self.scaling_kind!r}"
            )
        if self.retention_kind not in RETENTION_KINDS:
            raise InvalidArgumentError(
                f"retention policy kind must be one of {RETENTION_KINDS}, got {self.retention_kind!r}"
            )
        _int("min_segments (the initial segment count)", self.min_segments, 1, MAX_STREAM_SEGMENTS)
        _int("the scaling policy's target_rate", self.target_rate, 0, _I32_MAX)
        _int("the scaling policy's scale_factor", self.scale_factor, 0, _I32_MAX)
        if self.scaling_kind != "fixed" and (self.target_rate <= 0 or self.scale_factor <= 0):
            raise InvalidArgumentError(
                f"an auto-scaling policy ({self.scaling_kind}) needs target_rate > 0 and scale_factor > 0, "
                f"got {self.target_rate} and {self.scale_factor}"
            )
        _int("the retention policy's parameter", self.retention_param, 0, INT64_MAX)
        _int("the retention policy's maximum", self.retention_max, 0, INT64_MAX)
        _int("timestamp_aggregation_timeout_ms", self.timestamp_aggregation_timeout_ms, 0, INT64_MAX)
        _int("rollover_size_bytes", self.rollover_size_bytes, 0, INT64_MAX)
        if isinstance(self.tags, str) or not isinstance(self.tags, (tuple, list)):
            raise InvalidArgumentError(f"tags must be a sequence of str, got {self.tags!r:.80}")
        tags: list[str] = []
        for t in self.tags:
            if not isinstance(t, str) or not t or len(t) > MAX_TAG_CHARS:
                raise InvalidArgumentError(
                    f"a tag must be a non-empty str of at most {MAX_TAG_CHARS} characters, got {t!r:.80}"
                )
            if t not in tags:
                tags.append(t)
        if len(tags) > MAX_TAGS:
            raise InvalidArgumentError(f"a stream has at most {MAX_TAGS} tags, got {len(tags)}")
        object.__setattr__(self, "tags", tuple(tags))

    def to_record(self) -> dict[str, Any]:
        """The config as a JSON object for the controller's records."""
        out = asdict(self)
        out["tags"] = list(self.tags)
        return out

    @classmethod
    def from_record(cls, rec: Any, where: str) -> StreamConfig:
        """The inverse of ``to_record``; ``DataCorruptionError`` naming ``where`` if it is not one."""
        names = {f.name for f in fields(cls)}
        if not isinstance(rec, dict) or not set(rec) <= names:
            raise DataCorruptionError(f"{where}: not a stream configuration: {rec!r:.120}")
        try:
            return cls(**{**rec, "tags": tuple(rec.get("tags", ()))})
        except (InvalidArgumentError, TypeError) as e:
            raise DataCorruptionError(f"{where}: bad stream configuration: {e}") from None


def default_config(initial_segments: int) -> StreamConfig:
    """The configuration of a stream created through ingestwm's API: fixed, ``initial_segments``, no tags."""
    return StreamConfig(min_segments=initial_segments)


def _int(what: str, v: object, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArgumentError(f"{what} must be an int in [{lo}, {hi}], got {v!r:.40}")

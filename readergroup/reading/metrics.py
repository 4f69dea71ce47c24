"""Reader-group metrics: group watermark, watermark lag, per-segment lag and unread bytes, late events.

All times come from the group's injected clock (``now``), never the wall clock directly.
Watermark lag is ``now - watermark`` (how far ingestion time runs ahead of what the group
has acknowledged); unread bytes are ``length - acknowledged position`` per segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from segmentstore import SegmentNotFoundError
from segmentstore.limits import INT64_MIN

if TYPE_CHECKING:
    from ..group_state.state import ReaderGroupState
    from .reader import ReaderStats

__all__ = ["SegmentMetrics", "GroupMetrics", "collect_metrics"]


@dataclass(frozen=True, slots=True)
class SegmentMetrics:
    """One incomplete segment: owner, status, acknowledged position, watermark, lag, unread bytes."""

    segment: str
    stream: str
    owner: str | None
    status: str
    position: int
    watermark: int
    watermark_lag_ms: int
    length: int
    unread_bytes: int


@dataclass(frozen=True, slots=True)
class GroupMetrics:
    """One reader group's metrics at ``now`` (group clock)."""

    group: str
    epoch: int
    now: int
    group_watermark: int | None
    watermark_lag_ms: int | None
    readers: tuple[str, ...]
    segments: tuple[SegmentMetrics, ...]
    unread_bytes: int
    events_delivered: int
    late_events: int
    late_ingestion_events: int

    def as_row(self) -> dict[str, int | str | None]:
        """The scalar fields as one flat dict (for logs and benchmark tables)."""
        return {
            "group": self.group,
            "epoch": self.epoch,
            "now": self.now,
            "group_watermark": self.group_watermark,
            "watermark_lag_ms": self.watermark_lag_ms,
            "readers": len(self.readers),
            "segments": len(self.segments),
            "unread_bytes": self.unread_bytes,
            "events_delivered": self.events_delivered,
            "late_events": self.late_events,
            "late_ingestion_events": self.late_ingestion_events,
        }


def collect_metrics(
    state: ReaderGroupState,
    now: int,
    stats: Sequence[ReaderStats],
    retired: tuple[int, int, int] = (0, 0, 0),
) -> GroupMetrics:
    """Build ``GroupMetrics`` from a group's state: one ``get_info`` per incomplete segment. O(segments)."""
    rows = state.segments()
    segs: list[SegmentMetrics] = []
    unread = 0
    for r in rows:
        try:
            length = state.client.get_info(r.segment.name).length
        except SegmentNotFoundError:
            length = r.position
        u = max(0, length - r.position)
        unread += u
        segs.append(
            SegmentMetrics(
                r.segment.name,
                r.segment.stream,
                r.owner,
                r.status,
                r.position,
                r.watermark,
                now - r.watermark,
                length,
                u,
            )
        )
    wm = state.group_watermark
    gw = None if wm == INT64_MIN else wm
    return GroupMetrics(
        state.group,
        state.epoch,
        now,
        gw,
        None if gw is None else now - gw,
        tuple(sorted(state.readers())),
        tuple(segs),
        unread,
        retired[0] + sum(s.events for s in stats),
        retired[1] + sum(s.late_events for s in stats),
        retired[2] + sum(s.late_ingestion_events for s in stats),
    )

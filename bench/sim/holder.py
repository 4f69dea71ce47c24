"""What held the group watermark: the segment with the least watermark at each sample, and why.

The group's ingestion-time watermark is the least watermark over its incomplete segments
(docs/design.md §1), so at any time one segment *holds* it. ``holder`` names it (the
least watermark; ties to the first by name) with two facts:

- ``state``: ``unread`` when bytes past the group's acknowledged position are waiting
  (the readers, or their position reports, are behind), ``idle`` when the group has read
  it to its tail;
- ``advanced_by``: ``reads`` when the watermark it holds comes from data (an unread
  segment moves as the readers read; a tail's watermark is its last write's time), or
  ``advancer`` when the segment's tail time was last set by the store's watermark
  advancer (no write since it was last advanced, or never written: 0 bytes). Such a
  segment holds the group watermark until the next pass that finds it idle for
  ``max_watermark_lag_ms``: the lag saw-tooths up to about that.

``held_summary`` adds the time each (segment, state, advanced_by) held the watermark
over the samples (each sample counts until the next one), longest first. O(samples).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from readergroup.group_state.state_records import SegmentState
from segmentstore import SegmentNotFoundError, SegmentStore

__all__ = ["HOLDER_COLUMNS", "holder", "held_summary"]

HOLDER_COLUMNS = ("held_by", "held_by_state", "held_by_advanced_by")
"""The series columns (``series.csv``): the segment, ``idle``/``unread``, ``advancer``/``reads``."""


def holder(
    rows: Sequence[SegmentState], lengths: Mapping[str, int], store: SegmentStore
) -> tuple[str | None, str | None, str | None]:
    """(segment, state, advanced_by) of the segment holding the group watermark; ``None``s without one."""
    if not rows:
        return None, None, None
    r = min(rows, key=lambda s: (s.watermark, s.segment.name))
    name = r.segment.name
    length = lengths.get(name, r.position)
    if length > r.position:
        return name, "unread", "reads"
    try:
        info = store.get_info(name)
        by_data = length > 0 and info.last_write_time <= store.ingestion_time_at(name, length - 1)
    except SegmentNotFoundError:  # gone (sealed and merged away) since the sample's rows were taken
        by_data = True
    return name, "idle", "reads" if by_data else "advancer"


def held_summary(samples: Sequence[Mapping[str, Any]], lengths: Mapping[str, int]) -> list[dict[str, Any]]:
    """Per (segment, state, advanced_by): how long it held the group watermark (ms, fraction of the run)."""
    total: dict[tuple[str, str, str], int] = {}
    span = 0
    for a, b in itertools.pairwise(samples):
        dt = int(b["t_ms"]) - int(a["t_ms"])
        span += dt
        if a.get("held_by") is not None:
            key = (a["held_by"], a["held_by_state"], a["held_by_advanced_by"])
            total[key] = total.get(key, 0) + dt
    longest = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    return [
        {
            "segment": seg,
            "state": state,
            "advanced_by": by,
            "ms": ms,
            "fraction": round(ms / span, 4) if span else 0.0,
            "bytes": lengths.get(seg),
        }
        for (seg, state, by), ms in longest
    ]

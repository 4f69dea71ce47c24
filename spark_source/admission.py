"""Admission control: how far each segment's end moves in a micro-batch, within the trigger's limits, at
frame boundaries; the record scans that find those boundaries, kept and asked for a micro-batch ahead.

``Admission.admit`` shares ``maxBytesPerTrigger`` by ``water_fill`` over the bytes available and
``maxEventsPerTrigger`` in rounds: each segment still open scans for its even share of the
events left (the first ones take what division leaves over), and a segment that has fewer
closes. So the store walks about the admitted frames, not ``maxEventsPerTrigger`` frames of
every segment (``scan_records``: the store walks the length prefixes where the bytes are).

The walks are most of a planning call's time (~1.5 ms per 16 MiB of small frames here, one
call each: ~6 ms of a 10^6-event micro-batch over two segments, while Spark waits). The bytes
below a segment's length never change, so a scan's answer stays true: ``(end, records)`` from
``pos`` is a prefix that a later scan from ``pos`` with room for it can start from and go on
after (a store answers scans in parts anyway). ``Admission`` keeps the answers, and
``prepare`` runs the next micro-batch's first round of scans from the positions where the one
being read ends (the query's runner does it while the tasks run, ``source``): when the
planning comes, its scans find their answers. Answers are kept with the segment's creation
time and used only for the same segment (not one of the same name made again), and only
those of the last ``prepare`` and planning are kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from segmentstore.client import SegmentStoreClient
from segmentstore.results import RecordScan

from .reading import frame_ends, frame_span

__all__ = ["Limit", "READ_ALL", "Admission", "water_fill"]


@dataclass(frozen=True, slots=True)
class Limit:
    """Admission control for one micro-batch: at most this many frames and bytes (None: no limit)."""

    max_events: int | None = None
    max_bytes: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_events is None and self.max_bytes is None


READ_ALL = Limit()

Keys = list[tuple[str, str]]
"""``(stream, segment)`` pairs, sorted."""


class Admission:
    """Admission control over ``client`` (``pravega(stream)``: whether its frames are Pravega's)."""

    def __init__(self, client: SegmentStoreClient, pravega: Callable[[str], bool]) -> None:
        self._client = client
        self._pravega = pravega
        self._lock = threading.Lock()
        self._scans: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        """``(segment, offset)`` -> the scan's ``end``, ``records``, segment creation time, ``max_length``."""
        self._created: dict[str, int] = {}  # each segment's creation time, as the caller last saw it
        self.hits = 0
        """Scans answered from what was kept (for tests and benchmarks)."""

    def admit(
        self,
        ends: dict[str, dict[str, int]],
        caps: dict[tuple[str, str], int],
        limit: Limit,
        created: dict[str, int],
    ) -> None:
        """Move each segment's end towards its cap, within ``limit``, at frame boundaries (in ``ends``).

        ``caps`` are at frame boundaries and at most the segments' lengths; ``created``: each
        segment's creation time (the store's info now). A segment with bytes but no whole frame
        before its cap is read and validated here, so that malformed data fails the query
        rather than stalling it. O(segments + scans).
        """
        with self._lock:
            self._created = dict(created)
        keys = sorted(caps)
        if limit.unlimited:
            for stream, seg in keys:
                ends[stream][seg] = caps[(stream, seg)]
            return
        avail = [caps[k] - ends[k[0]][k[1]] for k in keys]
        if limit.max_bytes is not None:
            avail = water_fill(avail, limit.max_bytes)
        if limit.max_events is None:
            pv = [self._pravega(stream) for stream, _ in keys]
            spans = [
                self._span(seg, ends[stream][seg], a, None, p) if a > 0 else (0, 0)
                for (stream, seg), a, p in zip(keys, avail, pv, strict=True)
            ]
            new_ends = [end if n else None for end, n in spans]
        else:
            new_ends = self._share_events(keys, ends, avail, limit.max_events, limit.max_bytes is None)
        if keys and all(e is None for e in new_ends):  # always progress: one frame of the first segment
            stream, seg = keys[0]
            pos, cap = ends[stream][seg], caps[keys[0]]
            one = frame_ends(self._client, seg, pos, cap - pos, 1, self._pravega(stream))
            new_ends[0] = int(one[-1]) if len(one) else None  # (validated: malformed bytes raise)
        for (stream, seg), e in zip(keys, new_ends, strict=True):
            if e is not None:
                ends[stream][seg] = e

    def prepare(
        self,
        ends: dict[str, dict[str, int]],
        caps: dict[tuple[str, str], int],
        limit: Limit,
        created: dict[str, int],
    ) -> None:
        """Scan ahead as ``admit`` would from ``ends`` now, keeping only the answers (for the planning
        to come); what was kept from before is dropped. Raises what the store raises."""
        with self._lock:
            self._scans = {}
        self.admit({s: dict(p) for s, p in ends.items()}, caps, limit, created)

    def _share_events(
        self,
        keys: Keys,
        ends: dict[str, dict[str, int]],
        avail: list[int],
        budget: int,
        at_frames: bool,
    ) -> list[int | None]:
        """Each segment's new end for ``budget`` events over ``avail`` bytes each, shared evenly (or None).

        ``at_frames``: each ``avail`` ends at a frame boundary (no byte limit cut it).
        """
        pos = [ends[stream][seg] for stream, seg in keys]
        stop = [p + a for p, a in zip(pos, avail, strict=True)]
        moved: list[int | None] = [None] * len(keys)
        open_ = [i for i, a in enumerate(avail) if a > 0]
        while budget > 0 and open_:
            still = []
            for i, share in zip(open_, water_fill([budget] * len(open_), budget), strict=True):
                if share == 0:
                    still.append(i)
                    continue
                pv = self._pravega(keys[i][0])
                end, n = self._span(keys[i][1], pos[i], stop[i] - pos[i], share, pv)
                if n:
                    pos[i] = moved[i] = end
                    budget -= n
                elif at_frames and pos[i] < stop[i]:  # bytes up to a frame boundary, yet no frame:
                    frame_ends(
                        self._client, keys[i][1], pos[i], stop[i] - pos[i], 1, pv
                    )  # raises if malformed
                if n == share:
                    still.append(i)  # may have more
            open_ = still
        return moved

    def _span(
        self, segment: str, begin: int, max_bytes: int, max_frames: int | None, pravega: bool
    ) -> tuple[int, int]:
        """``reading.frame_span`` with its scans answered from what was kept where it can be."""
        return frame_span(self._client, segment, begin, max_bytes, max_frames, pravega, scan=self._scan)

    def _scan(self, segment: str, offset: int, max_length: int, max_records: int | None) -> RecordScan:
        """``scan_records``, or a prefix of its answer kept from before (see the module docstring).

        The callers ask within the segment's length as the store last said it (``caps``), so
        the bytes scanned were there and never change: an answer of ``n > 0`` records serves
        a scan with room for them; one of none (the first record does not fit: a store always
        completes a record that fits) serves a scan of no more bytes. O(1) plus the store's call.
        """
        with self._lock:
            created = self._created.get(segment)
            kept = self._scans.get((segment, offset))
        if kept is not None and created is not None:
            end, records, made, length = kept
            if records:
                fits = end - offset <= max_length and (max_records is None or records <= max_records)
            else:
                fits = max_length <= length
            if made == created and fits:
                self.hits += 1
                return RecordScan(offset, end, records)
        scan = self._client.scan_records(segment, offset, max_length, max_records)
        if created is not None and (scan.records or max_records != 0):
            with self._lock:
                if len(self._scans) >= _MAX_KEPT:
                    self._scans = {}
                old = self._scans.get((segment, offset))  # the answer reaching furthest is kept
                if old is None or old[2] != created or (scan.end, max_length) > (old[0], old[3]):
                    self._scans[(segment, offset)] = (scan.end, scan.records, created, max_length)
        return scan


_MAX_KEPT = 4096
"""Scan answers kept at most (a planning of a stream of thousands of segments asks one per segment)."""


def water_fill(avail: list[int], budget: int) -> list[int]:
    """Share ``budget`` among bins of capacity ``avail`` as evenly as possible. O(n log n)."""
    out = [0] * len(avail)
    order = sorted(range(len(avail)), key=lambda i: avail[i])
    remaining = budget
    for k, i in enumerate(order):
        out[i] = min(avail[i], remaining // (len(order) - k))
        remaining -= out[i]
    for i in order:  # what integer division left over, one unit each
        if remaining <= 0:
            break
        if out[i] < avail[i]:
            out[i] += 1
            remaining -= 1
    return out

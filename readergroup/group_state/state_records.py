"""The records of the reader-group state: one incomplete segment, one reader, one checkpoint in progress.

``Entry``, ``Slot`` and ``Pending`` are the mutable parts of a replica (``GroupModel``),
changed only by applying updates from the state log; ``SegmentState`` is what callers see.
"""

from __future__ import annotations

from dataclasses import dataclass

from segmentstore import StreamSegment

__all__ = ["SegmentState", "Entry", "Slot", "Pending", "ASSIGNED", "UNASSIGNED", "FUTURE"]

ASSIGNED, UNASSIGNED, FUTURE = "assigned", "unassigned", "future"


@dataclass(frozen=True, slots=True)
class SegmentState:
    """One incomplete segment as the state sees it: position, watermark, owner and status."""

    segment: StreamSegment
    position: int
    watermark: int
    owner: str | None
    status: str  # "assigned" | "unassigned" | "future"
    waiting_for: tuple[str, ...] = ()


class Entry:
    """Mutable state of one incomplete segment (guarded by the state's lock)."""

    __slots__ = ("owner", "position", "seg", "seg_json", "waiting", "watermark")

    def __init__(self, seg: StreamSegment, position: int, watermark: int) -> None:
        self.seg = seg
        self.position = position
        self.watermark = watermark
        self.owner: str | None = None
        self.waiting: set[str] | None = None  # predecessors not complete yet (a future segment)
        self.seg_json: str | None = None  # the segment as snapshots write it, once one did


class Slot:
    """A reader's membership: its token (the log position of its ``AddReader``) and its segments.

    A reader of the same id that joins again gets another token, so an old incarnation
    (a process declared offline that comes back) never passes for the new one.
    """

    __slots__ = ("reader_id", "segments", "token")

    def __init__(self, reader_id: str, token: int) -> None:
        self.reader_id = reader_id
        self.token = token
        self.segments: set[str] = set()


class Pending:
    """A checkpoint in progress: readers still to reach it, readers that did.

    ``token`` is the log position of its ``InitiateCheckpoint``: it names this checkpoint
    alone, also once its name is used again (after its result is no longer kept).
    """

    __slots__ = ("crossed", "deferred", "name", "token", "waiting")

    def __init__(self, name: str, token: int) -> None:
        self.name = name
        self.token = token
        self.waiting: set[str] | None = None  # set when the checkpoint becomes active
        self.crossed: set[str] = set()
        self.deferred: dict[str, tuple[int, int]] = {}  # positions of readers that left after it

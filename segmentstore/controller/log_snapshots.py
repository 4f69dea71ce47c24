"""Snapshots in a system record log: how ``_system/_streams`` and ``_system/_pravega_txns`` compact.

Both logs are records (``model.encode_record``: ``u32`` length + JSON) that a restart
replays. Left alone they grow with every change ever made, and so does every restart.
A snapshot is the state the records built, written as ``snapshot`` records (part ``i``
of ``of``, each about ``part_bytes`` of JSON at most, so none nears the store's largest
append) one after the other while nothing else is written; then the log is truncated
where its first part begins. A replay reads the parts in order: a complete snapshot
supersedes every record before it; parts a crash cut short (followed by another record,
or by the end of the log) are ignored, and the records before them stand.

A log compacts once the bytes written since its last snapshot exceed ``max(minimum, twice
that snapshot's bytes)`` (``LogGrowth``): each snapshot costs O(its bytes) and comes after at
least twice as many bytes of records, so the cost per byte written stays O(1) amortised and
the log stays O(state).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import SegmentStoreError

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = ["SNAPSHOT_OP", "LogGrowth", "snapshot_records", "write_snapshot", "SnapshotParts", "sized"]

_log = logging.getLogger(__name__)

SNAPSHOT_OP = "snapshot"


class LogGrowth:
    """How much a log grew since its last snapshot, and that snapshot's size (bytes)."""

    __slots__ = ("since", "snapshot")

    def __init__(self) -> None:
        self.since = 0
        self.snapshot = 0

    def wrote(self, n: int) -> None:
        """A record of ``n`` bytes was appended (or replayed) after the last snapshot."""
        self.since += n

    def snapshotted(self, n: int) -> None:
        """A complete snapshot of ``n`` bytes was appended (or replayed): it supersedes what came before."""
        self.since, self.snapshot = 0, n

    def due(self, minimum: int) -> bool:
        """Whether the log should compact now. O(1)."""
        return self.since > max(minimum, 2 * self.snapshot)


def sized(parsed: list[tuple[int, dict[str, Any]]], end: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(offset, bytes, record)`` of ``parse_records``' answer for a log ``end`` bytes long. O(records)."""
    for i, (pos, rec) in enumerate(parsed):
        yield pos, (parsed[i + 1][0] if i + 1 < len(parsed) else end) - pos, rec


def snapshot_records(log: str, items: Sequence[dict[str, Any]], part_bytes: int) -> list[dict[str, Any]]:
    """The ``snapshot`` records holding ``items`` in order, each at most about ``part_bytes`` of JSON
    (an item larger than that is a part alone); one record with no items if there are none. ``log``
    names the log in each record (its records name a stream or scope). O(items)."""
    groups: list[list[dict[str, Any]]] = [[]]
    size = 0
    for item in items:
        n = len(json.dumps(item, separators=(",", ":"))) + 1
        if groups[-1] and size + n > part_bytes:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += n
    return [
        {"op": SNAPSHOT_OP, "stream": log, "part": i, "of": len(groups), "items": g}
        for i, g in enumerate(groups)
    ]


def write_snapshot(
    store: SegmentStore,
    log: str,
    items: Sequence[dict[str, Any]],
    part_bytes: int,
    write: Callable[[dict[str, Any]], None],
    length: Callable[[], int],
    growth: LogGrowth,
) -> int:
    """Append ``items`` as a snapshot through ``write`` (the log's own conditional append; ``length``
    its length after), then truncate ``log`` where the snapshot begins; the bytes the log dropped.
    A refused write leaves a snapshot cut short, which the replay ignores; a refused truncation
    leaves a log whose snapshot supersedes what is before it all the same: 0 either way, logged.
    The caller holds its log's lock. O(items)."""
    start = length()
    before = store.get_info(log).start_offset
    try:
        for rec in snapshot_records(log, items, part_bytes):
            write(rec)
    except SegmentStoreError as e:
        _log.warning("%s was not compacted: %s", log, e)
        return 0
    growth.snapshotted(length() - start)
    try:
        store.truncate(log, start)
    except SegmentStoreError as e:
        _log.warning("%s was not truncated at its snapshot: %s", log, e)
        return 0
    return start - before


class SnapshotParts:
    """A replay's reading of snapshot parts: ``add`` each ``snapshot`` record, ``drop`` on any other."""

    __slots__ = ("_bytes", "_parts", "bytes")

    def __init__(self) -> None:
        self._parts: list[dict[str, Any]] = []
        self._bytes = 0
        self.bytes = 0
        """The size of the last snapshot ``add`` completed."""

    def add(self, rec: dict[str, Any], size: int) -> list[dict[str, Any]] | None:
        """Take one ``snapshot`` record of ``size`` bytes; the snapshot's items once this part completes
        it, else None. ``ValueError`` for a part out of order (part 0 always starts a new snapshot)."""
        part, of = int(rec["part"]), int(rec["of"])
        if part == 0:
            self._parts, self._bytes = [], 0
        elif part != len(self._parts) or of != int(self._parts[0]["of"]):
            raise ValueError(f"snapshot part {part} of {of} after {len(self._parts)} parts")
        if not 0 <= part < of:
            raise ValueError(f"snapshot part {part} of {of}")
        self._parts.append(rec)
        self._bytes += size
        if len(self._parts) < of:
            return None
        items = [item for p in self._parts for item in p["items"]]
        self.bytes = self._bytes
        self._parts, self._bytes = [], 0
        return items

    def drop(self) -> None:
        """Another record came: a snapshot being read was cut short by a crash; ignore its parts."""
        self._parts, self._bytes = [], 0

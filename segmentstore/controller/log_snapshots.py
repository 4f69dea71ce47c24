"""Snapshots in a system record log: how ``_system/_streams`` and ``_system/_pravega_txns`` compact.

Both logs are records (``model.encode_record``: ``u32`` length + JSON) that a restart
replays. Left alone they grow with every change ever made, and so does every restart.
A snapshot is the state the records built, written as ``snapshot`` records (part ``i``
of ``of``, each about ``part_bytes`` of JSON at most, so none nears the store's largest
append) one after the other while nothing else is written; then the log is truncated
where its first part begins. A replay reads the parts in order: a complete snapshot
supersedes every record before it; parts a crash cut short (followed by another record,
or by the end of the log) are ignored, and the records before them stand.

A log compacts once it holds more records since its last snapshot than
``max(minimum, 2 x what the snapshot would hold)``: each snapshot costs O(state) and comes
after at least as many records, so the cost per record stays O(1) amortised and the log
O(state).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["SNAPSHOT_OP", "compaction_due", "snapshot_records", "SnapshotParts"]

SNAPSHOT_OP = "snapshot"


def compaction_due(records: int, remembered: int, minimum: int) -> bool:
    """Whether a log with ``records`` since its last snapshot, whose state holds ``remembered``
    items, should compact now. O(1)."""
    return records > max(minimum, 2 * remembered)


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


class SnapshotParts:
    """A replay's reading of snapshot parts: ``add`` each ``snapshot`` record, ``drop`` on any other."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[dict[str, Any]] = []

    def add(self, rec: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Take one ``snapshot`` record; the snapshot's items once this part completes it, else None.
        ``ValueError`` for a part out of order (part 0 always starts a new snapshot)."""
        part, of = int(rec["part"]), int(rec["of"])
        if part == 0:
            self._parts = []
        elif part != len(self._parts) or of != int(self._parts[0]["of"]):
            raise ValueError(f"snapshot part {part} of {of} after {len(self._parts)} parts")
        if not 0 <= part < of:
            raise ValueError(f"snapshot part {part} of {of}")
        self._parts.append(rec)
        if len(self._parts) < of:
            return None
        items = [item for p in self._parts for item in p["items"]]
        self._parts = []
        return items

    def drop(self) -> None:
        """Another record came: a snapshot being read was cut short by a crash; ignore its parts."""
        self._parts = []

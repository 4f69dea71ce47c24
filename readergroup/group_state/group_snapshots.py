"""A reader group's replica as a snapshot: canonical JSON-ready values, and back.

A snapshot is one update of the state log (``group_updates.Snapshot``) holding a whole
``GroupModel`` (``GroupModel.to_obj``/``from_obj``), sorted so that two replicas at one
log position encode to the same value. The synchronizer writes one every
``state_snapshot_interval`` batches and a joining process starts from the latest.
Version 2 is written; version 1 (from before completed segments and checkpoints were
dropped) still loads.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from typing import Any, Protocol

from sortedcontainers import SortedList

from segmentstore import StreamSegment

from ..config import ReaderGroupConfig
from .checkpoint import Checkpoint
from .group_updates import config_to_obj, encode_json, encode_str, segment_from_obj, segment_to_obj
from .state_records import Entry, Pending, Slot
from .watermark_floor import WatermarkFloor

__all__ = [
    "SNAPSHOT_VERSION",
    "Replica",
    "load_snapshot",
    "snapshot_json",
    "snapshot_obj",
    "snapshot_version",
]


class Replica(Protocol):
    """The state of a replica a snapshot holds (``GroupModel`` has it; this module does not import it)."""

    group: str
    group_id: str
    config: ReaderGroupConfig
    epoch: int
    floor: int
    entries: dict[str, Entry]
    by_wm: WatermarkFloor
    unassigned: SortedList
    readers: dict[str, Slot]
    completed: dict[str, tuple[StreamSegment, int]]
    checkpoints: deque[Pending]
    results: deque[tuple[int, Checkpoint]]
    futures: int


SNAPSHOT_VERSION = 2
"""Snapshot format written; version 1 (before completed segments and checkpoints were dropped) loads too."""


def snapshot_obj(m: Replica) -> dict[str, Any]:
    """The whole replica ``m`` as canonical JSON-ready values (equal replicas give equal values). O(n)."""
    return _snapshot(m, [_entry_obj(e) for _, e in sorted(m.entries.items())])


def snapshot_json(m: Replica) -> str:
    """``snapshot_obj(m)`` as the state log's JSON writes it (``group_updates.encode_json``), the same
    text in a third of the time: each segment's part is encoded once and kept. O(n)."""
    parts = []
    for _, e in sorted(m.entries.items()):
        seg = e.seg_json
        if seg is None:
            seg = e.seg_json = encode_json(segment_to_obj(e.seg))
        pos, wm, owner, waiting = e.position, e.watermark, e.owner, e.waiting
        if type(pos) is not int or type(wm) is not int or (owner is not None and type(owner) is not str):
            parts.append(encode_json(_entry_obj(e)))
            continue
        o = "null" if owner is None else encode_str(owner)
        w = "null" if waiting is None else "[" + ",".join(map(encode_str, sorted(waiting))) + "]"
        parts.append(f"[{seg},{pos},{wm},{o},{w}]")
    text = encode_json(_snapshot(m, _ENTRIES))
    here = encode_str(_ENTRIES)
    if text.count(here) != 1:  # (a str of the state equal to the placeholder: never, in practice)
        return encode_json(snapshot_obj(m))
    return text.replace(here, "[" + ",".join(parts) + "]")


_ENTRIES = f"entries-{uuid.uuid4().hex}"
"""Where ``snapshot_json`` puts the entries it encoded itself."""


def _entry_obj(e: Entry) -> list[Any]:
    return [
        segment_to_obj(e.seg),
        e.position,
        e.watermark,
        e.owner,
        None if e.waiting is None else sorted(e.waiting),
    ]


def _snapshot(m: Replica, entries: object) -> dict[str, Any]:
    return {
        "v": SNAPSHOT_VERSION,
        "group": m.group,
        "gid": m.group_id,
        "config": config_to_obj(m.config),
        "epoch": m.epoch,
        "floor": m.floor,
        "entries": entries,
        "readers": [[rid, s.token] for rid, s in sorted(m.readers.items())],
        "completed": [[segment_to_obj(c), w] for _, (c, w) in sorted(m.completed.items())],
        "checkpoints": [
            [
                cp.name,
                cp.token,
                None if cp.waiting is None else sorted(cp.waiting),
                sorted(cp.crossed),
                sorted([n, o, w] for n, (o, w) in cp.deferred.items()),
            ]
            for cp in m.checkpoints
        ],
        "results": [[t, json.loads(cp.to_json())] for t, cp in m.results],
    }


def snapshot_version(o: dict[str, Any]) -> int:
    """The version of snapshot ``o``; ``ValueError`` if this client cannot read it."""
    version = o.get("v")
    if version not in (1, SNAPSHOT_VERSION):
        raise ValueError(f"snapshot version {version!r}, this client reads 1 and {SNAPSHOT_VERSION}")
    return int(version)


def load_snapshot(m: Replica, o: dict[str, Any], version: int) -> None:
    """Fill the new, empty replica ``m`` from snapshot ``o`` of ``version``. O(n log n).

    A version 1 snapshot holds every segment completed in the epoch (without its key
    range) and every checkpoint name used: those are dropped, as this version would
    have dropped them, and only the latest ``checkpoints_kept`` completed checkpoints
    stay. Its checkpoints carry no token: they get negative ones no process waits on.
    """
    m.epoch = int(o["epoch"])
    m.floor = int(o["floor"])
    for rid, token in o["readers"]:
        m.readers[str(rid)] = Slot(str(rid), int(token))
    for seg_o, pos, wm, owner, waiting in o["entries"]:
        e = Entry(segment_from_obj(seg_o), int(pos), int(wm))
        name = e.seg.name
        m.entries[name] = e
        m.by_wm.add((e.watermark, name))
        if waiting is not None:
            e.waiting = {str(p) for p in waiting}
            m.futures += 1 if e.waiting else 0
        elif owner is not None:
            e.owner = str(owner)
            m.readers[e.owner].segments.add(name)
        else:
            m.unassigned.add((e.watermark, name))
    if version == 1:
        pending = [[name, -1 - i, *rest] for i, (name, *rest) in enumerate(o["checkpoints"])]
        results = [[-1 - len(pending) - i, r] for i, r in enumerate(o["results"])]
    else:
        pending, results = o["checkpoints"], o["results"]
        for seg_o, w in o["completed"]:
            c = segment_from_obj(seg_o)
            m.completed[c.name] = (c, int(w))
    for name, token, waiting, crossed, deferred in pending:
        cp = Pending(str(name), int(token))
        cp.waiting = None if waiting is None else {str(r) for r in waiting}
        cp.crossed = {str(r) for r in crossed}
        cp.deferred = {str(n): (int(p), int(w)) for n, p, w in deferred}
        m.checkpoints.append(cp)
    for token, r in results:
        m.results.append((int(token), Checkpoint.from_json(json.dumps(r))))

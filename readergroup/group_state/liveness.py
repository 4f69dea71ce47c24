"""Reader liveness: heartbeats as attributes of the group's state segment, leases judged by the observer.

A reader's heartbeat is attribute ``token`` (its membership token) of the state
segment: readers write it outside the state log, so heartbeats never contend with
updates. Each beat is a compare-and-set (``REPLACE_IF_EQUALS`` the value it wrote
last) of its clock's time, at least every quarter of ``reader_timeout_ms`` while it reads.

Any process holding the group watches the heartbeats of the online readers
(``LivenessMonitor``): a reader whose value has not changed for ``reader_timeout_ms``
*on the observer's own clock* — measured from when this observer first saw the value,
so clocks of different processes need not agree, only run at about the same rate — has
expired. The observer then *fences* it (compare-and-set of the value it saw to
``FENCED``) before appending its ``RemoveReader``: if the reader beat meanwhile, the
fence fails and nothing happens; once fenced, the reader's next beat fails, so a
reader that was only slow (paused, partitioned) learns it lost its lease before it
delivers anything more (it beats before delivering whenever a quarter timeout has
passed). A fenced value tells every other observer at once that the reader is gone.
Once a reader's ``RemoveReader`` is in the log its heartbeat attribute is removed
(``forget``), so the segment holds one attribute per online reader, not one per reader
that ever joined. Times come from injected clocks only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from segmentstore import AttributeUpdate, AttributeUpdateType, BadAttributeUpdateError, SegmentStoreError
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.errors import retriable
from segmentstore.limits import INT64_MIN

__all__ = ["FENCED", "Heartbeat", "LivenessMonitor", "fence", "forget", "beat_interval"]

FENCED = INT64_MIN
"""The heartbeat value of a reader declared offline (no clock reads it)."""

_CAS = AttributeUpdateType.REPLACE_IF_EQUALS
_ATTEMPTS = 4
_TRANSPORT = (SegmentStoreError, ConnectionError, TimeoutError)


def beat_interval(timeout_ms: int) -> int:
    """How often a reader beats: a quarter of the timeout (at least 1 ms). O(1)."""
    return max(1, timeout_ms // 4)


class Heartbeat:
    """One reader's heartbeat: compare-and-set of its clock's time into attribute ``key``."""

    __slots__ = ("beats", "client", "interval_ms", "key", "last", "next_due", "segment")

    def __init__(self, client: SegmentStoreClient, segment: str, key: int, interval_ms: int) -> None:
        self.client = client
        self.segment = segment
        self.key = key
        self.interval_ms = interval_ms
        self.last: int | None = None  # the value this reader wrote last (None: not yet)
        self.next_due = INT64_MIN
        self.beats = 0

    def beat(self, now: int) -> bool:
        """Write a new value; ``False`` if the reader was fenced (declared offline). One store call.

        A beat whose reply was lost (the server restarted, the connection broke) is looked
        up in the attribute: landed, fenced, or sent again.
        """
        value = now if self.last is None or now > self.last else self.last + 1
        lost: BaseException | None = None
        for _ in range(_ATTEMPTS):
            try:
                self.client.update_attributes(
                    self.segment, [AttributeUpdate(self.key, value, _CAS, self.last)]
                )
            except BadAttributeUpdateError:
                pass  # another value is there: a fence, or a beat of ours whose reply was lost
            except _TRANSPORT as e:
                if not retriable(e, True):
                    raise
                lost = e  # the outcome is unknown: the attribute tells
            else:
                return self._landed(value, now)
            cur = self.client.get_attributes(self.segment, [self.key]).get(self.key)
            if cur == FENCED or cur is None:
                return False
            if cur == value:
                return self._landed(value, now)
            self.last = cur  # a beat whose reply was lost did land: go on from it
            value = max(value, cur + 1)
        if lost is not None:
            raise lost
        return False

    def _landed(self, value: int, now: int) -> bool:
        self.last = value
        self.next_due = now + self.interval_ms
        self.beats += 1
        return True


def fence(client: SegmentStoreClient, segment: str, key: int, seen: int | None) -> bool:
    """Fence reader ``key`` if its heartbeat still shows ``seen``; whether it is fenced now. 1-2 calls.

    A fence whose reply was lost is looked up in the attribute.
    """
    try:
        client.update_attributes(segment, [AttributeUpdate(key, FENCED, _CAS, seen)])
        return True
    except BadAttributeUpdateError:
        pass
    except _TRANSPORT as e:
        if not retriable(e, True):
            raise
    return client.get_attributes(segment, [key]).get(key) == FENCED


def forget(client: SegmentStoreClient, segment: str, key: int) -> None:
    """Remove the heartbeat of reader ``key``, which left the group (its ``RemoveReader`` is in
    the log): the state segment keeps no attribute per reader that ever joined. One call, best
    effort: a failure leaves the key behind (harmless). A beat of that reader after it fails, as
    one after a fence does (the value it compares with is gone)."""
    with contextlib.suppress(*_TRANSPORT):
        client.update_attributes(segment, [AttributeUpdate(key, None)])


class LivenessMonitor:
    """Which online readers' heartbeats stood still for ``timeout_ms`` on this process's clock."""

    __slots__ = ("observed", "timeout_ms")

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.observed: dict[int, tuple[int | None, int]] = {}  # token -> (value seen, since when)

    def expired(
        self, members: Mapping[str, int], values: Mapping[int, int], now: int
    ) -> list[tuple[str, int, int | None]]:
        """``(reader, token, value seen)`` of expired members; remembers the values seen. O(readers)."""
        out: list[tuple[str, int, int | None]] = []
        for rid, token in sorted(members.items()):
            v = values.get(token)
            seen = self.observed.get(token)
            if v == FENCED:
                out.append((rid, token, v))
            elif seen is None or seen[0] != v:
                self.observed[token] = (v, now)
            elif now - seen[1] >= self.timeout_ms:
                out.append((rid, token, v))
        live = set(members.values())
        for token in [t for t in self.observed if t not in live]:
            del self.observed[token]
        return out

    @checked
    def _check(self) -> None:
        assert self.timeout_ms > 0
        for v, _ in self.observed.values():
            assert v is None or isinstance(v, int)

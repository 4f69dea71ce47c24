"""The writers of the lab's *asserted* copy of the stream: the workload's writers, plus their assertions.

The producer-watermark assertions (``writers.N.assert_every_ms``, PIP-102 markers) are the
``producer`` strategy's instrument, not part of the workload: markers are temporal
operations, so in a stream every strategy reads they would move the segments'
``LAST_WRITE_TIME`` and ingestion watermark, and change what the others measure. The lab
therefore writes them only into a copy of the stream of its own, read by the strategies
in the event-time domain (``producer``, custom ones with ``time_domain = "event"``).

``AssertingWriter`` is the simulator's ``WriterActor`` — the same events, routed, framed,
numbered, held and committed at the same instants, its own SimPy process waking when
the workload's does — that also asserts, at every assertion time (``start_ms + k *
assert_every_ms``; before ``start_ms``, ``k * assert_every_ms``) unless the store is
down: right after its writes when the writer wakes then, else from a process of its own
(``assertions``):

- active (at or after ``start_ms``, before ``stop_ms``, not in an idle phase) or idle with
  ``when_idle: heartbeat``: it asserts ``bound(t)`` (``note_time``);
- idle with ``mark_idle``: it asserts ``bound(t)`` and marks itself idle, once per idle
  spell (writing again rejoins it at its last assertion: ``EventWriter``);
- idle with ``silent``: nothing.

Its events are the workload writer's, byte for byte. Its markers follow the
``EventWriter``'s protocol (``readergroup.format.producer_watermarks``): an assertion
or an idle mark is one marker frame (writer id ``index + 1``) appended to every active
segment of the stream; writing events while marked idle first rejoins it at its last
assertion (a marker before the events). A transactional writer asserts into its open
transaction (the marker takes effect with the commit) or, with none open, in a
transaction of its own, committed at once.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from readergroup.format.producer_watermarks import encode_idle_marker, encode_watermark_marker
from segmentstore.checks import checked

from ..sim.actors import World, WriterActor
from ..spec.scenario import WriterSpec

__all__ = ["AssertingWriter"]

Proc = Generator[simpy.Event, Any, None]


class AssertingWriter(WriterActor):
    """A workload writer that also writes its producer watermark assertions (``process()``: SimPy)."""

    def __init__(self, world: World, spec: WriterSpec, index: int, name: str) -> None:
        super().__init__(world, spec, index, name)
        self._idle_marked = False  # marked idle in this idle spell (when_idle: mark_idle)
        self._left = False  # out of the active set: its next events rejoin it first
        self._asserted: int | None = None  # the highest time asserted
        self.markers = 0  # assertions and idle marks written
        self.waking_at: int | None = None  # when the writer's own process wakes next
        self._asserted_at = -1  # the last assertion time handled

    def bound(self, t: int) -> int:
        """What the writer asserts at ``t`` (ms since the start): later events have event time at least this
        (when the disorder is bounded and ``assert_error_ms`` is 0)."""
        s = self.spec
        drift = math.floor(t * self.source.drift_ppm * 1e-6)
        start = self.world.scenario.start_time_ms
        return start + t + drift + s.event_time_skew_ms - s.disorder.bound_ms() + s.assert_error_ms

    def _active(self, t: int) -> bool:
        s = self.spec
        rel = t - s.start_ms
        if rel < 0 or (s.stop_ms is not None and t >= s.stop_ms):
            return False
        wl = s.workload
        return wl.kind != "periodic_idle" or rel % (wl.active_ms + wl.idle_ms) < wl.active_ms

    def _assertion_after(self, t: int) -> int:
        """The first assertion time after ``t`` (ms since the start). O(1)."""
        every, start = self.spec.assert_every_ms, self.spec.start_ms
        assert every is not None
        nxt = -(-(t + 1) // every) * every  # before its start a writer follows the run's clock
        if nxt < start:
            return nxt
        t = max(t + 1, start)
        return start + -(-(t - start) // every) * every

    def next_wake(self, now: int) -> int | None:
        nxt = super().next_wake(now)
        self.waking_at = nxt  # the writer's process sleeps until then (its assertions know)
        return nxt

    def step(self, now: int) -> None:
        super().step(now)
        if self.spec.assert_every_ms is not None and self._is_assertion_time(now):
            self._assert(now)  # after its writes of this instant, before anything after it

    def _is_assertion_time(self, t: int) -> bool:
        return self._assertion_after(t - 1) == t

    def assertions(self) -> Proc:
        """The SimPy process of the assertions due while the writer's own process sleeps.

        The writer's process is the workload's, wake-up for wake-up (so events are numbered and
        written in the same order as in the events copy); at an instant it wakes at, it asserts
        itself, right after writing (``step``)."""
        if self.spec.assert_every_ms is None:
            return
        env, end = self.world.env, self.world.end_ms
        t = self._assertion_after(-1)
        while t <= end:
            if t > env.now:
                yield env.timeout(t - env.now)
            if self._asserted_at != t and self.waking_at != t:
                self._assert(t)
            t = self._assertion_after(t)

    def _assert(self, t: int) -> None:
        """The assertion due at ``t`` (none while the store is down)."""
        s = self.spec
        self._asserted_at = t
        if self.world.outage_end(t) is not None:
            return
        if self._active(t) or s.when_idle == "heartbeat":
            self._idle_marked = False
            self._mark(self.bound(t), idle=False)
        elif s.when_idle == "mark_idle" and not self._idle_marked:
            self._idle_marked = True
            self._mark(self.bound(t), idle=True)

    def _mark(self, time: int, idle: bool) -> None:
        """Assert ``time`` (and, with ``idle``, leave the active set): markers in every active segment, or
        in the transaction."""
        self.markers += 1 + idle
        self._asserted = time if self._asserted is None else max(self._asserted, time)
        if self._txn_writer is None:
            self._broadcast(encode_watermark_marker(self.index + 1, time))
            if idle:
                self._broadcast(encode_idle_marker(self.index + 1))
            self._left = idle
            return
        txn = self._txn if self._txn is not None else self._txn_writer.begin_txn()
        txn.note_time(time)
        if idle:
            txn.mark_idle()
        if txn is not self._txn:
            txn.commit()

    def _broadcast(self, frame: bytes) -> None:
        """Append the marker ``frame`` to every active segment of the stream."""
        client, stream = self.world.client, self.world.stream
        for seg in sorted(client.get_stream(stream).active_segments, key=lambda s: s.key_low):
            client.append(seg.name, frame)

    def _write(self, key_idx: np.ndarray, et: np.ndarray, seqs: np.ndarray, sizes: np.ndarray | None) -> None:
        if self._left and self._asserted is not None:  # rejoin at the last assertion, before the events
            self._left = False
            self._broadcast(encode_watermark_marker(self.index + 1, self._asserted))
        super()._write(key_idx, et, seqs, sizes)

    @checked
    def _check(self) -> None:
        """Assertions only at assertion times, none ahead of the clock; rejoining needs an assertion."""
        now = int(self.world.env.now)
        assert self.markers >= 0 and self._asserted_at <= now
        assert self._asserted_at < 0 or self._is_assertion_time(self._asserted_at)
        assert not self._left or self._asserted is not None
        assert not self._left or self._txn_writer is None  # a transaction's idle mark rides in it

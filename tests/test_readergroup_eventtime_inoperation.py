"""``TimeDomain.EVENT_TIME`` reader groups in operation: producer watermarks under everything at once.

The in-operation state machine (``test_readergroup_inoperation``: a clock ticking at
every reading, random splits, merges, transactions, seals, readers joining, crashing
and leaving, checkpoints, resets and restores from a checkpoint, per-key order, exact
delivery) with the writers asserting their time (``note_time``) and leaving the active
set (``mark_idle``) at random. The writers are truthful: every event's time is at or
above all its writer asserted, and a writer (re-)joins above any watermark that could
have been emitted by then (the watermark at the tails). Then no event of a writer
delivered after it joined is at or below a watermark already returned in the epoch.
Embedded and over ``RemoteClient``.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from test_readergroup_inoperation import InOperationMachine

from readergroup.config import TimeDomain
from readergroup.group_state.event_time import ProducerWatermarks
from segmentstore.limits import INT64_MIN


class EventTimeInOperationMachine(InOperationMachine):
    TIME_DOMAIN = TimeDomain.EVENT_TIME

    def __init__(self) -> None:
        super().__init__()
        self.asserted: dict[str, int] = {}  # stream -> its writer's highest assertion
        self.idle: dict[str, bool] = {}
        self.constrained: dict[bytes, int] = {}  # payload -> event time, for events written after joining

    def _floor(self) -> int:
        """The highest watermark any reader could have returned so far: emitted ones and the tails'."""
        c = self.client
        tails = [(c.get_segment(n), off) for s in self.streams for n, off in c.get_tail_cut(s).positions]
        at_tails = ProducerWatermarks(c).watermark(0, tails)
        return max(max(self.emitted.values(), default=INT64_MIN), at_tails)

    def _join(self, stream: str, ahead: int) -> None:
        t = max(self.asserted.get(stream, INT64_MIN), self._floor() + 1) + ahead
        self.writers[stream].note_time(t)
        self.asserted[stream] = t
        self.idle[stream] = False

    @rule(i=st.integers(0, 1), ahead=st.integers(0, 30))
    def note_time(self, i: int, ahead: int) -> None:
        self._join(self._stream(i), ahead)

    @rule(i=st.integers(0, 1))
    def mark_idle(self, i: int) -> None:
        s = self._stream(i)
        self.writers[s].mark_idle()
        self.idle[s] = True

    def _before_write(self, stream: str) -> None:
        if self.idle.get(stream) and stream in self.asserted:
            self._join(stream, 0)  # re-join above the watermark, not at the old assertion

    def _event_time(self, stream: str, j: int, payload: bytes) -> int | None:
        if stream not in self.asserted:
            return self.clock.now()  # before its first assertion: unconstrained
        et = self.asserted[stream] + j
        self.constrained[payload] = et
        return et

    def _event(self, epoch: int, segment: str, offset: int, it: int, payload: bytes) -> None:
        super()._event(epoch, segment, offset, it, payload)
        et = self.constrained.get(payload)
        wm = self.emitted.get(epoch)
        if et is not None and wm is not None:
            assert et > wm, f"late: {payload!r} at event time {et} after watermark {wm} (epoch {epoch})"


_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=50,
)
EventTimeInOperationMachine.TestCase.settings = _SETTINGS
TestEventTimeReaderGroupInOperation = EventTimeInOperationMachine.TestCase


class RemoteEventTimeInOperationMachine(EventTimeInOperationMachine):
    REMOTE = True


RemoteEventTimeInOperationMachine.TestCase.settings = settings(_SETTINGS, max_examples=8)
TestEventTimeReaderGroupInOperationRemote = RemoteEventTimeInOperationMachine.TestCase

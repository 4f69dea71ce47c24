"""The lab's ``flink`` strategy as Flink jobs read a Pravega stream: one subtask per reader.

Pravega's Flink connectors do not make a segment a source. The legacy
``FlinkPravegaReader`` runs one ``EventStreamReader`` of a shared reader group per
parallel subtask, and the FLIP-27 ``PravegaSource`` maps one split to one reader (reader
id = subtask id). So a subtask's watermark generator sees the events its reader is
assigned, from whatever segments the group gives it as segments split, merge and
rebalance; a subtask does not finish when a segment is sealed; Flink's
``StatusWatermarkValve`` combines the subtasks downstream (docs/engines.md, "Which
topology a job has"). ``FlinkReaderStrategy`` is that job (``strategies.flink_source:
reader``, the default); ``FlinkStrategy`` (``segment_union``) is one bounded source per
segment, unioned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from readergroup.group_state.state import SegmentState
from segmentstore import Clock
from segmentstore.checks import checked
from segmentstore.limits import INT64_MAX

from ..spec.errors import SimulationError
from .compared_strategies import FlinkStrategy, LabEvent, _SplitEmitter
from .engine_rules import ENGINE_RULES, EngineRules
from .lab_scenario import LabStrategies

__all__ = ["FlinkReaderStrategy"]


class FlinkReaderStrategy(FlinkStrategy):
    """Flink reading the stream through Pravega's connector: a subtask per reader, combined by the valve.

    The job's parallelism is the number of the scenario's reader instances (in the order of
    ``readers``, ``count`` expanded): subtask ``i`` is the ``i``-th reader of the strategy's
    reader group, so it reads what the lab's readers read, with the same assignment,
    rebalancing, crashes, restarts and leaves. Each subtask has one
    ``WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks)`` generator over every event
    its reader delivers (redelivered ones included: they reach the generator, and the
    de-duplication drops them after it), emitting every ``flink_interval_ms`` through
    Flink's ``WatermarkEmitter``; the late filter's ``StatusWatermarkValve`` has one channel
    per subtask, all from the start (active at ``Long.MIN_VALUE``: a subtask that has read
    nothing holds event time back until its idleness timeout makes it idle). One tick's
    emits are taken subtask by subtask (the subtask's index is its *slot*), the combined
    watermark moving after each; an event meets the value after the last tick before it.

    A subtask never ends: a sealed segment only stops its reader's events from that
    segment, and a reader's lifecycle changes only what it delivers. A reader that has not
    joined yet, that crashed, or that left has no events, so its subtask goes idle through
    the idleness timeout (and drops out of the minimum); when the reader joins or restarts
    and delivers again, its next higher watermark makes the subtask active, aligned again
    once it reaches the combined watermark. The generator and the channel survive the
    reader's crash. In Flink a failed reader fails its task, which restarts with a new
    generator (from ``Long.MIN_VALUE``) and new readers; the valve downstream keeps each
    channel's highest watermark, so what reaches it is the same as here — the maximum of
    the old and the new generator's watermark — except that a restarted task's idleness
    clock starts anew. The combined watermark never decreases.

    Records (the same as ``FlinkStrategy``'s, for ``ingestwm validate``, with the
    subtask's reader id where ``FlinkStrategy`` has the segment): ``arrivals``,
    ``redelivered``, ``spans`` (every subtask from the first tick to the last), ``slots``,
    ``emitted``, ``fired_at``, ``statuses`` (clock ms, subtask, ``idle``/``active``) and
    ``transitions``.
    """

    topology = "reader"

    def __init__(
        self, config: LabStrategies, window_ms: int, clock: Clock, rules: EngineRules = ENGINE_RULES
    ) -> None:
        super().__init__(config, window_ms, clock, rules)
        self._subtasks: dict[str, int] = {}  # reader id -> subtask index (its channel and slot)
        self._sub_gens: list[Any] = []
        self._sub_emitters: list[_SplitEmitter] = []

    @property
    def subtasks(self) -> tuple[str, ...]:
        """The subtasks, by index: the reader id each one is."""
        return tuple(self._subtasks)

    def on_readers(self, readers: Sequence[str]) -> None:
        if self._valve is not None:
            raise SimulationError(
                "flink: the job's subtasks are fixed when it starts (on_readers called twice)"
            )
        if not readers or len(set(readers)) != len(readers):
            raise SimulationError(f"flink: the subtasks need distinct reader ids, got {list(readers)!r}")
        self._valve = self.rules.flink_valve(len(readers))  # every channel active and aligned at MIN
        for i, rid in enumerate(readers):
            self._subtasks[rid] = i
            self.slots[rid] = i
            self._sub_gens.append(self._new_generator())
            self._sub_emitters.append(_SplitEmitter(self._valve, i, rid, self))

    def deliver(self, event: LabEvent) -> None:
        i = self._subtasks.get(event.reader)
        if i is None:
            raise SimulationError(
                f"flink: event delivered by {event.reader!r}, not a subtask of {self.subtasks}"
            )
        self._sub_gens[i].on_event(None, event.event_time, None)
        p = self.pipeline
        wm, late, dups = p.watermark, p.late, p.duplicates
        p.event(event.writer, event.seq, event.event_time, event.nbytes)
        now = self.clock.now()
        if p.duplicates == dups:
            self.arrivals.append(
                (now, event.reader, event.writer, event.seq, event.event_time, wm, p.late > late)
            )
        else:
            self.redelivered.append((now, event.reader, event.event_time))

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        raise SimulationError(
            "flink (reader topology): events come through deliver(), which names the reader"
        )

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.period_ms or self._valve is None:
            return
        now = self.clock.now()
        for rid, i in self._subtasks.items():  # in slot order
            self._sub_gens[i].on_periodic_emit(self._sub_emitters[i])
            self.spans.setdefault(rid, [now, now])[1] = now
            self._moved(now)

    @checked
    def _check(self) -> None:
        """A channel per subtask, each following its emitter; none ended; the pipeline follows the valve."""
        self.pipeline._check()
        if self._valve is None:
            assert not self._subtasks and not self.arrivals
            return
        v = self._valve
        v._check()
        assert v.num_channels == len(self._subtasks) == len(self._sub_emitters) == len(self._sub_gens)
        for rid, i in self._subtasks.items():
            em = self._sub_emitters[i]
            assert em.channel == i and self.slots[rid] == i, rid
            assert em.watermark < INT64_MAX, f"subtask {rid} ended"  # a sealed segment ends no subtask
            assert v.channel_watermark(i) <= em.watermark, rid
            assert em.idle == v.channel_status(i).is_idle(), rid
        assert self.pipeline.watermark >= v.last_output_watermark or not self.emitted
        assert all(a[1] < b[1] for a, b in zip(self.emitted, self.emitted[1:], strict=False))
        assert len(self.fired_at) == len(self.pipeline.firings)
        assert {a[1] for a in self.arrivals} <= self._subtasks.keys()

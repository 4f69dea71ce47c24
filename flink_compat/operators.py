"""Stream operators: the operator contract, outputs with side outputs, and event-time reordering.

An operator receives records, watermarks and watermark statuses from its input (a
``StatusWatermarkValve`` or the operator before it in a chain) and sends its results to
an ``Output``. Watermarks reach an operator strictly ascending; a watermark at or below
the operator's current one is ignored (this also holds right after a restore).

``EventTimeOrderingOperator`` is the PDP-26 prototype's operator: it buffers records in a
priority queue and emits them in event-time order once the watermark passes them; a
record whose timestamp is ``<=`` the current watermark is late: it goes to the late side
output (if one is set) and is counted in ``num_late_records_dropped``.
"""

from __future__ import annotations

import abc
import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from segmentstore.checks import checked

from .errors import CheckpointError, InvalidConfigError, MissingTimestampError
from .job_checkpoint import OperatorState
from .watermark import MIN_TIMESTAMP, StreamRecord, Watermark, WatermarkStatus

__all__ = [
    "OutputTag",
    "LATE_DATA",
    "Output",
    "CollectingOutput",
    "DiscardingOutput",
    "StreamOperator",
    "MapOperator",
    "EventTimeOrderingOperator",
]


@dataclass(frozen=True, slots=True)
class OutputTag:
    """Names a side output (Flink's ``OutputTag``)."""

    id: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidConfigError(f"OutputTag.id must be a non-empty string, got {self.id!r}")


LATE_DATA = OutputTag("late-data")
"""The default side output for late records."""


class Output(Protocol):
    """Where an operator sends records, watermarks, statuses and side-output records."""

    def collect(self, record: StreamRecord[Any]) -> None: ...

    def emit_watermark(self, watermark: Watermark) -> None: ...

    def emit_watermark_status(self, status: WatermarkStatus) -> None: ...

    def collect_side(self, tag: OutputTag, record: StreamRecord[Any]) -> None: ...


class DiscardingOutput:
    """An ``Output`` that drops everything; subclass it and override what a sink keeps."""

    __slots__ = ()

    def collect(self, record: StreamRecord[Any]) -> None:
        """Drop ``record``."""

    def emit_watermark(self, watermark: Watermark) -> None:
        """Drop ``watermark``."""

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        """Drop ``status``."""

    def collect_side(self, tag: OutputTag, record: StreamRecord[Any]) -> None:
        """Drop the side-output ``record``."""


class CollectingOutput:
    """An ``Output`` that keeps everything: a sink for tests and for the end of a chain."""

    __slots__ = ("elements", "records", "side_outputs", "statuses", "watermarks")

    def __init__(self) -> None:
        self.records: list[StreamRecord[Any]] = []
        self.watermarks: list[Watermark] = []
        self.statuses: list[WatermarkStatus] = []
        self.elements: list[StreamRecord[Any] | Watermark | WatermarkStatus] = []
        self.side_outputs: dict[OutputTag, list[StreamRecord[Any]]] = defaultdict(list)

    def collect(self, record: StreamRecord[Any]) -> None:
        self.records.append(record)
        self.elements.append(record)

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermarks.append(watermark)
        self.elements.append(watermark)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self.statuses.append(status)
        self.elements.append(status)

    def collect_side(self, tag: OutputTag, record: StreamRecord[Any]) -> None:
        self.side_outputs[tag].append(record)

    def side(self, tag: OutputTag) -> list[StreamRecord[Any]]:
        """The records of one side output (empty if none)."""
        return list(self.side_outputs.get(tag, ()))


class StreamOperator(abc.ABC):
    """A one-input operator with an event-time clock (its current watermark)."""

    def __init__(self) -> None:
        self._output: Output | None = None
        self._current_watermark = MIN_TIMESTAMP

    def setup(self, output: Output) -> None:
        """Connect the operator to its output (done by the runner before any element)."""
        self._output = output

    @property
    def output(self) -> Output:
        if self._output is None:
            raise InvalidConfigError(f"{type(self).__name__}: setup(output) was not called")
        return self._output

    @property
    def current_watermark(self) -> int:
        return self._current_watermark

    @abc.abstractmethod
    def process_element(self, record: StreamRecord[Any]) -> None:
        """Handle one record."""

    def process_watermark(self, watermark: Watermark) -> None:
        """Advance event time (ignored unless it increases), fire what is due, forward the watermark."""
        if watermark.timestamp <= self._current_watermark:
            return
        self._current_watermark = watermark.timestamp
        self.on_event_time(watermark.timestamp)
        self.output.emit_watermark(watermark)

    def process_watermark_status(self, status: WatermarkStatus) -> None:
        """Forward a status change."""
        self.output.emit_watermark_status(status)

    def on_event_time(self, watermark: int) -> None:  # noqa: B027 - optional hook
        """Hook: event time reached ``watermark``; emit what became due (before it is forwarded)."""

    def snapshot_state(self) -> OperatorState:
        """The operator's state; override ``_snapshot_data``/``_restore_data`` to add your own."""
        return OperatorState(type(self).__name__, self._current_watermark, self._snapshot_data())

    def restore_state(self, state: OperatorState) -> None:
        """Restore from ``snapshot_state`` of the same kind; the watermark never goes below it."""
        if state.kind != type(self).__name__:
            raise CheckpointError(f"{type(self).__name__}: cannot restore state of a {state.kind}")
        self._restore_data(state.data)
        self._current_watermark = max(self._current_watermark, state.current_watermark)

    def _snapshot_data(self) -> Any:
        return None

    def _restore_data(self, data: Any) -> None:
        return None

    @checked
    def _check(self) -> None:
        """Assert the operator's invariants (subclasses extend this)."""
        assert isinstance(self._current_watermark, int)


class MapOperator(StreamOperator):
    """Applies ``fn`` to each record's value, keeping its timestamp."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self._fn = fn

    def process_element(self, record: StreamRecord[Any]) -> None:
        self.output.collect(record.replace(self._fn(record.value)))


class EventTimeOrderingOperator(StreamOperator):
    """Emits records in event-time order when the watermark passes them; late ones go aside.

    ``process_element`` is O(log n) for n buffered records; a watermark emits k records
    in O(k log n). Ties keep arrival order. Records need timestamps.
    """

    def __init__(self, late_output_tag: OutputTag | None = LATE_DATA) -> None:
        super().__init__()
        self._late_tag = late_output_tag
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()
        self._late = 0

    @property
    def num_late_records_dropped(self) -> int:
        """Records that arrived at or below the watermark (sent to the side output, if any)."""
        return self._late

    @property
    def num_buffered(self) -> int:
        return len(self._heap)

    def process_element(self, record: StreamRecord[Any]) -> None:
        ts = record.timestamp
        if ts is None:
            raise MissingTimestampError(
                f"EventTimeOrderingOperator: record {record.value!r:.80} has no timestamp; "
                "give the source a TimestampAssigner"
            )
        if ts <= self._current_watermark:
            self._late += 1
            if self._late_tag is not None:
                self.output.collect_side(self._late_tag, record)
            return
        heapq.heappush(self._heap, (ts, next(self._seq), record.value))

    def on_event_time(self, watermark: int) -> None:
        heap, out = self._heap, self.output
        while heap and heap[0][0] <= watermark:
            ts, _, value = heapq.heappop(heap)
            out.collect(StreamRecord(value, ts))

    def _snapshot_data(self) -> Any:
        return {"late": self._late, "buffer": [(ts, value) for ts, _, value in sorted(self._heap)]}

    def _restore_data(self, data: Any) -> None:
        try:
            late = int(data["late"])
            buffer = [(int(ts), value) for ts, value in data["buffer"]]
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"EventTimeOrderingOperator: malformed state ({e!r})") from None
        self._late = late
        self._seq = itertools.count()
        self._heap = [(ts, next(self._seq), value) for ts, value in buffer]
        heapq.heapify(self._heap)

    @checked
    def _check(self) -> None:
        super()._check()
        assert self._late >= 0
        for i, (ts, _, _) in enumerate(self._heap):
            assert ts > self._current_watermark, f"buffered {ts} <= watermark {self._current_watermark}"
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(self._heap):
                    assert self._heap[child][:2] >= self._heap[i][:2], "heap order broken"

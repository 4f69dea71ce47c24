"""Timestamp assigners and heuristic watermark strategies, named as in Flink.

``WatermarkStrategy.for_bounded_out_of_orderness(bound_ms).with_idleness(timeout_ms)``
builds the heuristic a Flink job would use without connector watermarks: the
watermark is ``max event time seen - bound - 1`` (Flink's exact formula), emitted on
each periodic emit; with idleness, a generator that saw no event for longer than the
timeout on its *processing* clock marks its output idle. The clock is injected
(``create_watermark_generator(clock)``): no wall-clock reads here.

These strategies are for comparison with the ingestion-time watermarks of
``flink_compat.pravega_source`` on the same source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from segmentstore.checks import checked

from .errors import InvalidConfigError
from .watermark import MIN_TIMESTAMP, Watermark

if TYPE_CHECKING:
    from segmentstore.clock import Clock

__all__ = [
    "TimestampAssigner",
    "RecordTimestampAssigner",
    "FunctionTimestampAssigner",
    "WatermarkOutput",
    "WatermarkGenerator",
    "BoundedOutOfOrdernessWatermarks",
    "AscendingTimestampsWatermarks",
    "NoWatermarksGenerator",
    "WatermarksWithIdleness",
    "WatermarkStrategy",
    "as_timestamp_assigner",
]

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class TimestampAssigner(Protocol[T_contra]):
    """Extracts a record's event time; ``record_timestamp`` is the one it carries or MIN_TIMESTAMP."""

    def extract_timestamp(self, element: T_contra, record_timestamp: int) -> int: ...


class RecordTimestampAssigner:
    """Keeps the timestamp the record already carries (the event time its writer gave it)."""

    __slots__ = ()

    def extract_timestamp(self, element: object, record_timestamp: int) -> int:
        return record_timestamp

    def __repr__(self) -> str:
        return "RecordTimestampAssigner()"


class FunctionTimestampAssigner(Generic[T]):
    """A ``TimestampAssigner`` from a function ``(element, record_timestamp) -> int``."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[T, int], int]) -> None:
        self._fn = fn

    def extract_timestamp(self, element: T, record_timestamp: int) -> int:
        return self._fn(element, record_timestamp)

    def __repr__(self) -> str:
        return f"FunctionTimestampAssigner({self._fn!r})"


def as_timestamp_assigner(
    assigner: TimestampAssigner[Any] | Callable[[Any, int], int],
) -> TimestampAssigner[Any]:
    """An assigner as is, or a function wrapped as one."""
    if hasattr(assigner, "extract_timestamp"):
        return assigner  # type: ignore[return-value]
    if callable(assigner):
        return FunctionTimestampAssigner(assigner)
    raise InvalidConfigError(
        f"timestamp_assigner must be a TimestampAssigner or a function, got {assigner!r}"
    )


class WatermarkOutput(Protocol):
    """Where a generator sends watermarks and idleness (Flink's ``WatermarkOutput``)."""

    def emit_watermark(self, watermark: Watermark) -> None: ...

    def mark_idle(self) -> None: ...

    def mark_active(self) -> None: ...


class WatermarkGenerator(Protocol[T_contra]):
    """Generates watermarks from events and periodic calls (Flink's ``WatermarkGenerator``)."""

    def on_event(self, event: T_contra, event_timestamp: int, output: WatermarkOutput) -> None: ...

    def on_periodic_emit(self, output: WatermarkOutput) -> None: ...


class BoundedOutOfOrdernessWatermarks:
    """Watermark = max timestamp seen - bound - 1, emitted periodically. O(1) per event."""

    __slots__ = ("_bound", "_max_timestamp")

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        self._bound = _check_ms("max_out_of_orderness_ms", max_out_of_orderness_ms)
        self._max_timestamp = MIN_TIMESTAMP + self._bound + 1

    def on_event(self, event: object, event_timestamp: int, output: WatermarkOutput) -> None:
        self._max_timestamp = max(self._max_timestamp, event_timestamp)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        output.emit_watermark(Watermark(self._max_timestamp - self._bound - 1))

    @checked
    def _check(self) -> None:
        """Assert the generator's invariant: it never emits below MIN_TIMESTAMP."""
        assert self._max_timestamp >= MIN_TIMESTAMP + self._bound + 1


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """For timestamps that never go down: bounded out-of-orderness with bound 0."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)


class NoWatermarksGenerator:
    """Emits no watermarks at all."""

    __slots__ = ()

    def on_event(self, event: object, event_timestamp: int, output: WatermarkOutput) -> None:
        return None

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        return None


class WatermarksWithIdleness(Generic[T]):
    """Wraps a generator and marks the output idle after ``idle_timeout_ms`` without events.

    As in Flink, inactivity is measured from the first periodic emit that saw no new
    event, so the output goes idle between ``timeout`` and ``timeout + emit interval``
    after the last event. O(1) per call; reads the injected clock once per periodic emit.
    """

    __slots__ = ("_clock", "_counter", "_idle", "_inactive_since", "_inner", "_last_counter", "_timeout")

    def __init__(self, inner: WatermarkGenerator[T], idle_timeout_ms: int, clock: Clock) -> None:
        self._inner = inner
        self._timeout = _check_ms("idle_timeout_ms", idle_timeout_ms)
        if self._timeout == 0:
            raise InvalidConfigError("with_idleness: idle_timeout_ms must be > 0, got 0")
        self._clock = clock
        self._counter = 0
        self._last_counter = 0
        self._inactive_since: int | None = None
        self._idle = False

    @property
    def is_idle(self) -> bool:
        return self._idle

    def on_event(self, event: T, event_timestamp: int, output: WatermarkOutput) -> None:
        self._inner.on_event(event, event_timestamp, output)
        self._counter += 1
        self._idle = False

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._check_if_idle():
            if not self._idle:
                output.mark_idle()
                self._idle = True
        else:
            self._inner.on_periodic_emit(output)

    @checked
    def _check(self) -> None:
        """Assert the wrapper's invariants."""
        assert 0 <= self._last_counter <= self._counter
        assert not (self._idle and self._inactive_since is None), "idle without an inactivity start"

    def _check_if_idle(self) -> bool:
        if self._counter != self._last_counter:
            self._last_counter = self._counter
            self._inactive_since = None
            return False
        now = self._clock.now()
        if self._inactive_since is None:
            self._inactive_since = now
            return False
        return now - self._inactive_since > self._timeout


GeneratorFactory = Callable[["Clock"], WatermarkGenerator[Any]]


@dataclass(frozen=True, slots=True)
class WatermarkStrategy(Generic[T]):
    """How to assign timestamps and generate watermarks (Flink's ``WatermarkStrategy``).

    Build one with ``for_bounded_out_of_orderness``, ``for_monotonous_timestamps``,
    ``no_watermarks`` or ``for_generator``; refine it with ``with_timestamp_assigner``
    and ``with_idleness``.
    """

    generator_factory: GeneratorFactory
    timestamp_assigner: TimestampAssigner[Any] | None = None
    idle_timeout_ms: int | None = None
    description: str = "custom"

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness_ms: int) -> WatermarkStrategy[Any]:
        """Watermark = max event time seen - ``max_out_of_orderness_ms`` - 1."""
        bound = _check_ms("max_out_of_orderness_ms", max_out_of_orderness_ms)
        return WatermarkStrategy(
            lambda _clock: BoundedOutOfOrdernessWatermarks(bound),
            description=f"bounded_out_of_orderness({bound})",
        )

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy[Any]:
        """Watermark = max event time seen - 1."""
        return WatermarkStrategy(lambda _clock: AscendingTimestampsWatermarks(), description="monotonous")

    @staticmethod
    def no_watermarks() -> WatermarkStrategy[Any]:
        """No watermarks: event time never advances."""
        return WatermarkStrategy(lambda _clock: NoWatermarksGenerator(), description="no_watermarks")

    @staticmethod
    def for_generator(factory: GeneratorFactory, description: str = "custom") -> WatermarkStrategy[Any]:
        """A strategy from a generator factory ``clock -> WatermarkGenerator``."""
        return WatermarkStrategy(factory, description=description)

    def with_timestamp_assigner(
        self, assigner: TimestampAssigner[Any] | Callable[[Any, int], int]
    ) -> WatermarkStrategy[T]:
        """The same strategy with a timestamp assigner (an object or a function)."""
        return WatermarkStrategy(
            self.generator_factory, as_timestamp_assigner(assigner), self.idle_timeout_ms, self.description
        )

    def with_idleness(self, idle_timeout_ms: int) -> WatermarkStrategy[T]:
        """The same strategy, marking the output idle after ``idle_timeout_ms`` without events."""
        timeout = _check_ms("idle_timeout_ms", idle_timeout_ms)
        if timeout == 0:
            raise InvalidConfigError("with_idleness: idle_timeout_ms must be > 0, got 0")
        return WatermarkStrategy(
            self.generator_factory,
            self.timestamp_assigner,
            timeout,
            f"{self.description}.with_idleness({timeout})",
        )

    def create_watermark_generator(self, clock: Clock) -> WatermarkGenerator[Any]:
        """A fresh generator for one subtask; ``clock`` is the processing-time clock (idleness)."""
        inner = self.generator_factory(clock)
        if self.idle_timeout_ms is None:
            return inner
        return WatermarksWithIdleness(inner, self.idle_timeout_ms, clock)

    def create_timestamp_assigner(self) -> TimestampAssigner[Any]:
        """The strategy's assigner, or one that keeps the record's own timestamp."""
        return self.timestamp_assigner if self.timestamp_assigner is not None else RecordTimestampAssigner()


def _check_ms(option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidConfigError(f"{option} must be an int of ms >= 0, got {value!r}")
    return value

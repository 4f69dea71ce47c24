"""Custom watermark strategies for the lab: the public interface, the ``module:Class`` loader, the adapter.

A researcher adds a strategy by writing a class with two methods and naming it in a lab
scenario (``strategies.custom``); ``ingestwm compare`` then runs it side by side with
the four built-in strategies, on the same reader schedule, reordering buffer and
windows, and it gets its own row in the table, CSV, JSON and figure. The interface
(documented in ``docs/strategies.md``):

- ``__init__(**params)``: the scenario's ``params`` mapping, as keyword arguments.
- ``on_event(event: LabEvent) -> None``: each delivered event, once (redeliveries after a
  reader failover are filtered out before), in delivery order, before it reaches the
  reordering buffer.
- ``watermark(now_ms: int) -> int | None``: the event-time watermark now (``None``: none
  yet). Asked, and applied at once, at the points where the built-in strategies apply
  theirs: right after each watermark the reader group delivers (after
  ``on_group_watermark``; as ``ingestion`` and ``producer`` do, between the events of one
  read), and after every tick's reads (``tick_ms``; after ``on_tick``; where ``flink``
  and ``spark`` emit). The pipeline keeps the watermark monotonic: a value below the
  current one is ignored (and counted).

Optional: a class attribute ``time_domain`` (``"ingestion"``, ``"event"`` or
``"processing"``, the default) chooses the reader group's watermark domain, and
``on_group_watermark(watermark: int, now_ms: int)`` receives that group's watermarks
(ingestion time: no event ingested at or before it follows; event time: the producers'
assertions); ``on_tick(now_ms: int, segments: tuple[str, ...])`` runs each tick before
``watermark``, with the segments the group currently reads.

Errors: a bad module, a missing class, a class without the two methods, params its
constructor rejects, or a ``watermark`` that is not an int raise ``LabScenarioError`` /
``LabStrategyError`` naming the strategy and the path; an exception inside a plugin
call is re-raised as ``LabStrategyError`` naming the strategy and the method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from readergroup.config import TimeDomain
from readergroup.group_state.state import SegmentState
from segmentstore import Clock
from segmentstore.checks import checked

from ..spec.errors import SimulationError
from ..spec.strategy_classes import instantiate, load_strategy_class
from .compared_strategies import LabEvent, Strategy
from .lab_scenario import LabCustomStrategy, LabStrategies

__all__ = [
    "LabEvent",
    "LabWatermarkStrategy",
    "LabStrategyError",
    "TIME_DOMAINS",
    "load_strategy_class",
    "instantiate",
    "PluginStrategy",
    "time_domain_of",
]

TIME_DOMAINS: dict[str, TimeDomain] = {
    "processing": TimeDomain.PROCESSING_TIME,
    "ingestion": TimeDomain.INGESTION_TIME,
    "event": TimeDomain.EVENT_TIME,
}


def time_domain_of(spec: LabCustomStrategy) -> TimeDomain:
    """A custom strategy's reader group's time domain: its class's ``time_domain`` (default processing)."""
    return TIME_DOMAINS[getattr(load_strategy_class(spec.class_path), "time_domain", "processing")]


class LabStrategyError(SimulationError):
    """A custom strategy failed while the lab ran it; the message names the strategy and the method.

    A ``SimulationError`` (the experiment side's root, ``bench.spec.errors``), so
    ``compare``, replications and sweeps report it as one line.
    """


@runtime_checkable
class LabWatermarkStrategy(Protocol):
    """What a custom lab strategy implements (the optional hooks are listed in the module doc)."""

    def on_event(self, event: LabEvent) -> None: ...

    def watermark(self, now_ms: int) -> int | None: ...


class PluginStrategy(Strategy):
    """Runs a custom strategy in the lab: feeds it events and ticks, moves the pipeline to its watermark."""

    def __init__(self, spec: LabCustomStrategy, config: LabStrategies, window_ms: int, clock: Clock) -> None:
        super().__init__(config, window_ms, clock)
        self.spec = spec
        self.name = spec.name
        self.impl = instantiate(spec)
        self.time_domain = time_domain_of(spec)
        self.regressions = 0  # watermarks below the current one (ignored)
        self._on_group = getattr(self.impl, "on_group_watermark", None)
        self._on_tick = getattr(self.impl, "on_tick", None)

    def _fail(self, method: str, e: Exception) -> LabStrategyError:
        return LabStrategyError(
            f"custom strategy {self.name!r} ({self.spec.class_path}).{method} raised {type(e).__name__}: {e}"
        )

    def deliver(self, event: LabEvent) -> None:
        try:
            self.impl.on_event(event)
        except Exception as e:
            raise self._fail("on_event", e) from e
        self.pipeline.event(event.writer, event.seq, event.event_time, event.nbytes)

    def on_watermark(self, watermark: int) -> None:
        """A group watermark: ``on_group_watermark``, then the plugin's watermark applied at once.

        At the point where the built-in ``ingestion`` and ``producer`` strategies apply
        theirs, so events read after it in the same tick meet it in both.
        """
        now = self.clock.now()
        if self._on_group is not None:
            try:
                self._on_group(watermark, now)
            except Exception as e:
                raise self._fail("on_group_watermark", e) from e
        self._apply(now)

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        """Each tick after the reads (where ``flink`` and ``spark`` emit): ``on_tick``, then the watermark."""
        now = self.clock.now()
        if self._on_tick is not None:
            try:
                self._on_tick(now, tuple(r.segment.name for r in rows if r.status != "future"))
            except Exception as e:
                raise self._fail("on_tick", e) from e
        self._apply(now)

    def _apply(self, now: int) -> None:
        """Ask the plugin for its watermark and move the pipeline to it (ignored unless it rises)."""
        try:
            wm = self.impl.watermark(now)
        except Exception as e:
            raise self._fail("watermark", e) from e
        if wm is None:
            return
        if isinstance(wm, bool) or not isinstance(wm, int):
            raise LabStrategyError(
                f"custom strategy {self.name!r} ({self.spec.class_path}).watermark returned "
                f"{wm!r}; it must return an int (ms since the epoch) or None"
            )
        if wm < self.pipeline.watermark:
            self.regressions += 1
        self.pipeline.advance(wm)

    @checked
    def _check(self) -> None:
        """The pipeline's invariants, then the plugin's own ``_check()`` if it has one."""
        self.pipeline._check()
        assert self.regressions >= 0
        own = getattr(self.impl, "_check", None)
        if callable(own):
            own()

"""``SimResult``: what one simulation run produced, as the engine returns it and the outputs read it.

Its own module so that the engine (``engine``) and the outputs written from a result
(``plots``, the demo's report) depend on it, not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec.scenario import Scenario
from .pipeline import OrderedRecord, WindowFiring
from .recorder import Recorder
from .stages import StageRow

__all__ = ["SimResult"]


@dataclass(frozen=True, slots=True, eq=False)
class SimResult:
    """What a run produced. ``summary`` is JSON-ready; the timings (``wall_s`` ...) are not deterministic."""

    scenario: Scenario
    summary: dict[str, Any]
    recorder: Recorder
    ordered: tuple[OrderedRecord, ...]
    late: tuple[OrderedRecord, ...]
    firings: tuple[WindowFiring, ...]
    wall_s: float
    setup_wall_s: float = 0.0
    """Of ``wall_s``, the time spent building the world (store, stream, reader group) before time 0."""
    stage_rows: tuple[StageRow, ...] = ()
    """``pipeline.stages``: one row per sample and stage (``bench.sim.stages.STAGE_COLUMNS``)."""
    run_cpu_s: float = 0.0
    """CPU seconds of this process while simulating (after the set-up): on a shared machine, what
    the run cost, where ``wall_s`` also counts other processes' turns. Never written either."""

    @property
    def events_delivered(self) -> int:
        return int(self.recorder.delivered.sum())

"""``SimResult``: what one simulation run produced, as the engine returns it and the outputs read it.

Its own module so that the engine (``engine``) and the outputs written from a result
(``plots``, the demo's report) depend on it, not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .pipeline import OrderedRecord, WindowFiring
from .recorder import Recorder
from .scenario import Scenario
from .stages import StageRow

__all__ = ["SimResult"]


@dataclass(frozen=True, slots=True, eq=False)
class SimResult:
    """What a run produced. ``summary`` is JSON-ready; ``wall_s`` is the only non-deterministic field."""

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

    @property
    def events_delivered(self) -> int:
        return int(self.recorder.delivered.sum())

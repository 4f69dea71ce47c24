"""Lab scenarios: a frozen schema, YAML loading with errors that name the field, the shipped set.

A lab scenario is one workload (writers, readers, a stream) that ``compare`` runs
through four watermark strategies at once. Times are ``int`` ms relative to the run's
start, except ``start_time_ms`` (ms since the epoch). Unknown keys, wrong types and
out-of-range values raise ``LabScenarioError`` with the dotted path of the field. Files
are found and read by the shared loader (``bench.scenarios.yaml_specs``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..scenarios.errors import SpecError
from ..scenarios.yaml_specs import build_dataclass, find, read_yaml, shipped

__all__ = [
    "LabScenarioError",
    "LabStore",
    "LabStream",
    "LabWriter",
    "LabReader",
    "LabStrategies",
    "LabScenario",
    "WHEN_IDLE",
    "lab_scenarios",
    "load_lab_scenario",
    "lab_scenario_from_dict",
]

WHEN_IDLE = ("heartbeat", "mark_idle", "silent")


class LabScenarioError(SpecError):
    """A lab scenario is malformed; the message names the field (dotted path)."""

    @property
    def path(self) -> str:
        return self.field


def _low(obj: Any, name: str, low: float) -> None:
    v = getattr(obj, name)
    if v is not None and v < low:
        raise LabScenarioError(f"must be >= {low:g}, got {v!r}", name)


@dataclass(frozen=True, slots=True)
class LabStore:
    """The store's ingestion-watermark settings (``StoreConfig``)."""

    max_watermark_lag_ms: int = 1_000
    polling_period_ms: int = 1_000

    def __post_init__(self) -> None:
        _low(self, "max_watermark_lag_ms", 1)
        _low(self, "polling_period_ms", 1)


@dataclass(frozen=True, slots=True)
class LabStream:
    """The stream: initial segments; every ``scale_every_ms`` all segments are replaced by new ones."""

    name: str = "lab/stream"
    segments: int = 1
    scale_every_ms: int | None = None

    def __post_init__(self) -> None:
        _low(self, "segments", 1)
        _low(self, "scale_every_ms", 1)
        if self.name.count("/") != 1 or not all(self.name.split("/")):
            raise LabScenarioError(f"must be 'scope/name', got {self.name!r}", "name")


@dataclass(frozen=True, slots=True)
class LabWriter:
    """One producer: what it writes, its clock, and how it asserts watermarks.

    Events: ``rate_per_s`` spread evenly over each tick, or exactly ``schedule_ms``
    (with per-event ``schedule_offsets_ms`` added to the event time). Event time =
    ``start_time_ms + generation time + event_time_skew_ms`` minus a seeded jitter in
    ``[0, jitter_ms]``. With ``active_ms`` the writer alternates ``active_ms`` on and
    ``idle_ms`` off. With ``commit_every_ms`` it writes through transactions.
    Assertions: every ``assert_every_ms`` (``None``: never) the writer calls
    ``note_time(start_time_ms + now + skew - jitter_ms + assert_error_ms)`` — truthful
    when ``assert_error_ms`` is 0 and no schedule offset is below ``-jitter_ms``.
    ``when_idle`` (also after ``stop_ms``): ``heartbeat`` keeps asserting, ``mark_idle``
    asserts once more and calls ``mark_idle()``, ``silent`` stops asserting. Before
    ``start_ms`` a writer counts as idle, so (unless ``silent``) it joins at the run's
    start, as the PIP advises; a transactional writer joins with a transaction of its own.
    """

    name: str
    keys: tuple[str, ...] = ()
    rate_per_s: float = 10.0
    schedule_ms: tuple[int, ...] = ()
    schedule_offsets_ms: tuple[int, ...] = ()
    start_ms: int = 0
    stop_ms: int | None = None
    max_events: int | None = None
    event_time_skew_ms: int = 0
    jitter_ms: int = 0
    active_ms: int | None = None
    idle_ms: int = 0
    assert_every_ms: int | None = 1_000
    assert_error_ms: int = 0
    when_idle: str = "heartbeat"
    commit_every_ms: int | None = None
    payload_bytes: int = 16

    def __post_init__(self) -> None:
        if not self.name:
            raise LabScenarioError("must not be empty", "name")
        for f in ("rate_per_s", "start_ms", "jitter_ms", "idle_ms", "max_events"):
            _low(self, f, 0)
        for f in ("active_ms", "assert_every_ms", "commit_every_ms"):
            _low(self, f, 1)
        _low(self, "payload_bytes", 8)
        if self.when_idle not in WHEN_IDLE:
            raise LabScenarioError(
                f"must be one of {', '.join(WHEN_IDLE)}; got {self.when_idle!r}", "when_idle"
            )
        if self.schedule_offsets_ms and len(self.schedule_offsets_ms) != len(self.schedule_ms):
            raise LabScenarioError(
                f"has {len(self.schedule_offsets_ms)} values for {len(self.schedule_ms)} schedule_ms",
                "schedule_offsets_ms",
            )
        if list(self.schedule_ms) != sorted(self.schedule_ms):
            raise LabScenarioError("must be in ascending order", "schedule_ms")
        if self.stop_ms is not None and self.stop_ms < self.start_ms:
            raise LabScenarioError(f"{self.stop_ms} is before start_ms {self.start_ms}", "stop_ms")


@dataclass(frozen=True, slots=True)
class LabReader:
    """Readers (``count`` instances), the same in every strategy's reader group.

    ``join_ms`` (late: a historical catch-up read), ``rate_per_s`` (``None``: as fast as
    the data comes), ``crash_ms`` (stops reading; declared offline ``offline_after_ms`` later).
    """

    name: str
    count: int = 1
    join_ms: int = 0
    rate_per_s: float | None = None
    crash_ms: int | None = None
    offline_after_ms: int = 1_000

    def __post_init__(self) -> None:
        if not self.name:
            raise LabScenarioError("must not be empty", "name")
        for f in ("count",):
            _low(self, f, 1)
        for f in ("join_ms", "rate_per_s", "offline_after_ms"):
            _low(self, f, 0)
        if self.crash_ms is not None and self.crash_ms < self.join_ms:
            raise LabScenarioError(f"{self.crash_ms} is before join_ms {self.join_ms}", "crash_ms")


@dataclass(frozen=True, slots=True)
class LabStrategies:
    """The four strategies' knobs.

    ``max_event_time_lag_ms`` (ingestion time), ``flink_*`` (bounded out-of-orderness per
    segment, idleness, periodic emit interval), ``spark_*`` (delay, trigger interval, and
    what one input is: the whole ``stream`` — Spark's max over all partitions of a
    source — or each ``segment``; ``spark_policy`` is Spark's
    ``spark.sql.streaming.multipleWatermarkPolicy``: the global watermark is the ``min``
    (Spark's default) or the ``max`` over inputs).
    """

    max_event_time_lag_ms: int = 1_000
    flink_bound_ms: int = 1_000
    flink_idle_timeout_ms: int = 5_000
    flink_interval_ms: int = 200
    spark_delay_ms: int = 1_000
    spark_trigger_ms: int = 1_000
    spark_input: str = "stream"
    spark_policy: str = "min"

    def __post_init__(self) -> None:
        for f in ("max_event_time_lag_ms", "flink_bound_ms", "spark_delay_ms"):
            _low(self, f, 0)
        for f in ("flink_idle_timeout_ms", "flink_interval_ms", "spark_trigger_ms"):
            _low(self, f, 1)
        if self.spark_input not in ("stream", "segment"):
            raise LabScenarioError(f"must be stream or segment, got {self.spark_input!r}", "spark_input")
        if self.spark_policy not in ("min", "max"):
            raise LabScenarioError(f"must be min or max, got {self.spark_policy!r}", "spark_policy")


@dataclass(frozen=True, slots=True)
class LabScenario:
    """One workload for ``compare``: store, stream, writers, readers, windows and strategy knobs."""

    name: str
    duration_ms: int
    description: str = ""
    seed: int = 0
    start_time_ms: int = 1_700_000_000_000
    tick_ms: int = 100
    sample_ms: int = 1_000
    window_ms: int = 10_000
    report_interval_ms: int = 100
    store: LabStore = dataclasses.field(default_factory=LabStore)
    stream: LabStream = dataclasses.field(default_factory=LabStream)
    writers: tuple[LabWriter, ...] = ()
    readers: tuple[LabReader, ...] = (LabReader("reader"),)
    strategies: LabStrategies = dataclasses.field(default_factory=LabStrategies)

    def __post_init__(self) -> None:
        for f in ("duration_ms", "tick_ms", "sample_ms", "window_ms"):
            _low(self, f, 1)
        _low(self, "report_interval_ms", 0)
        _low(self, "start_time_ms", 0)
        if not self.writers:
            raise LabScenarioError("needs at least one writer", "writers")
        if not self.readers:
            raise LabScenarioError("needs at least one reader", "readers")
        for what in ("writers", "readers"):
            names = [s.name for s in getattr(self, what)]
            if len(set(names)) != len(names):
                raise LabScenarioError(f"names repeat: {names}", what)
        for f in ("sample_ms", "window_ms"):
            if getattr(self, f) % self.tick_ms:
                raise LabScenarioError(f"must be a multiple of tick_ms {self.tick_ms}", f)


# ---------------------------------------------------------------------- loading
def lab_scenario_from_dict(data: dict[str, Any]) -> LabScenario:
    """A scenario from a parsed YAML mapping (``LabScenarioError`` names a bad field)."""
    if not isinstance(data, dict):
        raise LabScenarioError(f"a lab scenario is a mapping, got {type(data).__name__}")
    scenario: LabScenario = build_dataclass(LabScenario, data, "", LabScenarioError)
    return scenario


def lab_scenarios() -> dict[str, Path]:
    """The shipped lab scenarios (``bench/scenarios/lab/*.yaml``) by name."""
    return shipped("lab")


def load_lab_scenario(name_or_path: str | Path) -> LabScenario:
    """Load a shipped scenario by name, or a YAML file by path."""
    path = find(name_or_path, "lab")
    if path is None:
        raise LabScenarioError(
            f"no lab scenario {str(name_or_path)!r}: not a file, and not one of {', '.join(lab_scenarios())}"
        )
    return lab_scenario_from_dict(read_yaml(path, "lab scenario", LabScenarioError))

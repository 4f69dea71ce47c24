"""Scenarios: the one scenario language of ``simulate``, ``compare`` and ``experiment``.

One frozen schema describes a workload — store, stream, scaling, writers, readers,
faults, reader group, pipeline, metrics — which the simulator runs; an optional
``strategies`` section holds the knobs of the watermark-strategy lab, which evaluates
its strategies over the same workload (``bench.lab``). Files are found, read and
converted by the shared loader (``bench.scenarios.yaml_specs``); this module holds the
schema and raises ``ScenarioError``. ``docs/scenario-schema.md`` is generated from it
(``ingestwm scenario schema``).

A scenario file is a YAML mapping whose keys are the fields of ``Scenario`` (nested
mappings for ``store``, ``stream``, ``scaling``, ``group``, ``pipeline``, ``metrics``,
``faults``, ``strategies``; lists of mappings for ``writers`` and ``readers``). Times are ``int`` milliseconds
relative to the scenario's start, except ``start_time_ms`` (ms since the epoch).
Unknown keys, wrong types and out-of-range values raise ``ScenarioError`` with the
dotted path of the field (``writers.1.workload.rate_per_s``).

Overrides are ``key=value`` strings: the key is a dotted path (list items by index or
by ``name``), the value is parsed as a YAML scalar or flow collection (``5000`` is an
int, ``1.5`` a float, ``true`` a bool, ``null`` None, ``[1, 2]`` a list).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..scenarios import yaml_specs
from ..scenarios.yaml_specs import build_dataclass, find, read_mapping, shipped
from .errors import ScenarioError

__all__ = [
    "StoreSpec",
    "StreamSpec",
    "ScalingSpec",
    "ScheduledEvent",
    "WorkloadSpec",
    "DelaySpec",
    "WriterSpec",
    "NoAckFault",
    "ReaderSpec",
    "FaultsSpec",
    "GroupSpec",
    "StageSpec",
    "PipelineSpec",
    "MetricsSpec",
    "CustomStrategySpec",
    "StrategiesSpec",
    "BUILTIN_STRATEGIES",
    "Scenario",
    "WHEN_IDLE",
    "shipped_scenarios",
    "scenario_path",
    "load_scenario_data",
    "load_scenario",
    "scenario_from_dict",
    "scenario_to_dict",
    "apply_overrides",
    "parse_override",
]


def _f(
    default: Any = dataclasses.MISSING,
    *,
    low: float | None = None,
    choices: tuple[str, ...] = (),
    doc: str = "",
) -> Any:
    """A field with a lower bound or a set of choices (checked by ``_validate``) and its meaning (``doc``)."""
    meta = {"low": low, "choices": choices, "doc": doc}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or a frozen dataclass default")
    if dataclasses.is_dataclass(default):
        return field(default_factory=_constant(default), metadata=meta)
    return field(default=default, metadata=meta)


def _constant(value: Any) -> Any:
    """A default factory returning ``value`` (a frozen dataclass, safe to share)."""

    def make() -> Any:
        return value

    return make


def _validate(obj: Any) -> None:
    """Check the bounds and choices declared with ``_f`` (raises ``ScenarioError`` naming the field)."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        low = f.metadata.get("low")
        if low is not None and v is not None and not isinstance(v, tuple) and v < low:
            raise ScenarioError(f"must be >= {low:g}, got {v!r}", f.name)
        if low is not None and isinstance(v, tuple) and any(x < low for x in v):
            raise ScenarioError(f"every value must be >= {low:g}, got {list(v)}", f.name)
        choices = f.metadata.get("choices")
        if choices and v not in choices:
            raise ScenarioError(f"must be one of {', '.join(choices)}; got {v!r}", f.name)


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """The segment store's watermark settings (``StoreConfig``)."""

    max_watermark_lag_ms: int = _f(
        10_000, low=1, doc="an idle segment's watermark advances once its tail is older than this (PDP-26)"
    )
    polling_period_ms: int = _f(1_000, low=1, doc="how often the watermark advancer runs")

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """The one stream every writer writes and the reader group reads."""

    name: str = _f("sim/stream", doc="'scope/name'")
    segments: int = _f(1, low=1, doc="segments at the start (equal key ranges)")

    def __post_init__(self) -> None:
        _validate(self)
        if self.name.count("/") != 1 or not all(self.name.split("/")):
            raise ScenarioError(f"must be 'scope/name', got {self.name!r}", "name")


SCALING_MODES = ("split", "merge", "split_merge", "shift", "auto")


@dataclass(frozen=True, slots=True)
class ScalingSpec:
    """Stream scaling: at fixed times (``every_ms`` from ``start_ms``, and/or ``at_ms``), or by load.

    Modes: ``split`` splits the widest active segment in two, ``merge`` merges the two
    adjacent segments with the narrowest union, ``split_merge`` alternates (split all /
    merge back pairwise), ``shift`` seals every segment and creates as many successors
    with the boundaries shifted (predecessors with several successors and vice versa).
    ``auto`` is Pravega's auto-scaling by event rate: every ``every_ms`` each active
    segment's rate over the last ``every_ms`` is measured; a segment above
    ``target_rate_per_s`` splits in two, two adjacent segments whose summed rate is below
    half the target merge (never below ``min_segments``).
    """

    every_ms: int | None = _f(None, low=1, doc="period of scale events (auto: of the rate checks)")
    at_ms: tuple[int, ...] = _f((), low=0, doc="times of scale events")
    start_ms: int = _f(0, low=0, doc="the first periodic scale event is at start_ms + every_ms")
    stop_ms: int | None = _f(None, low=0, doc="no scale event after this")
    mode: str = _f("shift", choices=SCALING_MODES, doc="what a scale event does (see above)")
    target_rate_per_s: float = _f(1_000.0, low=0, doc="auto: a segment's target event rate")
    min_segments: int = _f(1, low=1, doc="auto: never merge below this many active segments")

    def __post_init__(self) -> None:
        _validate(self)
        if self.mode == "auto" and self.every_ms is None:
            raise ScenarioError("auto scaling measures rates every every_ms: set it", "every_ms")


@dataclass(frozen=True, slots=True)
class ScheduledEvent:
    """One event of a ``schedule`` workload: written at ``at_ms`` with routing key ``key``."""

    at_ms: int = _f(low=0, doc="when it is written")
    key: str = _f(doc="its routing key")
    event_time_offset_ms: int = _f(0, doc="added to its event time (the writer's clock at at_ms)")

    def __post_init__(self) -> None:
        _validate(self)


WORKLOAD_KINDS = ("constant", "poisson", "bursty", "mmpp", "periodic_idle", "schedule", "trace")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """When a writer produces events (its arrival process).

    ``constant``: ``rate_per_s``, evenly spaced; ``poisson``: a Poisson process of
    ``rate_per_s``; ``bursty``: ``rate_per_s``, and ``burst_rate_per_s`` for ``burst_ms``
    every ``burst_every_ms``; ``mmpp``: on/off bursts (a two-state Markov-modulated
    Poisson process) with ``burst_rate_per_s`` in bursts of mean length ``burst_ms``,
    ``rate_per_s`` between them for a mean ``burst_every_ms - burst_ms`` (both
    exponential, the same mean rate as ``bursty``); ``periodic_idle``: ``rate_per_s`` for
    ``active_ms``, then nothing for ``idle_ms``, repeated; ``schedule``: exactly
    ``events``; ``trace``: the rows of the CSV or Parquet file ``trace`` (columns
    ``time_ms`` since the run's start, ``key``, optionally ``event_time_ms`` since the
    epoch — else the writer's clock — and ``size``, the payload bytes). Phases (bursts,
    idle periods) count from the writer's ``start_ms``.
    """

    kind: str = _f("constant", choices=WORKLOAD_KINDS, doc="the arrival process (see above)")
    rate_per_s: float = _f(100.0, low=0, doc="events/s (bursty, mmpp: between bursts)")
    burst_rate_per_s: float = _f(1_000.0, low=0, doc="bursty, mmpp: events/s in a burst")
    burst_ms: int = _f(1_000, low=1, doc="bursty: burst length; mmpp: mean burst length")
    burst_every_ms: int = _f(10_000, low=1, doc="bursty: burst period; mmpp: mean burst + calm length")
    active_ms: int = _f(10_000, low=1, doc="periodic_idle: active phase")
    idle_ms: int = _f(10_000, low=0, doc="periodic_idle: idle phase")
    events: tuple[ScheduledEvent, ...] = _f((), doc="schedule: the events")
    trace: str = _f("", doc="trace: a .csv or .parquet file (relative paths: to the scenario file)")

    def __post_init__(self) -> None:
        _validate(self)
        if self.kind == "schedule" and not self.events:
            raise ScenarioError("a 'schedule' workload needs at least one event", "events")
        if self.kind == "trace" and not self.trace:
            raise ScenarioError("a 'trace' workload needs the trace file", "trace")
        if self.kind in ("bursty", "mmpp") and self.burst_ms > self.burst_every_ms:
            raise ScenarioError(
                f"burst_ms {self.burst_ms} is longer than burst_every_ms {self.burst_every_ms}", "burst_ms"
            )

    @property
    def random(self) -> bool:
        """Whether the arrivals are drawn at random."""
        return self.kind in ("poisson", "mmpp")


DELAY_KINDS = ("none", "fixed", "uniform", "exponential", "lognormal")


@dataclass(frozen=True, slots=True)
class DelaySpec:
    """A delay in ms drawn per event: ``none`` (0), ``fixed`` (``ms``), ``uniform`` in ``[0, ms]``,
    ``exponential`` of mean ``ms``, ``lognormal`` of median ``ms`` and shape ``sigma``."""

    kind: str = _f("none", choices=DELAY_KINDS, doc="the distribution")
    ms: float = _f(
        0.0, low=0, doc="fixed: the delay; uniform: the maximum; exponential: the mean; lognormal: the median"
    )
    sigma: float = _f(1.0, low=0, doc="lognormal: the standard deviation of the log")

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def random(self) -> bool:
        return self.kind in ("uniform", "exponential", "lognormal") and self.ms > 0

    @property
    def active(self) -> bool:
        return self.kind != "none" and self.ms > 0

    def bound_ms(self) -> int:
        """A delay the draws stay below: the maximum (fixed, uniform), else the 99.9th percentile."""
        if not self.active:
            return 0
        if self.kind in ("fixed", "uniform"):
            return math.ceil(self.ms)
        if self.kind == "exponential":
            return math.ceil(self.ms * math.log(1000.0))
        return math.ceil(self.ms * math.exp(3.0902 * self.sigma))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` delays (int64 ms, >= 0)."""
        if not self.active or n == 0:
            return np.zeros(n, np.int64)
        if self.kind == "fixed":
            return np.full(n, round(self.ms), np.int64)
        if self.kind == "uniform":
            return rng.integers(0, math.floor(self.ms) + 1, size=n, dtype=np.int64)
        if self.kind == "exponential":
            x = rng.exponential(self.ms, size=n)
        else:
            x = rng.lognormal(math.log(self.ms), self.sigma, size=n)
        return np.floor(x).astype(np.int64)


WHEN_IDLE = ("heartbeat", "mark_idle", "silent")


@dataclass(frozen=True, slots=True)
class WriterSpec:
    """A writer (``count`` > 1: that many instances ``name-0`` ...), its workload and its clock.

    Events are produced during each ``tick_ms`` and handed to the store at the tick's end
    (``schedule``: at their time) plus a ``write_latency``, resolved on the tick grid (an
    event due within a tick is appended at its end: a smaller tick is finer and slower);
    then one append per segment
    (``api: batch``, frames built in numpy) or an ``EventWriter`` (``api: event_writer``).
    With ``commit_interval_ms`` the writer writes through transactions committed at that
    interval. Event time = the writer's clock (``start_time_ms`` + production time, drifting
    by ``clock_drift_ppm``, + ``event_time_skew_ms``) minus a ``disorder`` delay. Routing
    keys: ``keys`` or ``key_count`` keys ``f"{instance}-{i}"``, used in turn.
    ``assert_every_ms``, ``assert_error_ms`` and ``when_idle`` are the producer-watermark
    assertions the lab's ``producer`` strategy uses: every ``assert_every_ms`` the writer
    notes the time ``clock - disorder bound + assert_error_ms`` (truthful when the error
    is 0 and the disorder is bounded); when idle (before ``start_ms``, after ``stop_ms``,
    in an idle phase) it keeps asserting (``heartbeat``), marks itself idle
    (``mark_idle``) or says nothing (``silent``).
    """

    name: str = _f(doc="its name (instances: name-0, name-1, ...)")
    count: int = _f(1, low=1, doc="instances")
    keys: tuple[str, ...] = _f((), doc="routing keys (default: key_count keys named after the instance)")
    key_count: int = _f(1, low=1, doc="routing keys when keys is empty")
    workload: WorkloadSpec = field(default_factory=WorkloadSpec, metadata={"doc": "the arrival process"})
    max_events: int | None = _f(None, low=0, doc="stop after this many events")
    start_ms: int = _f(0, low=0, doc="first production time")
    stop_ms: int | None = _f(None, low=0, doc="no event produced at or after this")
    tick_ms: int = _f(
        100,
        low=1,
        doc="the writer's time grid: a tick's events are handed over at its end, and reach the store on it",
    )
    event_time_skew_ms: int = _f(0, doc="the writer's clock minus the true time")
    clock_drift_ppm: float = _f(0.0, doc="the clock runs fast (> 0) by this many ppm of elapsed time")
    clock_drift_sd_ppm: float = _f(
        0.0, low=0, doc="each instance's drift is drawn from N(clock_drift_ppm, this)"
    )
    disorder: DelaySpec = field(
        default_factory=DelaySpec, metadata={"doc": "event time = clock - this delay (out-of-order events)"}
    )
    write_latency: DelaySpec = field(
        default_factory=DelaySpec, metadata={"doc": "from hand-over to the store's append"}
    )
    payload_bytes: int = _f(16, low=8, doc="payload size (trace: the size column wins)")
    api: str = _f("batch", choices=("batch", "event_writer"), doc="the simulator's write path")
    commit_interval_ms: int | None = _f(None, low=1, doc="write through transactions committed this often")
    assert_every_ms: int | None = _f(1_000, low=1, doc="lab: producer watermark assertions (null: never)")
    assert_error_ms: int = _f(0, doc="lab: added to every assertion (> 0: false promises)")
    when_idle: str = _f("heartbeat", choices=WHEN_IDLE, doc="lab: what an idle writer asserts")

    def __post_init__(self) -> None:
        _validate(self)
        if not self.name:
            raise ScenarioError("must not be empty", "name")
        if self.stop_ms is not None and self.stop_ms < self.start_ms:
            raise ScenarioError(f"{self.stop_ms} is before start_ms {self.start_ms}", "stop_ms")
        if len(set(self.keys)) != len(self.keys):
            raise ScenarioError(f"routing keys repeat: {list(self.keys)}", "keys")


@dataclass(frozen=True, slots=True)
class NoAckFault:
    """Fault injection: from ``start_ms`` to ``end_ms`` (``None``: forever) the reader stays online
    but never reads again, so it never acknowledges what it holds (the Pulsar demo's
    ``--fault-noack``): the group watermark stalls for every reader."""

    start_ms: int = _f(low=0, doc="the fault begins")
    end_ms: int | None = _f(None, low=0, doc="the fault ends (null: never)")

    def __post_init__(self) -> None:
        _validate(self)
        if self.end_ms is not None and self.end_ms <= self.start_ms:
            raise ScenarioError(f"{self.end_ms} is not after start_ms {self.start_ms}", "end_ms")


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """A reader (``count`` > 1: instances ``name-0`` ...): join, leave or crash times, rate, faults.

    Every ``poll_ms`` the reader reads batches until nothing is left, its ``rate_per_s``
    budget (``None``: unlimited) is used, or the ``processing`` time of what it read fills
    the poll period (it then polls again once it is done). A crashed reader stops reading
    and is declared offline ``offline_after_ms`` later (failure detection). With
    ``mtbf_ms`` it also crashes at random (exponential times between failures, from its
    join) and restarts — joins again under its name — ``restart_ms`` after it was
    declared offline.
    """

    name: str = _f(doc="its name (instances: name-0, name-1, ...)")
    count: int = _f(1, low=1, doc="instances")
    join_ms: int = _f(0, low=0, doc="joins the group")
    leave_ms: int | None = _f(None, low=0, doc="leaves cleanly (close)")
    crash_ms: int | None = _f(None, low=0, doc="crashes, for good")
    offline_after_ms: int = _f(1_000, low=0, doc="failure detection: a crash is declared this long after")
    rate_per_s: float | None = _f(None, low=0, doc="events/s it can read (null: unlimited)")
    poll_ms: int = _f(50, low=1, doc="poll period")
    processing: DelaySpec = field(
        default_factory=DelaySpec, metadata={"doc": "per-event processing time (simulator)"}
    )
    mtbf_ms: float | None = _f(None, low=1, doc="mean time between random crashes (simulator; null: none)")
    restart_ms: DelaySpec = field(
        default_factory=lambda: DelaySpec("fixed", 1_000.0),
        metadata={"doc": "after a random crash is declared, the time until it rejoins"},
    )
    noack: NoAckFault | None = field(
        default=None, metadata={"doc": "a stall: online but never acknowledging"}
    )

    def __post_init__(self) -> None:
        _validate(self)
        if not self.name:
            raise ScenarioError("must not be empty", "name")
        for what in ("leave_ms", "crash_ms"):
            t = getattr(self, what)
            if t is not None and t < self.join_ms:
                raise ScenarioError(f"{t} is before join_ms {self.join_ms}", what)
        if self.leave_ms is not None and self.crash_ms is not None:
            raise ScenarioError(
                "a reader either leaves or crashes; give one of leave_ms, crash_ms", "crash_ms"
            )


@dataclass(frozen=True, slots=True)
class FaultsSpec:
    """Store outages (a restart of a durable store): for ``store_downtime_ms`` from each outage the
    store takes no appends (writers hold their events) and serves no reads, and the
    advancer does not run; nothing is lost. Outages at ``store_restart_at_ms`` and, with
    ``store_mtbf_ms``, at random (exponential times between them)."""

    store_restart_at_ms: tuple[int, ...] = _f((), low=0, doc="outage start times")
    store_mtbf_ms: float | None = _f(None, low=1, doc="mean time between random outages (null: none)")
    store_downtime_ms: int = _f(1_000, low=1, doc="how long each outage lasts")

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def any(self) -> bool:
        return bool(self.store_restart_at_ms) or self.store_mtbf_ms is not None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """The reader group (``ReaderGroupConfig``); it always works in ``INGESTION_TIME``.

    ``reader_timeout_ms``: the readers' lease (0: readers leave only as the scenario
    says). ``processes``: each reader instance runs in a process of its own against the
    store served on loopback (``bench.sim.process_readers``); the simulation then runs
    in real time and is not deterministic.
    """

    position_report_interval_ms: int = _f(100, low=0, doc="how often readers report their positions")
    read_buffer_bytes: int = _f(1 << 20, low=64, doc="bytes a reader reads ahead per segment")
    max_event_time_lag_ms: int = _f(
        0,
        low=0,
        doc="maxEventTimeLag: event-time watermark = group watermark - this (lab: the ingestion strategy's)",
    )
    reader_timeout_ms: int = _f(0, low=0, doc="reader lease (0: none)")
    processes: bool = _f(False, doc="readers in processes of their own, in real time (not deterministic)")

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One operator of a multi-stage pipeline after the reordering step (``bench.sim.stages``).

    ``kind: window``: keyed tumbling windows of ``window_ms`` combining values with
    ``function``; ``kind: aggregate``: a keyed running ``function``. ``key``: ``key`` keeps
    the record's key (the writer at the first stage), ``all`` puts every record under
    one. ``delay_ms``: how long records and watermarks take to reach this stage.
    """

    name: str = _f(doc="its name (not 'reorder'; unique in the chain)")
    kind: str = _f(
        "window", choices=("window", "aggregate"), doc="keyed tumbling windows or a running aggregate"
    )
    window_ms: int | None = _f(None, low=1, doc="window: the window length (aggregate: none)")
    key: str = _f(
        "key", choices=("key", "all"), doc="key: keep the record's key; all: one key for every record"
    )
    function: str = _f("sum", choices=("sum", "max"), doc="how values are combined")
    delay_ms: int = _f(0, low=0, doc="how long records and watermarks take to reach this stage")

    def __post_init__(self) -> None:
        _validate(self)
        if self.kind == "window" and self.window_ms is None:
            raise ScenarioError("a window stage needs window_ms", "window_ms")
        if self.kind == "aggregate" and self.window_ms is not None:
            raise ScenarioError("an aggregate stage has no window_ms (it is not windowed)", "window_ms")


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """What follows the readers: ``flink_compat``'s event-time reordering, then tumbling windows.

    The event-time watermark is the group watermark minus ``group.max_event_time_lag_ms``.
    ``stages``: a chain of operators after the reordering step, with the watermark lag
    measured per stage (``bench.sim.stages``; written to ``stages.csv``).
    """

    ordering: bool = _f(False, doc="reorder by event time (EventTimeOrderingOperator)")
    window_ms: int | None = _f(
        None, low=1, doc="tumbling event-time windows after the ordering (lab: required)"
    )
    stages: tuple[StageSpec, ...] = _f(
        (), doc="operators after the reordering step, lag measured per stage (docs/pipelines.md)"
    )

    def __post_init__(self) -> None:
        _validate(self)
        if self.stages and not self.ordering:
            raise ScenarioError("stages follow the ordering step: set pipeline.ordering", "stages")
        names = [s.name for s in self.stages]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup or "reorder" in names:
            raise ScenarioError(f"stage names must be unique and not 'reorder', got {names}", "stages")


@dataclass(frozen=True, slots=True)
class MetricsSpec:
    """What is sampled (every ``sample_ms``) and written."""

    sample_ms: int = _f(1_000, low=1, doc="sampling period of the series")
    segments: bool = _f(True, doc="write per-segment rows (segments.csv)")
    event_log: bool = _f(False, doc="write every event's journey (events.csv)")
    parquet: bool = _f(False, doc="also write the series as Parquet")
    plots: bool = _f(True, doc="write the PNG plots")

    def __post_init__(self) -> None:
        _validate(self)


SPARK_INPUTS = ("stream", "segment")
BUILTIN_STRATEGIES = ("ingestion", "producer", "flink", "spark")


@dataclass(frozen=True, slots=True)
class CustomStrategySpec:
    """A researcher's watermark strategy run by the lab beside the built-in ones (docs/strategies.md).

    ``class_path`` is ``module:Class``; ``params`` (a mapping) are passed to the class's
    constructor as keyword arguments. The class is imported and built once when the
    scenario loads, so a bad module, a missing class, a class without
    ``on_event``/``watermark`` or rejected params fail then, naming the field.
    """

    name: str = _f(doc="its row in the lab's table (not a built-in strategy's name)")
    class_path: str = _f(doc="'module:Class' (the module importable from the working directory)")
    params: Any = field(
        default_factory=dict, hash=False, metadata={"doc": "keyword arguments of the class's constructor"}
    )

    def __post_init__(self) -> None:
        if not self.name:
            raise ScenarioError("must not be empty", "name")
        if not isinstance(self.params, dict) or not all(isinstance(k, str) for k in self.params):
            raise ScenarioError(f"must be a mapping of names to values, got {self.params!r}", "params")
        from .strategy_classes import instantiate

        instantiate(self)  # import, check the interface and the params now, not mid-run


@dataclass(frozen=True, slots=True)
class StrategiesSpec:
    """The lab's knobs (``ingestwm compare``): the watermark strategies it runs over this workload.

    ``ingestion`` uses ``group.max_event_time_lag_ms``; ``producer`` the writers'
    assertions; ``flink`` bounded out-of-orderness per segment with idleness and a
    periodic emit interval; ``spark`` ``max(event time) - delay`` per trigger over one
    input: the whole ``stream`` (Spark's maximum over all partitions of a source) or
    each ``segment`` (the minimum across inputs); ``custom`` strategies run beside them.
    The lab steps every ``tick_ms``: writers hand over, the advancer, readers read,
    strategies tick.
    """

    tick_ms: int = _f(100, low=1, doc="the lab's time step")
    flink_bound_ms: int = _f(1_000, low=0, doc="flink: forBoundedOutOfOrderness bound")
    flink_idle_timeout_ms: int = _f(5_000, low=1, doc="flink: withIdleness timeout")
    flink_interval_ms: int = _f(200, low=1, doc="flink: auto-watermark interval")
    spark_delay_ms: int = _f(1_000, low=0, doc="spark: withWatermark delay")
    spark_trigger_ms: int = _f(1_000, low=1, doc="spark: trigger interval")
    spark_input: str = _f("stream", choices=SPARK_INPUTS, doc="spark: what one input is")
    spark_policy: str = _f(
        "min",
        choices=("min", "max"),
        doc="spark: spark.sql.streaming.multipleWatermarkPolicy, the global watermark across inputs",
    )
    custom: tuple[CustomStrategySpec, ...] = _f(
        (), doc="custom strategies ('module:Class'), each with its own row (docs/strategies.md)"
    )

    def __post_init__(self) -> None:
        _validate(self)
        names = [c.name for c in self.custom]
        for i, n in enumerate(names):
            if n in BUILTIN_STRATEGIES or n in names[:i]:
                raise ScenarioError(
                    f"{n!r} is already a strategy's name ({', '.join(BUILTIN_STRATEGIES)} are built in)",
                    f"custom.{i}.name",
                )


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole experiment: store, stream, scaling, writers, readers, faults, group, pipeline, metrics,
    and the lab's strategies."""

    name: str = _f(doc="names the outputs")
    duration_ms: int = _f(low=1, doc="simulated time")
    description: str = _f("", doc="one line")
    seed: int = _f(0, low=0, doc="the root seed of every random part")
    replications: int = _f(1, low=1, doc="independent runs with seeds seed, seed+1, ... (mean and 95 % CI)")
    start_time_ms: int = _f(1_700_000_000_000, low=0, doc="the clock at time 0 (ms since the epoch)")
    store: StoreSpec = field(default_factory=StoreSpec, metadata={"doc": "the segment store"})
    stream: StreamSpec = field(default_factory=StreamSpec, metadata={"doc": "the stream"})
    scaling: ScalingSpec = field(default_factory=ScalingSpec, metadata={"doc": "stream scaling"})
    writers: tuple[WriterSpec, ...] = _f((), doc="the producers")
    readers: tuple[ReaderSpec, ...] = _f((), doc="the reader group's readers")
    faults: FaultsSpec = field(default_factory=FaultsSpec, metadata={"doc": "store outages"})
    group: GroupSpec = field(default_factory=GroupSpec, metadata={"doc": "the reader group"})
    pipeline: PipelineSpec = field(default_factory=PipelineSpec, metadata={"doc": "after the readers"})
    metrics: MetricsSpec = field(default_factory=MetricsSpec, metadata={"doc": "what is recorded"})
    strategies: StrategiesSpec | None = field(
        default=None, metadata={"doc": "the lab's strategies (ingestwm compare; null: the defaults)"}
    )

    def __post_init__(self) -> None:
        _validate(self)
        for what in ("writers", "readers"):
            names = [s.name for s in getattr(self, what)]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ScenarioError(f"names repeat: {dup}", what)
        if self.pipeline.ordering and not self.readers:
            raise ScenarioError("event-time ordering needs at least one reader", "pipeline.ordering")
        if self.pipeline.window_ms is not None and not self.pipeline.ordering:
            raise ScenarioError(
                "windows follow the ordering step: set pipeline.ordering", "pipeline.window_ms"
            )
        st = self.strategies
        if st is not None:
            if self.pipeline.window_ms is None:
                raise ScenarioError("the lab's strategies fill windows: set it", "pipeline.window_ms")
            for what, v in (
                ("metrics.sample_ms", self.metrics.sample_ms),
                ("pipeline.window_ms", self.pipeline.window_ms),
            ):
                if v % st.tick_ms:
                    raise ScenarioError(
                        f"must be a multiple of strategies.tick_ms {st.tick_ms}, got {v}", what
                    )

    @property
    def window_ms(self) -> int | None:
        """The lab's window length: ``pipeline.window_ms``."""
        return self.pipeline.window_ms

    @property
    def random_parts(self) -> list[str]:
        """The parts of this scenario drawn at random (empty: every seed gives the same run)."""
        out: list[str] = []
        for w in self.writers:
            if w.workload.random:
                out.append(f"writers.{w.name}.workload ({w.workload.kind})")
            for what in ("disorder", "write_latency"):
                d = getattr(w, what)
                if d.random:
                    out.append(f"writers.{w.name}.{what} ({d.kind})")
            if w.clock_drift_sd_ppm > 0:
                out.append(f"writers.{w.name}.clock_drift_sd_ppm")
        for r in self.readers:
            if r.processing.random:
                out.append(f"readers.{r.name}.processing ({r.processing.kind})")
            if r.mtbf_ms is not None:
                out.append(f"readers.{r.name}.mtbf_ms")
        if self.faults.store_mtbf_ms is not None:
            out.append("faults.store_mtbf_ms")
        return out


# ---------------------------------------------------------------------- loading


def scenario_from_dict(data: Mapping[str, Any]) -> Scenario:
    """Validate a parsed scenario mapping into a ``Scenario``."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"a scenario must be a mapping of fields, got {type(data).__name__}")
    result: Scenario = build_dataclass(Scenario, data, "", ScenarioError)
    return result


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario as plain data (lists for tuples), e.g. for a JSON summary."""

    def plain(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    out: dict[str, Any] = plain(dataclasses.asdict(scenario))
    return out


# ---------------------------------------------------------------------- files and overrides


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped in ``bench/scenarios``, sorted."""
    return list(shipped())


def scenario_path(name_or_path: str | Path) -> Path:
    """A shipped scenario's file by name, or the given path if it is a file."""
    path = find(name_or_path)
    if path is None:
        raise ScenarioError(
            f"unknown scenario {str(name_or_path)!r}: not a file and not one of {', '.join(shipped())}"
        )
    return path


def load_scenario_data(name_or_path: str | Path) -> dict[str, Any]:
    """The raw mapping of a shipped scenario (by name) or a YAML file, not yet validated.

    A writer's relative ``workload.trace`` path is made relative to the file's directory
    when the trace is there.
    """
    path = scenario_path(name_or_path)
    data = read_mapping(path, "scenario file", ScenarioError)
    for w in data.get("writers") or ():
        wl = w.get("workload") if isinstance(w, Mapping) else None
        if not isinstance(wl, dict):
            continue
        trace = wl.get("trace")
        if isinstance(trace, str) and trace and not Path(trace).is_absolute():
            near = path.parent / trace
            if near.is_file():
                wl["trace"] = str(near.resolve())
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=value"`` -> (``"a.b"``, the value parsed as YAML)."""
    return yaml_specs.parse_override(text, ScenarioError)


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of the raw scenario mapping with each ``key=value`` applied (paths checked by the schema)."""
    return yaml_specs.apply_overrides(Scenario, data, overrides, ScenarioError)


def load_scenario(
    name_or_path: str | Path, overrides: Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Load a shipped scenario (by name) or a YAML file, apply overrides and the seed, validate."""
    data = apply_overrides(load_scenario_data(name_or_path), overrides)
    if seed is not None:
        data["seed"] = seed
    return scenario_from_dict(data)

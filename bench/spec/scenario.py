"""Scenarios: the one scenario language of ``simulate``, ``compare`` and ``experiment``.

One frozen schema describes a workload — store, stream, scaling, writers, readers,
faults, reader group, pipeline, metrics — which the simulator runs; an optional
``strategies`` section holds the knobs of the watermark-strategy lab, which evaluates
its strategies over the same workload (``bench.lab``). Files are found, read and
converted by the shared loader (``bench.spec.loader``); this module holds the
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import loader as yaml_specs
from .errors import ScenarioError
from .fields import check_fields, spec_field
from .loader import build_dataclass, find, read_mapping, shipped
from .writers import (
    WHEN_IDLE,
    DelaySpec,
    ScheduledEvent,
    WorkloadSpec,
    WriterSpec,
)

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
    "FLINK_SOURCES",
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


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """The segment store's watermark settings (``StoreConfig``)."""

    max_watermark_lag_ms: int = spec_field(
        10_000, low=1, doc="an idle segment's watermark advances once its tail is older than this (PDP-26)"
    )
    polling_period_ms: int = spec_field(1_000, low=1, doc="how often the watermark advancer runs")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """The one stream every writer writes and the reader group reads."""

    name: str = spec_field("sim/stream", doc="'scope/name'")
    segments: int = spec_field(1, low=1, doc="segments at the start (equal key ranges)")

    def __post_init__(self) -> None:
        check_fields(self)
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

    every_ms: int | None = spec_field(None, low=1, doc="period of scale events (auto: of the rate checks)")
    at_ms: tuple[int, ...] = spec_field((), low=0, doc="times of scale events")
    start_ms: int = spec_field(0, low=0, doc="the first periodic scale event is at start_ms + every_ms")
    stop_ms: int | None = spec_field(None, low=0, doc="no scale event after this")
    mode: str = spec_field("shift", choices=SCALING_MODES, doc="what a scale event does (see above)")
    target_rate_per_s: float = spec_field(1_000.0, low=0, doc="auto: a segment's target event rate")
    min_segments: int = spec_field(1, low=1, doc="auto: never merge below this many active segments")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.mode == "auto" and self.every_ms is None:
            raise ScenarioError("auto scaling measures rates every every_ms: set it", "every_ms")


@dataclass(frozen=True, slots=True)
class NoAckFault:
    """Fault injection: from ``start_ms`` to ``end_ms`` (``None``: forever) the reader stays online
    but never reads again, so it never acknowledges what it holds (the Pulsar demo's
    ``--fault-noack``): the group watermark stalls for every reader."""

    start_ms: int = spec_field(low=0, doc="the fault begins")
    end_ms: int | None = spec_field(None, low=0, doc="the fault ends (null: never)")

    def __post_init__(self) -> None:
        check_fields(self)
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
    declared offline. The simulator's readers (in-process or processes) and the lab's
    follow these times alike (``bench.sim.failure_schedule``), leaves and ``noack`` stalls
    included; each of the lab's strategies has a reader group of its own whose readers
    are these, read as the simulator reads them (the same polls, budgets and
    ``processing`` draws).
    """

    name: str = spec_field(doc="its name (instances: name-0, name-1, ...)")
    count: int = spec_field(1, low=1, doc="instances")
    join_ms: int = spec_field(0, low=0, doc="joins the group")
    leave_ms: int | None = spec_field(None, low=0, doc="leaves cleanly (close)")
    crash_ms: int | None = spec_field(None, low=0, doc="crashes, for good")
    offline_after_ms: int = spec_field(
        1_000, low=0, doc="failure detection: a crash is declared this long after"
    )
    rate_per_s: float | None = spec_field(None, low=0, doc="events/s it can read (null: unlimited)")
    poll_ms: int = spec_field(50, low=1, doc="poll period")
    processing: DelaySpec = field(
        default_factory=DelaySpec, metadata={"doc": "per-event processing time (simulator)"}
    )
    mtbf_ms: float | None = spec_field(None, low=1, doc="mean time between random crashes (null: none)")
    restart_ms: DelaySpec = field(
        default_factory=lambda: DelaySpec("fixed", 1_000.0),
        metadata={"doc": "after a random crash is declared, the time until it rejoins"},
    )
    noack: NoAckFault | None = field(
        default=None, metadata={"doc": "a stall: online but never acknowledging"}
    )

    def __post_init__(self) -> None:
        check_fields(self)
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

    store_restart_at_ms: tuple[int, ...] = spec_field((), low=0, doc="outage start times")
    store_mtbf_ms: float | None = spec_field(None, low=1, doc="mean time between random outages (null: none)")
    store_downtime_ms: int = spec_field(1_000, low=1, doc="how long each outage lasts")

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def any(self) -> bool:
        return bool(self.store_restart_at_ms) or self.store_mtbf_ms is not None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """The reader group (``ReaderGroupConfig``); it always works in ``INGESTION_TIME``.

    ``reader_timeout_ms``: the readers' lease (0: readers leave only as the scenario
    says). ``processes``: each reader instance runs in a process of its own against the
    store served on loopback (``bench.sim.reader_process_actors``); the simulation then runs
    in real time and is not deterministic.
    """

    position_report_interval_ms: int = spec_field(100, low=0, doc="how often readers report their positions")
    read_buffer_bytes: int = spec_field(1 << 20, low=64, doc="bytes a reader reads ahead per segment")
    max_event_time_lag_ms: int = spec_field(
        0,
        low=0,
        doc="maxEventTimeLag: event-time watermark = group watermark - this (lab: the ingestion strategy's)",
    )
    reader_timeout_ms: int = spec_field(0, low=0, doc="reader lease (0: none)")
    processes: bool = spec_field(
        False, doc="readers in processes of their own, in real time (not deterministic)"
    )

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One operator of a multi-stage pipeline after the reordering step (``bench.sim.stages``).

    ``kind: window``: keyed tumbling windows of ``window_ms`` combining values with
    ``function``; ``kind: aggregate``: a keyed running ``function``. ``key``: ``key`` keeps
    the record's key (the writer at the first stage), ``all`` puts every record under
    one. ``delay_ms``: how long records and watermarks take to reach this stage.
    """

    name: str = spec_field(doc="its name (not 'reorder'; unique in the chain)")
    kind: str = spec_field(
        "window", choices=("window", "aggregate"), doc="keyed tumbling windows or a running aggregate"
    )
    window_ms: int | None = spec_field(None, low=1, doc="window: the window length (aggregate: none)")
    key: str = spec_field(
        "key", choices=("key", "all"), doc="key: keep the record's key; all: one key for every record"
    )
    function: str = spec_field("sum", choices=("sum", "max"), doc="how values are combined")
    delay_ms: int = spec_field(0, low=0, doc="how long records and watermarks take to reach this stage")

    def __post_init__(self) -> None:
        check_fields(self)
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

    ordering: bool = spec_field(False, doc="reorder by event time (EventTimeOrderingOperator)")
    window_ms: int | None = spec_field(
        None, low=1, doc="tumbling event-time windows after the ordering (lab: required)"
    )
    stages: tuple[StageSpec, ...] = spec_field(
        (), doc="operators after the reordering step, lag measured per stage (docs/pipelines.md)"
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.stages and not self.ordering:
            raise ScenarioError("stages follow the ordering step: set pipeline.ordering", "stages")
        names = [s.name for s in self.stages]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup or "reorder" in names:
            raise ScenarioError(f"stage names must be unique and not 'reorder', got {names}", "stages")


@dataclass(frozen=True, slots=True)
class MetricsSpec:
    """What is sampled (every ``sample_ms``) and written."""

    sample_ms: int = spec_field(1_000, low=1, doc="sampling period of the series")
    segments: bool = spec_field(True, doc="write per-segment rows (segments.csv)")
    event_log: bool = spec_field(False, doc="write every event's journey (events.csv)")
    parquet: bool = spec_field(False, doc="also write the series as Parquet")
    plots: bool = spec_field(True, doc="write the PNG plots")

    def __post_init__(self) -> None:
        check_fields(self)


SPARK_INPUTS = ("stream", "segment")
FLINK_SOURCES = ("reader", "segment_union")
BUILTIN_STRATEGIES = ("ingestion", "producer", "flink", "spark")


@dataclass(frozen=True, slots=True)
class CustomStrategySpec:
    """A researcher's watermark strategy run by the lab beside the built-in ones (docs/strategies.md).

    ``class_path`` is ``module:Class``; ``params`` (a mapping) are passed to the class's
    constructor as keyword arguments. The class is imported and built once when the
    scenario loads, so a bad module, a missing class, a class without
    ``on_event``/``watermark`` or rejected params fail then, naming the field.
    """

    name: str = spec_field(doc="its row in the lab's table (not a built-in strategy's name)")
    class_path: str = spec_field(
        doc="'module:Class' (the module importable on the driver: on its PYTHONPATH, shipped to Spark's "
        "executors, or installed)"
    )
    params: Any = field(
        default_factory=dict, hash=False, metadata={"doc": "keyword arguments of the class's constructor"}
    )
    bound_param: str | None = spec_field(
        None,
        doc="the one of its params that is its bound in ms (an int >= 0): what 'ingestwm tune' searches; "
        "none: tune reports the strategy as it is",
    )

    def __post_init__(self) -> None:
        if not self.name:
            raise ScenarioError("must not be empty", "name")
        if not isinstance(self.params, dict) or not all(isinstance(k, str) for k in self.params):
            raise ScenarioError(f"must be a mapping of names to values, got {self.params!r}", "params")
        b = self.bound_param
        if b is not None:
            if not isinstance(b, str) or b not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise ScenarioError(f"must name one of its params ({known}), got {b!r}", "bound_param")
            v = self.params[b]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ScenarioError(
                    f"params.{b} is its bound: it must be an int >= 0 (ms), got {v!r}", "bound_param"
                )
        from .strategy_classes import instantiate

        instantiate(self)  # import, check the interface and the params now, not mid-run


@dataclass(frozen=True, slots=True)
class StrategiesSpec:
    """The lab's knobs (``ingestwm compare``): the watermark strategies it runs over this workload.

    ``ingestion`` uses ``group.max_event_time_lag_ms``; ``producer`` the writers'
    assertions; ``flink`` bounded out-of-orderness with idleness and a periodic emit
    interval, per reader subtask (``flink_source: reader``, Pravega's connectors) or per
    segment, one bounded source each, unioned (``segment_union``); ``spark``
    ``max(event time) - delay`` per trigger over one input: the whole ``stream`` (Spark's
    maximum over all partitions of a source) or each ``segment`` (the minimum across
    inputs); ``custom`` strategies run beside them. ``only`` picks some of them (by name;
    empty: all): a strategy's row is the same whichever others run beside it.
    The workload, readers and store are the simulator's (``ingestwm simulate``); every
    ``tick_ms``, after that instant's reads, each strategy's periodic hook runs (Flink's
    emits, Spark's triggers, a custom ``on_tick``) and every ``metrics.sample_ms`` a sample
    is taken.
    """

    tick_ms: int = spec_field(
        100, low=1, doc="the strategies' step: their periodic hooks (flink, spark, custom) and samples"
    )
    flink_bound_ms: int = spec_field(1_000, low=0, doc="flink: forBoundedOutOfOrderness bound")
    flink_idle_timeout_ms: int = spec_field(5_000, low=1, doc="flink: withIdleness timeout")
    flink_interval_ms: int = spec_field(200, low=1, doc="flink: auto-watermark interval")
    flink_source: str = spec_field(
        "reader",
        choices=FLINK_SOURCES,
        doc="flink: the job's topology: one subtask per reader of the group, each a watermark generator "
        "over what its reader delivers, combined by Flink's valve (Pravega's connectors), or one bounded "
        "source per segment, unioned (docs/engines.md)",
    )
    spark_delay_ms: int = spec_field(1_000, low=0, doc="spark: withWatermark delay")
    spark_trigger_ms: int = spec_field(1_000, low=1, doc="spark: trigger interval")
    spark_input: str = spec_field("stream", choices=SPARK_INPUTS, doc="spark: what one input is")
    spark_policy: str = spec_field(
        "min",
        choices=("min", "max"),
        doc="spark: spark.sql.streaming.multipleWatermarkPolicy, the global watermark across inputs",
    )
    custom: tuple[CustomStrategySpec, ...] = spec_field(
        (), doc="custom strategies ('module:Class'), each with its own row (docs/strategies.md)"
    )
    only: tuple[str, ...] = spec_field(
        (),
        doc="run just these strategies (built-in or custom names; empty: all); the rows keep the table's "
        "order and each is what that strategy measures alone",
    )

    def __post_init__(self) -> None:
        check_fields(self)
        names = [c.name for c in self.custom]
        for i, n in enumerate(names):
            if n in BUILTIN_STRATEGIES or n in names[:i]:
                raise ScenarioError(
                    f"{n!r} is already a strategy's name ({', '.join(BUILTIN_STRATEGIES)} are built in)",
                    f"custom.{i}.name",
                )
        known = [*BUILTIN_STRATEGIES, *names]
        for i, n in enumerate(self.only):
            if n not in known:
                raise ScenarioError(f"no strategy {n!r}; strategies: {', '.join(known)}", f"only.{i}")
            if n in self.only[:i]:
                raise ScenarioError(f"{n!r} is named twice", f"only.{i}")

    @property
    def names(self) -> tuple[str, ...]:
        """The strategies that run, in table order: the built-in ones, then the custom ones (``only``)."""
        every = (*BUILTIN_STRATEGIES, *(c.name for c in self.custom))
        return tuple(n for n in every if not self.only or n in self.only)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole experiment: store, stream, scaling, writers, readers, faults, group, pipeline, metrics,
    and the lab's strategies."""

    name: str = spec_field(doc="names the outputs")
    duration_ms: int = spec_field(low=1, doc="simulated time")
    description: str = spec_field("", doc="one line")
    seed: int = spec_field(0, low=0, doc="the root seed of every random part")
    replications: int = spec_field(
        1, low=1, doc="independent runs with seeds seed, seed+1, ... (mean and 95 % CI)"
    )
    start_time_ms: int = spec_field(1_700_000_000_000, low=0, doc="the clock at time 0 (ms since the epoch)")
    store: StoreSpec = field(default_factory=StoreSpec, metadata={"doc": "the segment store"})
    stream: StreamSpec = field(default_factory=StreamSpec, metadata={"doc": "the stream"})
    scaling: ScalingSpec = field(default_factory=ScalingSpec, metadata={"doc": "stream scaling"})
    writers: tuple[WriterSpec, ...] = spec_field((), doc="the producers")
    readers: tuple[ReaderSpec, ...] = spec_field((), doc="the reader group's readers")
    faults: FaultsSpec = field(default_factory=FaultsSpec, metadata={"doc": "store outages"})
    group: GroupSpec = field(default_factory=GroupSpec, metadata={"doc": "the reader group"})
    pipeline: PipelineSpec = field(default_factory=PipelineSpec, metadata={"doc": "after the readers"})
    metrics: MetricsSpec = field(default_factory=MetricsSpec, metadata={"doc": "what is recorded"})
    strategies: StrategiesSpec | None = field(
        default=None, metadata={"doc": "the lab's strategies (ingestwm compare; null: the defaults)"}
    )

    def __post_init__(self) -> None:
        check_fields(self)
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

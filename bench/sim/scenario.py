"""Scenarios: a frozen schema, YAML loading with errors that name the field, and ``--set`` overrides.

Files are found, read and converted by the shared loader (``bench.scenarios.yaml_specs``);
this module holds the schema and raises ``ScenarioError``.

A scenario file is a YAML mapping whose keys are the fields of ``Scenario`` (nested
mappings for ``store``, ``stream``, ``scaling``, ``group``, ``pipeline``, ``metrics``;
lists of mappings for ``writers`` and ``readers``). Times are ``int`` milliseconds
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

from ..scenarios import yaml_specs
from ..scenarios.yaml_specs import build_dataclass, find, read_mapping, shipped
from .errors import ScenarioError

__all__ = [
    "StoreSpec",
    "StreamSpec",
    "ScalingSpec",
    "ScheduledEvent",
    "WorkloadSpec",
    "WriterSpec",
    "NoAckFault",
    "ReaderSpec",
    "GroupSpec",
    "StageSpec",
    "PipelineSpec",
    "MetricsSpec",
    "Scenario",
    "shipped_scenarios",
    "scenario_path",
    "load_scenario_data",
    "load_scenario",
    "scenario_from_dict",
    "scenario_to_dict",
    "apply_overrides",
    "parse_override",
]


def _f(default: Any = dataclasses.MISSING, *, low: float | None = None, choices: tuple[str, ...] = ()) -> Any:
    """A field with a lower bound or a set of choices, checked by ``_validate``."""
    meta = {"low": low, "choices": choices}
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

    max_watermark_lag_ms: int = _f(10_000, low=1)
    polling_period_ms: int = _f(1_000, low=1)

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """The one stream every writer writes and the reader group reads."""

    name: str = "sim/stream"
    segments: int = _f(1, low=1)

    def __post_init__(self) -> None:
        _validate(self)
        if self.name.count("/") != 1 or not all(self.name.split("/")):
            raise ScenarioError(f"must be 'scope/name', got {self.name!r}", "name")


@dataclass(frozen=True, slots=True)
class ScalingSpec:
    """Stream scaling events: every ``every_ms`` (from ``start_ms``) and/or at the times ``at_ms``.

    Modes: ``split`` splits the widest active segment in two, ``merge`` merges the two
    adjacent segments with the narrowest union, ``split_merge`` alternates (split all /
    merge back pairwise), ``shift`` seals every segment and creates as many successors
    with the boundaries shifted (predecessors with several successors and vice versa).
    """

    every_ms: int | None = _f(None, low=1)
    at_ms: tuple[int, ...] = _f((), low=0)
    start_ms: int = _f(0, low=0)
    stop_ms: int | None = _f(None, low=0)
    mode: str = _f("shift", choices=("split", "merge", "split_merge", "shift"))

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True, slots=True)
class ScheduledEvent:
    """One event of a ``schedule`` workload: written at ``at_ms`` with routing key ``key``."""

    at_ms: int = _f(low=0)
    key: str = _f()
    event_time_offset_ms: int = 0
    """Added to the writer's event time (its clock at ``at_ms`` plus its skew)."""

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """How many events a writer produces over time.

    ``constant``: ``rate_per_s``; ``bursty``: ``rate_per_s``, and ``burst_rate_per_s``
    for ``burst_ms`` every ``burst_every_ms``; ``periodic_idle``: ``rate_per_s`` for
    ``active_ms``, then nothing for ``idle_ms``, repeated; ``schedule``: exactly ``events``.
    """

    kind: str = _f("constant", choices=("constant", "bursty", "periodic_idle", "schedule"))
    rate_per_s: float = _f(100.0, low=0)
    burst_rate_per_s: float = _f(1_000.0, low=0)
    burst_ms: int = _f(1_000, low=1)
    burst_every_ms: int = _f(10_000, low=1)
    active_ms: int = _f(10_000, low=1)
    idle_ms: int = _f(10_000, low=0)
    events: tuple[ScheduledEvent, ...] = ()

    def __post_init__(self) -> None:
        _validate(self)
        if self.kind == "schedule" and not self.events:
            raise ScenarioError("a 'schedule' workload needs at least one event", "events")
        if self.kind == "bursty" and self.burst_ms > self.burst_every_ms:
            raise ScenarioError(
                f"burst_ms {self.burst_ms} is longer than burst_every_ms {self.burst_every_ms}", "burst_ms"
            )


@dataclass(frozen=True, slots=True)
class WriterSpec:
    """A writer (``count`` > 1: that many instances ``name-0`` ...) and its workload.

    Events are generated during each ``tick_ms`` and appended at the tick's end, one
    append per segment (``api: batch``, frames built in numpy) or through an
    ``EventWriter`` (``api: event_writer``). With ``commit_interval_ms`` the writer
    writes through transactions committed at that interval. Event time is the writer's
    clock (generation time + ``event_time_skew_ms``) minus a uniform jitter in
    ``[0, jitter_ms]`` (out of order). Routing keys: ``keys`` or ``key_count`` keys
    ``f"{instance}-{i}"``.
    """

    name: str = _f()
    count: int = _f(1, low=1)
    keys: tuple[str, ...] = ()
    key_count: int = _f(1, low=1)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    max_events: int | None = _f(None, low=0)
    start_ms: int = _f(0, low=0)
    stop_ms: int | None = _f(None, low=0)
    tick_ms: int = _f(100, low=1)
    event_time_skew_ms: int = 0
    jitter_ms: int = _f(0, low=0)
    payload_bytes: int = _f(16, low=8)
    api: str = _f("batch", choices=("batch", "event_writer"))
    commit_interval_ms: int | None = _f(None, low=1)

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

    start_ms: int = _f(low=0)
    end_ms: int | None = _f(None, low=0)

    def __post_init__(self) -> None:
        _validate(self)
        if self.end_ms is not None and self.end_ms <= self.start_ms:
            raise ScenarioError(f"{self.end_ms} is not after start_ms {self.start_ms}", "end_ms")


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """A reader (``count`` > 1: instances ``name-0`` ...): join, leave or crash times, rate, faults.

    Every ``poll_ms`` the reader reads batches until nothing is left or its
    ``rate_per_s`` budget (``None``: unlimited) is used. A crashed reader stops reading
    and is declared offline ``offline_after_ms`` later (failure detection).
    """

    name: str = _f()
    count: int = _f(1, low=1)
    join_ms: int = _f(0, low=0)
    leave_ms: int | None = _f(None, low=0)
    crash_ms: int | None = _f(None, low=0)
    offline_after_ms: int = _f(1_000, low=0)
    rate_per_s: float | None = _f(None, low=0)
    poll_ms: int = _f(50, low=1)
    noack: NoAckFault | None = None

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
class GroupSpec:
    """The reader group (``ReaderGroupConfig``); it always works in ``INGESTION_TIME``.

    ``reader_timeout_ms``: the readers' lease (0: readers leave only as the scenario
    says). ``processes``: each reader instance runs in a process of its own against the
    store served on loopback (``bench.sim.process_readers``); the simulation then runs
    in real time and is not deterministic.
    """

    position_report_interval_ms: int = _f(100, low=0)
    read_buffer_bytes: int = _f(1 << 20, low=64)
    max_event_time_lag_ms: int = _f(0, low=0)
    reader_timeout_ms: int = _f(0, low=0)
    processes: bool = False

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

    name: str = _f()
    kind: str = _f("window", choices=("window", "aggregate"))
    window_ms: int | None = _f(None, low=1)
    key: str = _f("key", choices=("key", "all"))
    function: str = _f("sum", choices=("sum", "max"))
    delay_ms: int = _f(0, low=0)

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

    ordering: bool = False
    window_ms: int | None = _f(None, low=1)
    stages: tuple[StageSpec, ...] = ()

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

    sample_ms: int = _f(1_000, low=1)
    segments: bool = True
    event_log: bool = False
    parquet: bool = False
    plots: bool = True

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole simulation: store, stream, scaling, writers, readers, reader group, pipeline, metrics."""

    name: str = _f()
    duration_ms: int = _f(low=1)
    description: str = ""
    seed: int = 0
    start_time_ms: int = _f(1_700_000_000_000, low=0)
    store: StoreSpec = field(default_factory=StoreSpec)
    stream: StreamSpec = field(default_factory=StreamSpec)
    scaling: ScalingSpec = field(default_factory=ScalingSpec)
    writers: tuple[WriterSpec, ...] = ()
    readers: tuple[ReaderSpec, ...] = ()
    group: GroupSpec = field(default_factory=GroupSpec)
    pipeline: PipelineSpec = field(default_factory=PipelineSpec)
    metrics: MetricsSpec = field(default_factory=MetricsSpec)

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
    """The raw mapping of a shipped scenario (by name) or a YAML file, not yet validated."""
    return read_mapping(scenario_path(name_or_path), "scenario file", ScenarioError)


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

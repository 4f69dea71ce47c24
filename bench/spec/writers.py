"""The producers of a scenario: writers, their workloads (arrival processes) and delays.

``WriterSpec`` is one entry of a scenario's ``writers``; its ``workload`` says when events
arrive (constant, Poisson, bursts, MMPP, periodic idle, an inline schedule, a trace file)
and its ``disorder`` and ``write_latency`` (``DelaySpec``) how far event time and
ingestion lag behind. Part of the one schema of ``bench.spec.scenario``, which re-exports
these names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import ScenarioError
from .fields import check_fields, spec_field

__all__ = [
    "ScheduledEvent",
    "WORKLOAD_KINDS",
    "WorkloadSpec",
    "DELAY_KINDS",
    "DelaySpec",
    "WHEN_IDLE",
    "WriterSpec",
]


@dataclass(frozen=True, slots=True)
class ScheduledEvent:
    """One event of a ``schedule`` workload: written at ``at_ms`` with routing key ``key``."""

    at_ms: int = spec_field(low=0, doc="when it is written")
    key: str = spec_field(doc="its routing key")
    event_time_offset_ms: int = spec_field(0, doc="added to its event time (the writer's clock at at_ms)")

    def __post_init__(self) -> None:
        check_fields(self)


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

    kind: str = spec_field("constant", choices=WORKLOAD_KINDS, doc="the arrival process (see above)")
    rate_per_s: float = spec_field(100.0, low=0, doc="events/s (bursty, mmpp: between bursts)")
    burst_rate_per_s: float = spec_field(1_000.0, low=0, doc="bursty, mmpp: events/s in a burst")
    burst_ms: int = spec_field(1_000, low=1, doc="bursty: burst length; mmpp: mean burst length")
    burst_every_ms: int = spec_field(
        10_000, low=1, doc="bursty: burst period; mmpp: mean burst + calm length"
    )
    active_ms: int = spec_field(10_000, low=1, doc="periodic_idle: active phase")
    idle_ms: int = spec_field(10_000, low=0, doc="periodic_idle: idle phase")
    events: tuple[ScheduledEvent, ...] = spec_field((), doc="schedule: the events")
    trace: str = spec_field("", doc="trace: a .csv or .parquet file (relative paths: to the scenario file)")

    def __post_init__(self) -> None:
        check_fields(self)
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

    kind: str = spec_field("none", choices=DELAY_KINDS, doc="the distribution")
    ms: float = spec_field(
        0.0, low=0, doc="fixed: the delay; uniform: the maximum; exponential: the mean; lognormal: the median"
    )
    sigma: float = spec_field(1.0, low=0, doc="lognormal: the standard deviation of the log")

    def __post_init__(self) -> None:
        check_fields(self)

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
        return np.floor(x, out=x).astype(np.int64)


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
    assertions (PIP-102 markers) the lab's ``producer`` strategy uses: every
    ``assert_every_ms`` (from ``start_ms``; before it, from the run's start) the writer
    notes the time ``clock - disorder bound + assert_error_ms`` (truthful when the error
    is 0 and the disorder is bounded); when idle (before ``start_ms``, at or after
    ``stop_ms``, in an idle phase) it keeps asserting (``heartbeat``), marks itself idle
    once (``mark_idle``) or says nothing (``silent``). A transactional writer asserts into
    its open transaction (the marker takes effect with the commit), or else in a
    transaction of its own. The markers are not part of the workload: they are written
    only into the lab's copy of the stream that the strategies in the event-time domain
    read (``producer``, custom ones with ``time_domain = "event"``); ``simulate`` and the
    other strategies never see them (docs/strategies.md).
    """

    name: str = spec_field(doc="its name (instances: name-0, name-1, ...)")
    count: int = spec_field(1, low=1, doc="instances")
    keys: tuple[str, ...] = spec_field(
        (), doc="routing keys (default: key_count keys named after the instance)"
    )
    key_count: int = spec_field(1, low=1, doc="routing keys when keys is empty")
    workload: WorkloadSpec = field(default_factory=WorkloadSpec, metadata={"doc": "the arrival process"})
    max_events: int | None = spec_field(None, low=0, doc="stop after this many events")
    start_ms: int = spec_field(0, low=0, doc="first production time")
    stop_ms: int | None = spec_field(None, low=0, doc="no event produced at or after this")
    tick_ms: int = spec_field(
        100,
        low=1,
        doc="the writer's time grid: a tick's events are handed over at its end, and reach the store on it",
    )
    event_time_skew_ms: int = spec_field(0, doc="the writer's clock minus the true time")
    clock_drift_ppm: float = spec_field(0.0, doc="the clock runs fast (> 0) by this many ppm of elapsed time")
    clock_drift_sd_ppm: float = spec_field(
        0.0, low=0, doc="each instance's drift is drawn from N(clock_drift_ppm, this)"
    )
    disorder: DelaySpec = field(
        default_factory=DelaySpec, metadata={"doc": "event time = clock - this delay (out-of-order events)"}
    )
    write_latency: DelaySpec = field(
        default_factory=DelaySpec, metadata={"doc": "from hand-over to the store's append"}
    )
    payload_bytes: int = spec_field(16, low=8, doc="payload size (trace: the size column wins)")
    api: str = spec_field("batch", choices=("batch", "event_writer"), doc="the simulator's write path")
    commit_interval_ms: int | None = spec_field(
        None, low=1, doc="write through transactions committed this often"
    )
    assert_every_ms: int | None = spec_field(
        1_000,
        low=1,
        doc="lab: producer watermark assertions, seen by event-time strategies only (null: never)",
    )
    assert_error_ms: int = spec_field(0, doc="lab: added to every assertion (> 0: false promises)")
    when_idle: str = spec_field("heartbeat", choices=WHEN_IDLE, doc="lab: what an idle writer asserts")

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.name:
            raise ScenarioError("must not be empty", "name")
        if self.stop_ms is not None and self.stop_ms < self.start_ms:
            raise ScenarioError(f"{self.stop_ms} is before start_ms {self.start_ms}", "stop_ms")
        if len(set(self.keys)) != len(self.keys):
            raise ScenarioError(f"routing keys repeat: {list(self.keys)}", "keys")

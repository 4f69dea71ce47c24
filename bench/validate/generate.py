"""Seeded small lab scenarios that reach the edges where an engine model can be wrong (``--generated``).

The shipped scenarios were written with the models: none of their events meets a watermark
equal to its own event time, no watermark lands on a window's last millisecond, writers hand
over on whole seconds. A model bug that only shows at such an edge (``<`` for ``<=``, a window
firing at its end instead of ``end - 1``, an emit interval or an idleness timeout off by one
emit) passes them all. ``generated_scenario(seed, index)`` draws a small scenario (4-10 s) and
then steers it onto the edges, deterministically from ``(seed, index)`` (``bench.spec.seeds``:
scenario ``index`` does not depend on how many others are drawn):

- *the draw* (``draw``): a lab step of 50-200 ms; one to three writers (one event per
  hand-over on a lattice of event times, off every grid, bursty, Poisson, periodically idle;
  early or late, out of order, starting late or stopping early, some through transactions),
  handing over on grids of 50 ms to 1 s that are not the lab's; one to three segments,
  scaling or not; readers that join late, crash for good, leave, or crash at random and
  restart, some slower than their share; in a third of the scenarios each writer on a segment
  of its own and one of them behind and idle now and then; the Flink topology, its bound, an
  emit interval shorter or longer than the step or off its grid, an idleness timeout a whole
  number of emits or not; Spark's delay, a trigger shorter or longer than the step, one input
  or one per segment under either policy;
- *ties* (``_probe``): probe events added one lab run at a time, in time order, each with the
  event time of the watermark it will meet — the Flink model's combined watermark, the one
  Spark judges it against (the previous batch's), or the one its own batch runs with. The lab
  is causal (nothing before an instant depends on what is written at it) and what an event
  meets does not depend on its own time, so the run with a probe says what it met; if another
  emit or trigger came before its reader's poll, its time is set to that and the run repeated;
- *window edges* (``_shift``): the whole run moves with its start time (every event time,
  ingestion time and watermark by the same amount) while windows stay on multiples of their
  length; the start is moved so that as many of the Flink model's moves and Spark's batch
  watermarks as possible land on a window's last millisecond (``end - 1``), the window still
  holding events that are not late: the one value at which the two readings of "a window
  fires at its end" part.

``edges.count_edges`` says what a run reached. Everything here runs the lab model only (no
engine); the scenarios are ordinary lab scenarios (``ingestwm compare`` runs them too), made
for ``validate``: their ``strategies.only`` is ``flink`` and ``spark``.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from readergroup.format.routing import key_hash

from ..lab import lab_scenario_from_dict, run_compare
from ..lab.compare import LabResult
from ..lab.compared_strategies import FlinkStrategy
from ..lab.spark_model import SparkStrategy
from ..spec.scenario import Scenario
from ..spec.seeds import Seeds
from .errors import ValidateError

__all__ = ["GENERATED_START_MS", "GeneratedScenario", "generate", "generated_scenario", "draw"]

GENERATED_START_MS = 1_700_000_000_000
"""The start time before ``_shift`` moves it (a multiple of every window length drawn)."""

_NONE = -(2**62)  # at or below: no watermark yet
_INF = 2**63 - 1
_PROBE_WRITER = "probe"


@dataclass(frozen=True, slots=True)
class GeneratedScenario:
    """One generated scenario: the scenario, its mapping (YAML-ready), and where it came from."""

    scenario: Scenario
    data: dict[str, Any]
    seed: int
    index: int
    probes: int  # events added to meet a watermark equal to their event time
    shift_ms: int  # how far the start time was moved to land watermarks on window ends


def generate(n: int, seed: int) -> list[GeneratedScenario]:
    """Scenarios ``0 .. n-1`` of ``seed`` (each ``generated_scenario(seed, i)``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidateError(f"--generated: the number of scenarios must be an int >= 1, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValidateError(f"--seed: must be an int >= 0, got {seed!r}")
    return [generated_scenario(seed, i) for i in range(n)]


def generated_scenario(seed: int, index: int) -> GeneratedScenario:
    """Scenario ``index`` of ``seed``: drawn, probed for ties, shifted onto window edges (lab runs only)."""
    rng = Seeds(seed).rng(f"validate.generated.{index}")
    data = draw(rng, f"gen-{seed}-{index}")
    data, probes = _probe(data, rng)
    data, shift = _shift(data, rng)
    return GeneratedScenario(lab_scenario_from_dict(data), data, seed, index, probes, shift)


# ------------------------------------------------------------------ the draw


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _chance(rng: np.random.Generator, p: float) -> bool:
    return bool(rng.random() < p)


def draw(rng: np.random.Generator, name: str) -> dict[str, Any]:
    """A small lab scenario's mapping, every knob drawn from ``rng`` (before probes and the shift)."""
    tick = int(_pick(rng, (50, 100, 100, 200, 200)))
    window = int(_pick(rng, [w for w in (500, 1000, 1000, 2000) if w % tick == 0]))
    duration = tick * int(rng.integers(5000 // tick, 10000 // tick + 1))
    # Spark: a trigger shorter than the tick, or longer; at most ~40 batches (each a Spark micro-batch
    # in the replay, the check's slowest part)
    if tick == 200 and _chance(rng, 0.4):  # shorter than the tick: a shorter run
        trigger = int(_pick(rng, (100, 150)))
        duration = min(duration, 40 * trigger)
    else:
        shapes = (tick, 2 * tick, 5 * tick // 2, 7 * tick // 2, 700)
        trigger = int(_pick(rng, [t for t in shapes if t * 40 >= duration] or [1000]))
    # one in three: writers placed on segments of their own, one of them behind the others and idle
    # now and then (a channel that goes idle and comes back below the combined watermark: Flink's
    # alignment; Spark's inputs that differ: its policy)
    placed = _chance(rng, 0.35)
    segments = int(_pick(rng, (2, 2, 3) if placed else (1, 2, 2, 3)))
    scaling: dict[str, Any] = {}
    if _chance(rng, 0.3 if placed else 0.4):
        modes = ("split", "shift", "split_merge") + (("merge",) if segments > 1 else ())
        every = tick * int(rng.integers(2500 // tick, 5000 // tick + 1))
        scaling = {"every_ms": every, "mode": _pick(rng, modes)}
    interval = int(_pick(rng, _interval_choices(tick)))
    whole = int(rng.integers(1, 9)) * interval
    idle = whole if _chance(rng, 0.5) or interval == 1 else whole + int(rng.integers(1, interval))
    count = int(_pick(rng, (2, 3) if placed else (1, 2, 2, 3)))
    writers = [_writer(rng, f"w{i}", duration) for i in range(count)]
    if placed:
        for i, w in enumerate(writers):
            w["keys"] = _keys_on(i % segments, segments, w["name"], len(w["keys"]))
        lag = writers[-1]
        lag["workload"] = {
            "kind": "periodic_idle",
            "rate_per_s": 10.0,
            "active_ms": int(rng.integers(800, 2001)),
            "idle_ms": idle + int(rng.integers(300, 1501)),  # longer than the idleness timeout
        }
        lag["event_time_skew_ms"] = -int(rng.integers(3, 21)) * 100
        for key in ("start_ms", "stop_ms", "commit_interval_ms"):
            lag.pop(key, None)
    if not any(w.get("start_ms", 0) == 0 for w in writers):
        writers[0]["start_ms"] = 0  # some traffic from the start
    readers = _readers(rng, duration, segments, segments if placed else 1)
    for r in readers:
        r["poll_ms"] = int(_pick(rng, (20, 50, 50, 70, 100)))
    bound = int(_pick(rng, (0, 100, 200, 300, 500, 1000, 150, 333)))
    delay = int(_pick(rng, (0, 100, 200, 500, 1000))) + int(_pick(rng, (0, 0, 1, 1, bound % 100)))
    spark_input = (
        "segment" if not scaling and segments > 1 and _chance(rng, 0.8 if placed else 0.5) else "stream"
    )
    strategies: dict[str, Any] = {
        "only": ["flink", "spark"],  # what validate checks (each strategy runs as if alone)
        "tick_ms": tick,
        "flink_source": "reader" if _chance(rng, 0.65) else "segment_union",
        "flink_bound_ms": bound,
        "flink_interval_ms": interval,
        "flink_idle_timeout_ms": max(1, idle),
        "spark_delay_ms": delay,
        "spark_trigger_ms": max(1, trigger),
        "spark_input": spark_input,
        "spark_policy": _pick(rng, ("min", "max")),
    }
    data: dict[str, Any] = {
        "name": name,
        "description": "generated (bench/validate/generate.py): small, at the models' edges",
        "seed": int(rng.integers(1 << 31)),
        "start_time_ms": GENERATED_START_MS,
        "duration_ms": duration,
        "store": {"max_watermark_lag_ms": 2000, "polling_period_ms": 1000},
        "stream": {"name": "gen/stream", "segments": segments},
        "writers": writers,
        "readers": readers,
        "group": {
            "max_event_time_lag_ms": 500,
            "position_report_interval_ms": int(_pick(rng, (100, 500, 1000))),
        },
        "pipeline": {"ordering": True, "window_ms": window},
        "metrics": {"sample_ms": window, "plots": False, "segments": False},
        "strategies": strategies,
    }
    if scaling:
        # the last scale leaves its successors an emit before the run ends: a segment that lives only
        # after the last emit never takes part as a split (one source per segment has no model of it)
        scaling["stop_ms"] = duration - 2 * max(interval, tick)
        data["scaling"] = scaling
        if strategies["flink_source"] == "segment_union":
            # a transaction committed after a scale rolls over into segments created and sealed
            # within one lab tick: one source per segment has no model for those (docs/engines.md)
            for w in writers:
                w.pop("commit_interval_ms", None)
    return data


def _interval_choices(tick: int) -> list[int]:
    """Emit intervals shorter and longer than the tick, on its grid and off it (and off 1 s)."""
    out = {tick // 2, tick, 2 * tick, 3 * tick, tick + tick // 2, 5 * tick // 2, tick + 30, 130, 170, 250}
    return sorted(v for v in out if v >= 20)


def _writer(rng: np.random.Generator, name: str, duration: int) -> dict[str, Any]:
    kind = _pick(rng, ("lattice", "lattice", "offgrid", "bursty", "periodic_idle", "poisson"))
    w: dict[str, Any] = {"name": name, "keys": [f"{name}-{k}" for k in range(int(rng.integers(1, 4)))]}
    if kind == "lattice":  # one event per hand-over, event times on a lattice of g ms
        g = int(_pick(rng, (50, 100, 200, 250)))
        w["workload"] = {"kind": "constant", "rate_per_s": 1000 / g}
        w["tick_ms"] = g * int(_pick(rng, (1, 1, 2, 3)))
    elif kind == "offgrid":
        w["workload"] = {"kind": "constant", "rate_per_s": float(_pick(rng, (3, 7, 13, 30)))}
        w["tick_ms"] = int(_pick(rng, (70, 130, 300, 700, 1000)))
    elif kind == "bursty":
        every = int(rng.integers(1500, 4001))
        w["workload"] = {
            "kind": "bursty",
            "rate_per_s": 4.0,
            "burst_rate_per_s": float(_pick(rng, (40, 80))),
            "burst_ms": int(rng.integers(200, 801)),
            "burst_every_ms": every,
        }
        w["tick_ms"] = int(_pick(rng, (50, 100, 250)))
    elif kind == "periodic_idle":
        w["workload"] = {
            "kind": "periodic_idle",
            "rate_per_s": 10.0,
            "active_ms": int(rng.integers(1000, 3001)),
            "idle_ms": int(rng.integers(1000, 4001)),
        }
        w["tick_ms"] = int(_pick(rng, (100, 150)))
    else:
        w["workload"] = {"kind": "poisson", "rate_per_s": 10.0}
        w["tick_ms"] = 100
    skew = _pick(rng, ("none", "none", "early", "late", "odd"))
    if skew != "none":
        size = int(rng.integers(1, 21)) * 100
        w["event_time_skew_ms"] = {"early": size, "late": -size}.get(skew, int(rng.integers(-999, 1000)))
    disorder = _pick(rng, ("none", "none", "none", "fixed", "uniform"))
    if disorder == "fixed":
        w["disorder"] = {"kind": "fixed", "ms": float(int(rng.integers(1, 13)) * 50)}
    elif disorder == "uniform":
        w["disorder"] = {"kind": "uniform", "ms": float(rng.integers(50, 601))}
    if _chance(rng, 0.25):
        w["write_latency"] = {"kind": "fixed", "ms": float(rng.integers(1, 301))}
    if _chance(rng, 0.3):
        w["start_ms"] = int(rng.integers(1, duration // 3))
    if _chance(rng, 0.3):
        w["stop_ms"] = int(rng.integers(duration // 2, duration * 9 // 10))
        w["stop_ms"] = max(w["stop_ms"], w.get("start_ms", 0) + 1)
    if _chance(rng, 0.2):
        w["commit_interval_ms"] = int(_pick(rng, (200, 300, 500, 1000)))
    return w


def _keys_on(segment: int, segments: int, name: str, count: int) -> list[str]:
    """``count`` routing keys ``name-k`` whose hash falls in the ``segment``-th of ``segments`` equal key
    ranges (the stream's segments before it scales)."""
    keys: list[str] = []
    k = 0
    while len(keys) < count:
        key = f"{name}-{k}"
        if int(key_hash(key) * segments) == segment:
            keys.append(key)
        k += 1
    return keys


def _readers(
    rng: np.random.Generator, duration: int, segments: int, at_least: int = 1
) -> list[dict[str, Any]]:
    """One to three steady readers (at least ``at_least``), and maybe one that joins late, crashes,
    leaves or restarts."""
    out: list[dict[str, Any]] = [{"name": "r", "count": max(at_least, int(_pick(rng, (1, 1, 2, 3))))}]
    if _chance(rng, 0.25):
        out[0]["rate_per_s"] = float(_pick(rng, (15, 30)))  # a slow reader: backlogs, catch-up
    life = _pick(rng, ("none", "late", "crash", "leave", "restart", "restart"))
    if life == "none":
        return out
    extra: dict[str, Any] = {"name": life}
    if life == "late":
        extra["join_ms"] = int(rng.integers(500, duration // 2))
    elif life == "crash":
        extra["crash_ms"] = int(rng.integers(duration // 5, duration * 3 // 4))
        extra["offline_after_ms"] = int(rng.integers(100, 1501))
    elif life == "leave":
        extra["join_ms"] = int(rng.integers(0, duration // 4))
        extra["leave_ms"] = int(rng.integers(duration // 3, duration * 3 // 4))
    else:
        extra["mtbf_ms"] = float(rng.integers(2000, 6001))
        extra["offline_after_ms"] = int(rng.integers(100, 1001))
        extra["restart_ms"] = {"kind": "fixed", "ms": float(rng.integers(200, 1501))}
    if life in ("crash", "restart") and _chance(rng, 0.7):
        # it holds a segment (fewer steady readers than segments) and reads slower than its share:
        # it crashes with events delivered past its last reported position, which the segment's
        # next reader delivers again
        extra["rate_per_s"] = float(_pick(rng, (3, 6, 10)))
        out[0]["count"] = max(1, min(out[0]["count"], segments - 1))
    out.append(extra)
    return out


# ------------------------------------------------------------------ ties


def flink_watermark_before(st: FlinkStrategy, clock_ms: int) -> int | None:
    """The Flink model's combined watermark an event delivered at ``clock_ms`` meets (None: none yet)."""
    met = None
    for at, wm in st.emitted:
        if at >= clock_ms:
            break
        met = wm
    return None if met is None or met <= _NONE or met >= _INF else met


def spark_watermarks_around(st: SparkStrategy, t_ms: int) -> tuple[int, int | None]:
    """For a row delivered at lab time ``t_ms`` (since the start): the watermark it is judged against
    (the last batch's before it, 0 if none) and the one the next batch runs with (None: no next batch)."""
    late, nxt = 0, None
    for b in st.batches:
        if b.t_ms < t_ms:
            late = b.watermark
        else:
            nxt = b.watermark
            break
    return late, nxt


def _probe(data: dict[str, Any], rng: np.random.Generator) -> tuple[dict[str, Any], int]:
    """Add tie probes one at a time, in time order (see the module doc); returns the mapping and how
    many probes were added.

    A probe is written at a drawn instant with, as its event time, the watermark the run before it
    says it will meet; it is read at its reader's next poll, so the run with it says what it met,
    and if another emit or trigger came between, its event time is set to that and the run made
    again (what an event meets does not depend on its own event time)."""
    duration = data["duration_ms"]
    kinds = ["flink", "flink", "spark", "spark", "spark-next"]
    rng.shuffle(kinds)
    times = sorted(int(t) for t in rng.choice(np.arange(duration // 4, duration * 9 // 10), 5, replace=False))
    keys = [k for w in data["writers"] for k in w["keys"]]
    writer = sum(int(w.get("count", 1)) for w in data["writers"])  # the probe writer's index
    start = data["start_time_ms"]
    result = run_compare(lab_scenario_from_dict(data))
    events: list[dict[str, Any]] = []
    for kind, t in zip(kinds, times, strict=True):
        target = _target(result, kind, start + t)
        if target is None:
            continue
        events.append({"at_ms": t, "key": _pick(rng, keys), "event_time_offset_ms": target - (start + t)})
        for _attempt in range(2):
            with_probe = _with_probes(data, events)
            probed = run_compare(lab_scenario_from_dict(with_probe))
            met = _met(probed, kind, writer, len(events) - 1)
            if met is None or met == target:
                break
            target = met  # another emit or trigger came before its reader's poll
            events[-1]["event_time_offset_ms"] = target - (start + t)
        if met != target:  # not read (its reader away), or not at a watermark: left out
            events.pop()
            continue
        data, result = with_probe, probed
    return data, len(events)


def _target(result: LabResult, kind: str, clock_ms: int) -> int | None:
    """The watermark an event delivered at ``clock_ms`` meets (``spark-next``: the one of its batch)."""
    if kind == "flink":
        st = result.strategies["flink"]
        assert isinstance(st, FlinkStrategy)
        return flink_watermark_before(st, clock_ms)
    sp = result.strategies["spark"]
    assert isinstance(sp, SparkStrategy)
    late, nxt = spark_watermarks_around(sp, clock_ms - result.scenario.start_time_ms)
    if kind == "spark":
        return late if late > 0 else None
    return nxt if nxt is not None and nxt > late else None


def _met(result: LabResult, kind: str, writer: int, index: int) -> int | None:
    """The watermark the ``index``-th event of ``writer`` (in writing order) met in ``result`` (as
    ``_target`` reads it), or None if it was not delivered or met none."""
    if kind == "flink":
        st = result.strategies["flink"]
        assert isinstance(st, FlinkStrategy)
        mine = sorted((a[3], a[5]) for a in st.arrivals if a[2] == writer)
        met = mine[index][1] if index < len(mine) else None
        return None if met is None or met <= _NONE or met >= _INF else met
    sp = result.strategies["spark"]
    assert isinstance(sp, SparkStrategy)
    first: dict[int, tuple[int, int]] = {}  # seq -> (late watermark, batch watermark) where first read
    for b in sp.batches:
        for _input, w, q, _et in b.rows:
            if w == writer:
                first.setdefault(q, (b.late_watermark, b.watermark))
    if index >= len(first):
        return None
    late, wm = first[sorted(first)[index]]
    if kind == "spark":
        return late if late > 0 else None
    return wm if wm > late else None


def _with_probes(data: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    out["writers"] = [w for w in out["writers"] if w["name"] != _PROBE_WRITER]
    out["writers"].append(
        {
            "name": _PROBE_WRITER,
            "keys": sorted({e["key"] for e in events}),
            "workload": {"kind": "schedule", "events": copy.deepcopy(events)},
            "assert_every_ms": None,
        }
    )
    return out


# ------------------------------------------------------------------ window edges


def edge_residues(result: LabResult) -> tuple[Counter[int], Counter[int]]:
    """Per residue ``r`` of a watermark modulo the window: how many of the Flink model's moves and of
    Spark's batch watermarks would land on a window's last millisecond if the run were shifted so
    that ``r`` becomes ``window - 1`` — counting only those at which a window holding on-time events
    is due (Flink: its first move at or past the window's ``end - 1``; Spark: a batch at ``end - 1``,
    where the window must wait for the next)."""
    window = result.scenario.window_ms
    assert window is not None
    flink, spark = Counter[int](), Counter[int]()
    fl = result.strategies["flink"]
    assert isinstance(fl, FlinkStrategy)
    on_time = sorted((a[0], a[4]) for a in fl.arrivals if not a[6])  # (clock, event time)
    for at, wm in fl.emitted:
        if wm <= _NONE or wm >= _INF:
            continue
        if any(wm + 1 - window <= et <= wm for clock, et in on_time if clock <= at):
            flink[wm % window] += 1
    sp = result.strategies["spark"]
    assert isinstance(sp, SparkStrategy)
    rows: list[int] = []
    for b in sp.batches:
        rows += [r[3] for r in b.rows if r[3] > b.late_watermark]
        wm = b.watermark
        if wm > 0 and any(wm + 1 - window <= et <= wm for et in rows):
            spark[wm % window] += 1
    return flink, spark


def _shift(data: dict[str, Any], rng: np.random.Generator) -> tuple[dict[str, Any], int]:
    """Move the start so that a residue with the most landings of both engines (the fewer of the two
    first, then the sum; where none lands both, of one engine, drawn) becomes ``window - 1``;
    returns the mapping and the shift (ms)."""
    result = run_compare(lab_scenario_from_dict(data))
    window = data["pipeline"]["window_ms"]
    flink, spark = edge_residues(result)
    residues = sorted(set(flink) | set(spark))
    if not residues:
        return data, 0
    both = [r for r in residues if flink[r] and spark[r]]
    if both:  # the most of the fewer, then of both
        score = {r: (min(flink[r], spark[r]), flink[r] + spark[r]) for r in both}
    else:  # no residue lands both engines: one of them, drawn
        counts = flink if (flink and not spark) or (flink and _chance(rng, 0.5)) else spark
        score = {r: (counts[r], 0) for r in counts}
    best = max(score.values())
    r = int(_pick(rng, sorted(r for r, v in score.items() if v == best)))
    shift = (window - 1 - r) % window
    out = dict(data, start_time_ms=data["start_time_ms"] + shift)
    return out, shift

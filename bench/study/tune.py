"""``ingestwm tune SCENARIO --late-target F``: each strategy's least bound for a late-fraction target.

Strategies are compared at an equal operating point: for every strategy with a bound —
``ingestion`` (``group.max_event_time_lag_ms``), ``flink`` (``strategies.flink_bound_ms``),
``spark`` (``strategies.spark_delay_ms``) and each custom strategy that names its
``bound_param`` — the smallest bound that *meets* the target, and what it costs there;
strategies without a bound (``producer``, custom ones without ``bound_param``) are
reported as they are.

**Meets.** A bound is evaluated with ``n`` replications (seeds ``seed .. seed+n-1``, the
same seeds at every bound). Each run's late fraction is ``late / delivered`` (exact, not
the rounded table column; 0 when nothing was delivered); the bound meets the target
``F`` when the upper end of the 95 % Student-t interval of their mean, cut at [0, 1]
(``bench.study.stats``), is ``<= F``: with 95 % confidence the expected late fraction is
at most ``F``. With ``n = 1`` there is no interval: the bound meets when the one run's
late fraction is ``<= F`` (a point estimate, said in every output). A scenario with
nothing random gives the same run for every seed: a zero-width interval.

**Search.** The candidates are the multiples of ``resolution_ms`` from 0 up to
``max_bound_ms`` (and ``max_bound_ms`` itself). The late fraction does not grow with the
bound (statistically), so per strategy: evaluate the scenario's own bound (snapped to a
candidate); while it fails, double; while it meets, halve, to bracket the least meeting
candidate; then bisect until the failing and the meeting candidate are adjacent. The
answer is then the candidate an exhaustive scan of the grid finds, if the late fraction
is monotone there. If ``max_bound_ms`` fails, the target is not met up to it.

**Joint runs.** Each lab run evaluates every strategy (``strategies.only``: those), each as
if alone (``bench.lab.compare``), so one strategy's row does not depend on another's bound
(``tests/test_tune.py`` checks it). A round therefore runs ``n`` tasks
with every searching strategy at its next bound; the others ride at a bound already
evaluated, and their rows there are compared with the cached ones (a difference is an
error: the independence failed). Every evaluation is cached by (strategy, bound) and
never run again; every evaluated point is reported. The rounds' tasks go through
``bench.study.experiment.execute`` (local processes or one Spark task each).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from segmentstore.checks import checked

from ..lab.lab_scenario import lab_ready
from ..spec.errors import TuneError
from ..spec.scenario import Scenario, StrategiesSpec, scenario_to_dict
from .experiment import execute, replication_tasks
from .run_options import RunOptions
from .stats import FRACTION, domain_of, summarise

__all__ = [
    "COSTS",
    "Knob",
    "knobs",
    "set_bounds",
    "candidates",
    "BoundSearch",
    "Evaluation",
    "StrategyResult",
    "TuneResult",
    "meets",
    "tune",
]

_DEFAULT = RunOptions()

COSTS = (
    "late_fraction",
    "wm_lag_mean_ms",
    "wm_lag_p99_ms",
    "result_latency_p50_ms",
    "result_latency_p99_ms",
    "buffer_peak_events",
    "buffer_peak_bytes",
)
"""What each evaluation reports per strategy, each with its 95 % interval (docs/metrics.md)."""

_LAB_COLUMNS = ("result_latency_p99_ms",)  # row columns the runs add to LAB_METRICS


@dataclass(frozen=True, slots=True)
class Knob:
    """A strategy's bound: the scenario field that holds it (dotted) and the scenario's value."""

    strategy: str
    field: str
    current: int


def knobs(sc: Scenario) -> list[Knob]:
    """The bounded strategies of ``sc`` that run (``strategies.only``), in table order: the three
    built-in ones, then custom ones that name their ``bound_param``."""
    st = sc.strategies
    out = [
        Knob("ingestion", "group.max_event_time_lag_ms", sc.group.max_event_time_lag_ms),
        Knob("flink", "strategies.flink_bound_ms", st.flink_bound_ms if st else 1_000),
        Knob("spark", "strategies.spark_delay_ms", st.spark_delay_ms if st else 1_000),
    ]
    for i, c in enumerate(st.custom if st else ()):
        if c.bound_param is not None:
            out.append(
                Knob(c.name, f"strategies.custom.{i}.params.{c.bound_param}", int(c.params[c.bound_param]))
            )
    names = (st or StrategiesSpec()).names
    return [k for k in out if k.strategy in names]


def set_bounds(data: Mapping[str, Any], ks: Sequence[Knob], bounds: Mapping[str, int]) -> dict[str, Any]:
    """A copy of the raw scenario ``data`` with each knob's field set to ``bounds[strategy]``."""
    out = copy.deepcopy(dict(data))
    for k in ks:
        if k.strategy not in bounds:
            continue
        *path, last = k.field.split(".")
        node: Any = out
        for p in path:
            if isinstance(node, list):
                node = node[int(p)]
            else:
                if node.get(p) is None:  # a scenario without a strategies section
                    node[p] = {}
                node = node[p]
        node[last] = int(bounds[k.strategy])
    return out


def candidates(max_bound_ms: int, resolution_ms: int) -> tuple[int, ...]:
    """The bounds searched: multiples of ``resolution_ms`` up to ``max_bound_ms``, and ``max_bound_ms``."""
    if resolution_ms < 1:
        raise TuneError(f"--resolution-ms must be >= 1, got {resolution_ms}")
    if max_bound_ms < 0:
        raise TuneError(f"--max-bound-ms must be >= 0, got {max_bound_ms}")
    grid = list(range(0, max_bound_ms + 1, resolution_ms))
    if grid[-1] != max_bound_ms:
        grid.append(max_bound_ms)
    return tuple(grid)


class BoundSearch:
    """Bracketing (doubling from the start) and bisection over a sorted candidate list, by index.

    ``lo``: the largest index known to fail (-1: none), ``hi``: the smallest known to meet
    (``None``: none). O(log candidates) evaluations.
    """

    def __init__(self, grid: Sequence[int], start_ms: int) -> None:
        self.grid = tuple(grid)
        self.start = min(range(len(self.grid)), key=lambda i: (abs(self.grid[i] - start_ms), -self.grid[i]))
        self.lo = -1
        self.hi: int | None = None
        self.tried: list[int] = []

    def propose(self) -> int | None:
        """The next bound to evaluate, ``None`` when the search is over."""
        last = len(self.grid) - 1
        if not self.tried:
            i: int | None = self.start
        elif self.hi is None:  # nothing meets yet: double
            i = None if self.lo >= last else min(last, max(2 * self.lo, self.lo + 1))
        elif self.lo < 0:  # everything tried meets: halve
            i = None if self.hi == 0 else self.hi // 2
        else:
            i = None if self.hi - self.lo <= 1 else (self.lo + self.hi) // 2
        return None if i is None else self.grid[i]

    def record(self, bound: int, met: bool) -> None:
        """The outcome of evaluating ``bound`` (one of the candidates)."""
        i = self.grid.index(bound)
        self.tried.append(i)
        if met:
            self.hi = i if self.hi is None else min(self.hi, i)
        else:
            self.lo = max(self.lo, i)
        self._check()

    @property
    def result(self) -> int | None:
        """The least meeting candidate found (``None``: not met up to the last candidate)."""
        return None if self.hi is None else self.grid[self.hi]

    @checked
    def _check(self) -> None:
        assert -1 <= self.lo < len(self.grid)
        assert self.hi is None or 0 <= self.hi < len(self.grid)
        assert len(set(self.tried)) == len(self.tried), "a candidate was evaluated twice"


def meets(late_fraction: Mapping[str, Any], target: float) -> bool:
    """Whether a ``summarise`` of the runs' late fractions meets ``target`` (module doc: the rule)."""
    if late_fraction["n"] == 0 or late_fraction["mean"] is None:
        return False
    if late_fraction["n"] == 1:
        return bool(late_fraction["mean"] <= target)
    return late_fraction["high"] is not None and late_fraction["high"] <= target


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One strategy at one bound (``None``: it has none) over the seeds: per-seed values and summaries."""

    strategy: str
    bound_ms: int | None
    round: int
    runs: tuple[dict[str, Any], ...]
    stats: dict[str, dict[str, Any]]
    met: bool


@dataclass(frozen=True, slots=True)
class StrategyResult:
    """A strategy's answer: its knob (``None``: no bound), the evaluation reported and how it was found."""

    strategy: str
    knob: Knob | None
    evaluation: Evaluation
    status: str  # "met" | "not met" | "as it is"
    evaluations: int


@dataclass(frozen=True, slots=True)
class TuneResult:
    """What a tuning produced: per-strategy answers, every evaluated point, the runs it took."""

    scenario: Scenario
    target: float
    replications: int
    seeds: tuple[int, ...]
    max_bound_ms: int
    resolution_ms: int
    results: tuple[StrategyResult, ...]
    points: tuple[Evaluation, ...]
    rounds: int
    tasks: int
    random: tuple[str, ...] = ()
    scenarios: tuple[dict[str, Any], ...] = field(default=(), repr=False)


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank, as the lab's result latencies (``bench.lab.compare``)."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, math.ceil(q * len(v)) - 1)]


def _per_seed(run: Mapping[str, Any], strategy: str) -> dict[str, Any]:
    """One run's ``COSTS`` for ``strategy`` (the late fraction exact; the lag p99 from its series)."""
    m = run["metrics"]
    late, delivered = m.get(f"{strategy}.late", 0), m.get(f"{strategy}.delivered", 0)
    lags = [v for _, v in run["series"].get(f"{strategy}.wm_lag_ms", []) if v is not None]
    return {
        "seed": run["seed"],
        "late": late,
        "delivered": delivered,
        "late_fraction": late / delivered if delivered else 0.0,
        "wm_lag_mean_ms": m.get(f"{strategy}.wm_lag_mean_ms"),
        "wm_lag_p99_ms": _percentile(lags, 0.99),
        "result_latency_p50_ms": m.get(f"{strategy}.result_latency_p50_ms"),
        "result_latency_p99_ms": m.get(f"{strategy}.result_latency_p99_ms"),
        "buffer_peak_events": m.get(f"{strategy}.buffer_peak_events"),
        "buffer_peak_bytes": m.get(f"{strategy}.buffer_peak_bytes"),
    }


def _evaluate(
    strategy: str, bound: int | None, rnd: int, runs: Sequence[Mapping[str, Any]], target: float
) -> Evaluation:
    rows = tuple(_per_seed(r, strategy) for r in runs)
    stats = {
        c: summarise((r[c] for r in rows), FRACTION if c == "late_fraction" else domain_of(c)) for c in COSTS
    }
    return Evaluation(strategy, bound, rnd, rows, stats, meets(stats["late_fraction"], target))


def _strategies(run: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys(k.rsplit(".", 1)[0] for k in run["metrics"] if k.endswith(".late_fraction")))


def tune(
    sc: Scenario,
    target: float,
    replications: int,
    max_bound_ms: int = 10_000,
    resolution_ms: int = 10,
    options: RunOptions = _DEFAULT,
    run: Callable[..., list[dict[str, Any]]] = execute,
) -> TuneResult:
    """Search every bounded strategy's least bound meeting ``target``; one ``run`` (``execute``) per round."""
    if isinstance(target, bool) or not 0.0 <= target <= 1.0:
        raise TuneError(f"--late-target must be a fraction in [0, 1], got {target!r}")
    if replications < 1:
        raise TuneError(f"--replications must be >= 1, got {replications}")
    lab_ready(sc)
    grid = candidates(max_bound_ms, resolution_ms)
    ks = knobs(sc)
    data = scenario_to_dict(sc)
    data["metrics"] = {**data["metrics"], "plots": False, "event_log": False, "segments": False}
    searches = {k.strategy: BoundSearch(grid, k.current) for k in ks}
    cache: dict[tuple[str, int | None], Evaluation] = {}
    order: list[str] = []
    scenarios: list[dict[str, Any]] = []
    rnd = tasks_run = 0
    random: tuple[str, ...] = ()
    while True:
        proposals = {s: b for s, se in searches.items() if (b := se.propose()) is not None}
        if not proposals and rnd > 0:
            break
        bounds = {}
        for k in ks:  # a finished strategy rides at its first evaluated bound (compared below)
            b = proposals.get(k.strategy)
            bounds[k.strategy] = b if b is not None else grid[searches[k.strategy].tried[0]]
        point = set_bounds(data, ks, bounds)
        scenarios.append(point)
        tasks = replication_tasks("compare", point, sc.seed, replications, rnd, bounds)
        for t in tasks:
            t["lab_columns"] = list(_LAB_COLUMNS)
            t["probing"] = sorted(proposals)
        what = ", ".join(f"{s} {b} ms" for s, b in proposals.items()) or "the strategies as they are"
        options.echo(f"round {rnd + 1}: {what} ({len(tasks)} runs)")
        runs = sorted(
            run(tasks, options, label=f"{sc.name} round {rnd + 1}"),
            key=lambda r: r["seed"],
        )
        tasks_run += len(tasks)
        random = tuple(runs[0]["random"]) if runs else ()
        for s in _strategies(runs[0]) if runs else []:
            if s not in order:
                order.append(s)
            key = (s, bounds.get(s))
            ev = _evaluate(s, key[1], rnd, runs, target)
            old = cache.get(key)
            if old is None:
                cache[key] = ev
            elif old.runs != ev.runs:
                raise TuneError(
                    f"strategy {s!r} at bound {key[1]} gave other results when the other strategies' bounds "
                    "changed: the lab's strategies are not independent (a bug; please report it)"
                )
        for s, b in proposals.items():
            searches[s].record(b, cache[(s, b)].met)
        rnd += 1
    by_strategy = {k.strategy: k for k in ks}
    results = []
    for s in order:
        knob = by_strategy.get(s)
        if knob is None:
            results.append(StrategyResult(s, None, cache[(s, None)], "as it is", 1))
            continue
        se = searches[s]
        chosen = se.result
        status = "met" if chosen is not None else "not met"
        reported = chosen if chosen is not None else grid[max(se.tried)]
        results.append(StrategyResult(s, knob, cache[(s, reported)], status, len(se.tried)))
    points = tuple(sorted(cache.values(), key=lambda e: (order.index(e.strategy), e.bound_ms or 0)))
    seeds = tuple(range(sc.seed, sc.seed + replications))
    return TuneResult(
        sc,
        target,
        replications,
        seeds,
        max_bound_ms,
        resolution_ms,
        tuple(results),
        points,
        rnd,
        tasks_run,
        random,
        tuple(scenarios),
    )

"""Seeded model bugs the check must catch (``ingestwm validate --mutations``).

A check that agrees with a model on every scenario says nothing until it is shown to disagree
with a model that is wrong. Each ``Mutation`` here is one plausible bug in the lab's Flink or
Spark model, applied alone for the time of a lab run by replacing one method of the model (or
of the ``flink_compat`` operator it runs) with a copy that has the bug: nothing is edited,
and the model's code stays as it is. ``check_mutations`` runs the generated scenarios through
the lab with each mutation and compares every result with the real engines (the driven Java
Flink job, Spark) exactly as ``ingestwm validate`` does; a mutation is *caught* when the check
of the model it breaks says ``differs`` on at least one scenario, and one that survives is a
failing check.

The engines are deterministic in what the lab hands them (the driven job has no wall clock;
the Spark replay runs one Spark batch per model batch): the same input gives the same output.
So each engine runs once per distinct input (``EngineRuns``: keyed by the driven job's spec
text, or by Spark's batches, inputs and settings); a mutation that leaves an engine's input
as it was (most do: the readers' deliveries and the settings do not depend on the model)
is compared with that engine's run of the unmutated model, and one that changes it (an
emit interval changes the splits' spans; a policy changes Spark's no-data batches) runs the
engine again.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from flink_compat.operators import EventTimeOrderingOperator
from flink_compat.strategies import BoundedOutOfOrdernessWatermarks, WatermarksWithIdleness
from flink_compat.watermark import StatusWatermarkValve, Watermark, WatermarkStatus
from flink_compat.windows import TimeWindow

from ..lab import run_compare
from ..lab.compare import LabResult
from ..lab.compared_strategies import FlinkStrategy, SparkStrategy, _SparkEviction
from ..lab.lab_scenario import lab_strategies
from ..spec.scenario import Scenario
from .errors import EngineUnavailableError, ValidateError
from .flink_engine import FlinkReplay, scenario_window_ms
from .flink_java import TURN_TIMEOUT_MS, _spec_text, driven_spec, replay_flink_java
from .spark_engine import SparkReplay, replay_spark
from .verdict import DIFFERS, EXACT, Verdict, flink_verdict, not_run, spark_verdict

__all__ = ["Mutation", "MUTATIONS", "MutationOutcome", "EngineRuns", "check_mutations", "mutation_names"]


@dataclass(frozen=True, slots=True)
class Mutation:
    """One model bug: ``name``, the models whose check must find it, what is wrong, how to apply it."""

    name: str
    models: tuple[str, ...]  # "flink", "spark"
    bug: str
    apply: Callable[[], contextlib.AbstractContextManager[None]] = field(repr=False, compare=False)


@contextlib.contextmanager
def _replaced(owner: type, attr: str, value: Any) -> Iterator[None]:
    """``owner.attr`` is ``value`` for the time of the block (the seam must be the class's own)."""
    if attr not in owner.__dict__:
        raise ValidateError(
            f"mutation seam {owner.__name__}.{attr} is gone: update bench/validate/mutations.py"
        )
    old = owner.__dict__[attr]
    setattr(owner, attr, value)
    try:
        yield
    finally:
        setattr(owner, attr, old)


# ------------------------------------------------------------------ the bugs, each a copy with one change


def _late_lt() -> contextlib.AbstractContextManager[None]:
    def process_element(self: Any, record: Any) -> None:
        ts = record.timestamp
        assert ts is not None
        if ts < self._current_watermark:  # the bug: a tie is on time
            self._late += 1
            if self._late_tag is not None:
                self.output.collect_side(self._late_tag, record)
            return
        if ts == self._current_watermark:  # on time, and the watermark has reached it: out at once
            self.output.collect(record)
            return
        heapq.heappush(self._heap, (ts, next(self._seq), record.value))

    return _replaced(EventTimeOrderingOperator, "process_element", process_element)


def _window_end() -> contextlib.AbstractContextManager[None]:
    return _replaced(TimeWindow, "max_timestamp", lambda self: self.end)  # the bug: not end - 1


def _bound_without_1() -> contextlib.AbstractContextManager[None]:
    def on_periodic_emit(self: Any, output: Any) -> None:
        output.emit_watermark(Watermark(self._max_timestamp - self._bound))  # the bug: no - 1

    return _replaced(BoundedOutOfOrdernessWatermarks, "on_periodic_emit", on_periodic_emit)


def _valve_max() -> contextlib.AbstractContextManager[None]:
    def _output_min_of_aligned(self: Any, out: list[Any]) -> None:
        aligned = [c.watermark for c in self._channels if c.aligned]
        if aligned:
            new = max(aligned)  # the bug: max for min
            if new > self._last_output_watermark:
                self._last_output_watermark = new
                out.append(Watermark(new))

    return _replaced(StatusWatermarkValve, "_output_min_of_aligned", _output_min_of_aligned)


def _valve_no_alignment() -> contextlib.AbstractContextManager[None]:
    real = StatusWatermarkValve.__dict__["input_watermark_status"]

    def input_watermark_status(self: Any, status: WatermarkStatus, channel: int) -> list[Any]:
        out: list[Any] = real(self, status, channel)
        ch = self._channels[channel]
        if status.is_active():
            ch.aligned = True  # the bug: back from idle, it counts at once, below the combined one too
        return out

    return _replaced(StatusWatermarkValve, "input_watermark_status", input_watermark_status)


def _idleness(bug: str) -> Callable[[], contextlib.AbstractContextManager[None]]:
    def apply() -> contextlib.AbstractContextManager[None]:
        quiet_once: set[int] = set()  # idle-late: generators whose first quiet emit passed

        def _check_if_idle(self: Any) -> bool:
            now = self._clock.now()
            if self._counter != self._last_counter:
                self._last_counter = self._counter
                # idle-early's bug: inactivity counted from this emit, the last that saw activity
                self._inactive_since = now if bug == "early" else None
                quiet_once.discard(id(self))
                return False
            if self._inactive_since is None:
                if bug == "late" and id(self) not in quiet_once:
                    quiet_once.add(id(self))  # idle-late's bug: from the second quiet emit
                    return False
                self._inactive_since = now
                return False
            if bug == "ge":
                return bool(now - self._inactive_since >= self._timeout)  # the bug: >= for >
            return bool(now - self._inactive_since > self._timeout)

        return _replaced(WatermarksWithIdleness, "_check_if_idle", _check_if_idle)

    return apply


def _emit_interval(factor: float) -> Callable[[], contextlib.AbstractContextManager[None]]:
    def apply() -> contextlib.AbstractContextManager[None]:
        # the bug: the model emits at another interval than the one the job is configured with
        wrong = property(lambda self: max(1, round(self.config.flink_interval_ms * factor)))
        return _replaced(FlinkStrategy, "period_ms", wrong)

    return apply


def _spark_late_current() -> contextlib.AbstractContextManager[None]:
    real = SparkStrategy.__dict__["on_event"]

    def on_event(self: Any, stream: str, segment: str, writer: int, seq: int, et: int, nbytes: int) -> None:
        ordering = self.pipeline.ordering
        held = ordering._current_watermark
        # the bug: a row judged against the watermark its own batch runs with, not the previous one's
        ordering._current_watermark = max(held, self._next)
        try:
            real(self, stream, segment, writer, seq, et, nbytes)
        finally:
            ordering._current_watermark = held

    return _replaced(SparkStrategy, "on_event", on_event)


def _spark_policy_swapped() -> contextlib.AbstractContextManager[None]:
    def _combined(self: Any) -> int:
        values = self._inputs.values()
        return int(max(values) if self.config.spark_policy == "min" else min(values))  # the bug: swapped

    return _replaced(SparkStrategy, "_combined", _combined)


def _spark_window_end() -> contextlib.AbstractContextManager[None]:
    def emit_watermark(self: Any, watermark: Watermark) -> None:
        p = self.pipeline
        p.windows.process_watermark(watermark)  # the bug: emitted at end - 1, as Flink's
        if p.chain is not None:
            p.chain.input_watermark_at(watermark.timestamp, p.clock.now())

    return _replaced(_SparkEviction, "emit_watermark", emit_watermark)


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("late-lt", ("flink", "spark"), "late judged with < instead of <= (a tie is on time)", _late_lt),
    Mutation("window-end", ("flink",), "a window fires at its end instead of end - 1", _window_end),
    Mutation(
        "bound-1", ("flink",), "the generator offers max - bound, without Flink's - 1 ms", _bound_without_1
    ),
    Mutation("valve-max", ("flink",), "the valve takes the maximum over aligned channels", _valve_max),
    Mutation(
        "valve-align", ("flink",), "a channel back from idle counts at once, unaligned", _valve_no_alignment
    ),
    Mutation(
        "idle-early",
        ("flink",),
        "idleness one emit early (counted from the last active emit)",
        _idleness("early"),
    ),
    Mutation(
        "idle-late",
        ("flink",),
        "idleness one emit late (counted from the second quiet emit)",
        _idleness("late"),
    ),
    Mutation("idle-ge", ("flink",), "idle once inactive for the timeout (>=), not longer", _idleness("ge")),
    Mutation("emit-half", ("flink",), "periodic emits at half the interval", _emit_interval(0.5)),
    Mutation("emit-double", ("flink",), "periodic emits at twice the interval", _emit_interval(2.0)),
    Mutation(
        "spark-late-current",
        ("spark",),
        "rows judged against their own batch's watermark, not the previous batch's",
        _spark_late_current,
    ),
    Mutation(
        "spark-policy",
        ("spark",),
        "the other multipleWatermarkPolicy (max for min, min for max)",
        _spark_policy_swapped,
    ),
    Mutation(
        "spark-window-end", ("spark",), "a window is emitted at end - 1 instead of end", _spark_window_end
    ),
)


def mutation_names() -> list[str]:
    """The mutations' names, in order (``--mutation NAME``)."""
    return [m.name for m in MUTATIONS]


# ------------------------------------------------------------------ the engines, once per input


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class EngineRuns:
    """The engines' runs of lab results, each engine once per distinct input (see the module doc).

    ``spark_session``: a callable giving the SparkSession (called once, on the first Spark run);
    ``flink_python``: the Python whose PyFlink has Flink's jars (the driven Java job's)."""

    def __init__(self, spark_session: Callable[[], Any], flink_python: str | None) -> None:
        self._spark_session = spark_session
        self._session: Any = None
        self._python = flink_python
        self._flink: dict[str, FlinkReplay] = {}
        self._spark: dict[str, SparkReplay] = {}
        self.flink_runs = 0  # results the driven job ran (the rest came from a run with the same input)
        self.spark_runs = 0

    def flink(self, results: Sequence[LabResult]) -> list[FlinkReplay | ValidateError]:
        """The driven job's replay of each result (or why it could not run); the new inputs in one JVM."""
        keys: list[str | ValidateError] = []
        for r in results:
            try:
                keys.append(_digest(_spec_text([driven_spec(r)], TURN_TIMEOUT_MS)))
            except ValidateError as e:
                keys.append(e)
        todo: dict[str, LabResult] = {}
        for r, k in zip(results, keys, strict=True):
            if isinstance(k, str) and k not in self._flink:
                todo.setdefault(k, r)
        if todo:
            replays = replay_flink_java(list(todo.values()), self._python)
            self._flink.update(zip(todo, replays, strict=True))
            self.flink_runs += len(todo)
        return [k if isinstance(k, ValidateError) else self._flink[k] for k in keys]

    def spark(self, result: LabResult) -> SparkReplay:
        """Spark's replay of ``result``'s micro-batches (the model's rows, inputs and settings)."""
        st = result.strategies["spark"]
        assert isinstance(st, SparkStrategy)
        cfg = lab_strategies(result.scenario)
        window = scenario_window_ms(result.scenario)
        start = result.scenario.start_time_ms
        key = _digest(
            repr(
                (cfg.spark_delay_ms, window, cfg.spark_policy, start, st.inputs, [b.rows for b in st.batches])
            )
        )
        if key not in self._spark:
            if self._session is None:
                self._session = self._spark_session()
            self._spark[key] = replay_spark(
                self._session,
                st.batches,
                st.inputs,
                delay_ms=cfg.spark_delay_ms,
                window_ms=window,
                policy=cfg.spark_policy,
                start_time_ms=start,
            )
            self.spark_runs += 1
        return self._spark[key]


def _verdicts(results: Sequence[LabResult], engines: Sequence[str], runs: EngineRuns) -> list[Verdict]:
    """The check of every result by every engine asked for (Flink: the driven job), rows in order."""
    out: list[Verdict] = []
    flink: list[FlinkReplay | ValidateError] = []
    if "flink" in engines:
        flink = runs.flink(results)
    for i, r in enumerate(results):
        name = r.scenario.name
        if "spark" in engines:
            sp = r.strategies["spark"]
            assert isinstance(sp, SparkStrategy)
            if sp.inputs_added_late:
                out.append(not_run(name, "spark", "Spark", "spark_input: segment on a stream that scales"))
            else:
                out.append(_or_failed(name, "spark", "Spark", _spark_check(r, runs)))
        if "flink" in engines:
            fl = r.strategies["flink"]
            assert isinstance(fl, FlinkStrategy)
            rep = flink[i]
            strategy = f"flink ({fl.topology})"
            if isinstance(rep, ValidateError):
                out.append(Verdict(name, strategy, "Flink", verdict="failed", note=str(rep)))
            else:
                out.append(_or_failed(name, strategy, "Flink", _flink_check(r, rep)))
    return out


def _spark_check(result: LabResult, runs: EngineRuns) -> Callable[[], Verdict]:
    return lambda: spark_verdict(result, runs.spark(result))


def _flink_check(result: LabResult, replay: FlinkReplay) -> Callable[[], Verdict]:
    return lambda: flink_verdict(result, replay)


def _or_failed(scenario: str, strategy: str, engine: str, run: Callable[[], Verdict]) -> Verdict:
    try:
        return run()
    except EngineUnavailableError:
        raise
    except ValidateError as e:
        return Verdict(scenario, strategy, engine, verdict="failed", note=str(e))


# ------------------------------------------------------------------ the check


@contextlib.contextmanager
def _self_check_noted(lab_compare: Any, broken: list[str]) -> Iterator[None]:
    """The lab's own ``_check()`` after a run, its failure noted instead of raised: a mutated model
    may break its own invariants (the valve's, the reordering buffer's), but what is measured
    here is whether the engines' check finds it."""
    real = lab_compare._check_copy

    def noted(*args: Any) -> None:
        try:
            real(*args)
        except AssertionError as e:
            broken.append(str(e).splitlines()[0] if str(e) else type(e).__name__)

    lab_compare._check_copy = noted
    try:
        yield
    finally:
        lab_compare._check_copy = real


@dataclass(frozen=True, slots=True)
class MutationOutcome:
    """One mutation over the generated set: per model checked, the scenarios whose check said
    ``differs``, and the first difference's note."""

    mutation: Mutation
    scenarios: int
    caught: dict[str, tuple[str, ...]]  # model -> scenarios where its check differs
    other: dict[str, tuple[str, ...]]  # model -> scenarios where its check neither agreed nor differed
    first: str = ""
    invariant_broken: int = 0  # lab runs in which the mutated model broke one of its own invariants

    @property
    def survived(self) -> bool:
        """Not caught by the check of every model it breaks (of those checked)."""
        return any(not self.caught.get(m) for m in self.mutation.models if m in self.caught)


def check_mutations(
    scenarios: Sequence[Scenario],
    engines: Sequence[str],
    runs: EngineRuns,
    mutations: Sequence[Mutation] = MUTATIONS,
    echo: Callable[[str], None] = lambda _s: None,
    on_result: Callable[[LabResult], None] | None = None,
) -> tuple[list[Verdict], list[MutationOutcome]]:
    """The unmutated model's verdicts on ``scenarios``, then each mutation's outcome (its bug applied
    alone to the lab runs; the engines' runs shared by input). A mutation of a model whose engine is
    not in ``engines`` is not run. ``on_result`` sees each unmutated lab run."""
    base = [run_compare(sc) for sc in scenarios]
    for r in base:
        if on_result is not None:
            on_result(r)
    from ..lab import compare as lab_compare

    echo(f"mutations: the unmutated model on {len(scenarios)} scenarios")
    plain = _verdicts(base, engines, runs)
    outcomes: list[MutationOutcome] = []
    for m in mutations:
        checked = [e for e in m.models if e in engines]
        if not checked:
            continue
        broken: list[str] = []
        with m.apply(), _self_check_noted(lab_compare, broken):
            results = [run_compare(sc) for sc in scenarios]
        rows = _verdicts(results, checked, runs)
        caught: dict[str, list[str]] = {e: [] for e in checked}
        other: dict[str, list[str]] = {e: [] for e in checked}
        first = ""
        for v in rows:
            e = "spark" if v.strategy == "spark" else "flink"
            if v.verdict == DIFFERS:
                caught[e].append(v.scenario)
                first = first or f"{v.scenario} {v.strategy}: {v.note}"
            elif v.verdict != EXACT:
                other[e].append(v.scenario)
        out = MutationOutcome(
            m,
            len(scenarios),
            {e: tuple(s) for e, s in caught.items()},
            {e: tuple(s) for e, s in other.items()},
            first,
            len(broken),
        )
        echo(f"mutation {m.name}: " + ", ".join(f"{e} {len(s)}/{len(scenarios)}" for e, s in caught.items()))
        outcomes.append(out)
    return plain, outcomes

"""Seeded model bugs the check must catch (``ingestwm validate --mutations``).

A check that agrees with a model on every scenario says nothing until it is shown to disagree
with a model that is wrong. Each ``Mutation`` here is one plausible bug in the lab's Flink or
Spark model: the engines' rules (``bench.lab.engine_rules.ENGINE_RULES``) with one rule
wrong, given to the lab's runs (``run_compare(sc, rules=...)``) — the rule a model takes from
that seam, or the ``flink_compat`` part it builds from it, replaced by a subclass with the bug.
Nothing is edited or patched: the models' code stays as it is, and every other run of the lab
uses the engines' rules. ``check_mutations`` runs the generated scenarios through the lab with
each mutation and compares every result with the real engines (the driven Java Flink job,
Spark) exactly as ``ingestwm validate`` does; a mutation is *caught* when the check of the
model it breaks says ``differs`` on at least one scenario, and one that survives is a failing
check.

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

import hashlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from flink_compat import EventTimeOrderingOperator, StatusWatermarkValve, Watermark, WatermarkStatus
from flink_compat.strategies import BoundedOutOfOrdernessWatermarks, WatermarkOutput, WatermarksWithIdleness
from segmentstore import Clock

from ..lab import run_compare
from ..lab.compare import LabResult
from ..lab.compared_strategies import FlinkStrategy
from ..lab.engine_rules import EngineRules
from ..lab.lab_scenario import lab_strategies
from ..lab.spark_model import SparkStrategy
from ..spec.scenario import Scenario
from .errors import EngineUnavailableError, ValidateError
from .flink_engine import FlinkReplay, scenario_window_ms
from .flink_java import TURN_TIMEOUT_MS, _spec_text, driven_spec, replay_flink_java
from .spark_engine import SparkReplay, replay_spark
from .verdict import DIFFERS, EXACT, Verdict, flink_verdict, not_run, spark_verdict

__all__ = ["Mutation", "MUTATIONS", "MutationOutcome", "EngineRuns", "check_mutations", "mutation_names"]


@dataclass(frozen=True, slots=True)
class Mutation:
    """One model bug: ``name``, the models whose check must find it, what is wrong, and the rules
    with the bug (the engines' own but for it)."""

    name: str
    models: tuple[str, ...]  # "flink", "spark"
    bug: str
    rules: EngineRules


# ------------------------------------------------------------------ the bugs: wrong parts and rules


class _TieOnTime(EventTimeOrderingOperator):
    """late-lt: an event at exactly the watermark is on time (``<`` for ``<=``): out at once, as one
    the watermark has already passed."""

    def process_element(self, record: Any) -> None:
        if record.timestamp == self.current_watermark:
            self.output.collect(record)
            return
        super().process_element(record)


class _OneHigher:
    """A ``WatermarkOutput`` that passes each watermark on 1 ms higher."""

    def __init__(self, output: WatermarkOutput) -> None:
        self._output = output

    def emit_watermark(self, watermark: Watermark) -> None:
        self._output.emit_watermark(Watermark(watermark.timestamp + 1))

    def mark_idle(self) -> None:
        self._output.mark_idle()

    def mark_active(self) -> None:
        self._output.mark_active()


class _BoundWithoutMinusOne(BoundedOutOfOrdernessWatermarks):
    """bound-1: offers ``max - bound``, without Flink's ``- 1``."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        super().on_periodic_emit(_OneHigher(output))


class _IdleOneEmitEarly(WatermarksWithIdleness[Any]):
    """idle-early: inactivity counted from the last periodic emit that saw an event, not the first
    that saw none."""

    def _check_if_idle(self) -> bool:
        active = self._counter != self._last_counter
        idle = super()._check_if_idle()
        if active:
            self._inactive_since = self._clock.now()
        return idle


class _IdleOneEmitLate(WatermarksWithIdleness[Any]):
    """idle-late: inactivity counted from the second periodic emit that saw nothing new."""

    _waited = False

    def _check_if_idle(self) -> bool:
        if self._counter != self._last_counter:
            self._waited = False
        elif self._inactive_since is None and not self._waited:
            self._waited = True  # the first quiet emit starts nothing
            return False
        return super()._check_if_idle()


class _IdleAtTheTimeout(WatermarksWithIdleness[Any]):
    """idle-ge: idle once inactive for the timeout itself (``>=``), not only for longer."""

    def _check_if_idle(self) -> bool:
        if super()._check_if_idle():
            return True
        since = self._inactive_since
        return since is not None and self._clock.now() - since >= self._timeout


def _generator(
    bounded: type[BoundedOutOfOrdernessWatermarks] = BoundedOutOfOrdernessWatermarks,
    idleness: type[WatermarksWithIdleness[Any]] = WatermarksWithIdleness,
) -> Callable[[int, int, Clock], Any]:
    """A ``flink_generator`` rule built of these parts (Flink's own: the engines' generator)."""

    def make(bound_ms: int, idle_timeout_ms: int, clock: Clock) -> Any:
        return idleness(bounded(bound_ms), idle_timeout_ms, clock)

    return make


class _MaxValve(StatusWatermarkValve):
    """valve-max: the maximum over the active, aligned channels."""

    def _output_min_of_aligned(self, out: list[Any]) -> None:
        aligned = [c.watermark for c in self._channels if c.aligned]
        if aligned and max(aligned) > self._last_output_watermark:
            self._last_output_watermark = max(aligned)
            out.append(Watermark(self._last_output_watermark))


class _UnalignedValve(StatusWatermarkValve):
    """valve-align: a channel back from idle counts at once, below the combined watermark too."""

    def input_watermark_status(self, status: WatermarkStatus, channel: int) -> list[Any]:
        out = super().input_watermark_status(status, channel)
        if status.is_active():
            self._channels[channel].aligned = True
        return out


def _half(interval_ms: int) -> int:
    return max(1, interval_ms // 2)


def _double(interval_ms: int) -> int:
    return 2 * interval_ms


def _swapped_policy(policy: str, values: Collection[int]) -> int:
    return max(values) if policy == "min" else min(values)


def _second(_first: int, second: int) -> int:
    return second


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "late-lt",
        ("flink", "spark"),
        "late judged with < instead of <= (a tie is on time)",
        EngineRules(late_filter=_TieOnTime),
    ),
    Mutation(
        "window-end",
        ("flink",),
        "a window fires at its end instead of end - 1",
        EngineRules(flink_window_fires_at=0),
    ),
    Mutation(
        "bound-1",
        ("flink",),
        "the generator offers max - bound, without Flink's - 1 ms",
        EngineRules(flink_generator=_generator(bounded=_BoundWithoutMinusOne)),
    ),
    Mutation(
        "valve-max",
        ("flink",),
        "the valve takes the maximum over aligned channels",
        EngineRules(flink_valve=_MaxValve),
    ),
    Mutation(
        "valve-align",
        ("flink",),
        "a channel back from idle counts at once, unaligned",
        EngineRules(flink_valve=_UnalignedValve),
    ),
    Mutation(
        "idle-early",
        ("flink",),
        "idleness one emit early (counted from the last active emit)",
        EngineRules(flink_generator=_generator(idleness=_IdleOneEmitEarly)),
    ),
    Mutation(
        "idle-late",
        ("flink",),
        "idleness one emit late (counted from the second quiet emit)",
        EngineRules(flink_generator=_generator(idleness=_IdleOneEmitLate)),
    ),
    Mutation(
        "idle-ge",
        ("flink",),
        "idle once inactive for the timeout (>=), not longer",
        EngineRules(flink_generator=_generator(idleness=_IdleAtTheTimeout)),
    ),
    Mutation(
        "emit-half",
        ("flink",),
        "periodic emits at half the interval",
        EngineRules(flink_interval_ms=_half),
    ),
    Mutation(
        "emit-double",
        ("flink",),
        "periodic emits at twice the interval",
        EngineRules(flink_interval_ms=_double),
    ),
    Mutation(
        "spark-late-current",
        ("spark",),
        "rows judged late against their own batch's watermark, not the previous batch's",
        EngineRules(spark_late_watermark=_second),
    ),
    Mutation(
        "spark-watermark-current",
        ("spark",),
        "a batch runs with the watermark its own rows moved, not the one from the batches before",
        EngineRules(spark_batch_watermark=_second),
    ),
    Mutation(
        "spark-policy",
        ("spark",),
        "the other multipleWatermarkPolicy (max for min, min for max)",
        EngineRules(spark_policy=_swapped_policy),
    ),
    Mutation(
        "spark-window-end",
        ("spark",),
        "a window is emitted at end - 1 instead of end",
        EngineRules(spark_window_fires_at=-1),
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


def _verdicts(
    results: Sequence[LabResult],
    engines: Sequence[str],
    runs: EngineRuns,
    echo: Callable[[str], None] = lambda _s: None,
) -> list[Verdict]:
    """The check of every result by every engine asked for (Flink: the driven job), rows in order;
    ``echo`` hears each row as it comes."""
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
        for v in out[len(out) - len(engines) :]:
            echo(f"{v.scenario}: {v.strategy} {v.verdict}")
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

    echo(f"mutations: the unmutated model on {len(scenarios)} scenarios")
    plain = _verdicts(base, engines, runs, echo)
    outcomes: list[MutationOutcome] = []
    for m in mutations:
        checked = [e for e in m.models if e in engines]
        if not checked:
            continue
        # a wrong model may break its own invariants (the valve's, its batches'): noted, not raised,
        # for what is measured is whether the engines' check finds it
        broken: list[AssertionError] = []
        results = [run_compare(sc, rules=m.rules, broken=broken.append) for sc in scenarios]
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

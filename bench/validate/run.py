"""Run lab scenarios through the model and the engines; one ``Verdict`` per scenario and engine strategy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..lab import load_lab_scenario, run_compare
from ..lab.compare import LabResult
from ..lab.compared_strategies import SparkStrategy
from ..lab.lab_scenario import lab_strategies
from ..spec.scenario import FLINK_SOURCES, Scenario, StrategiesSpec
from . import user_cache
from .errors import EngineUnavailableError, ValidateError
from .flink_engine import FlinkTiming, flink_available, replay_flink, scenario_window_ms
from .flink_java import choose_runner, replay_flink_java
from .spark_engine import replay_spark, spark_available
from .verdict import OUT_OF_REGIME, Verdict, flink_verdict, not_run, spark_verdict

__all__ = ["ENGINES", "validate_spark", "validate_flink", "validate", "with_flink_source"]

ENGINES = ("spark", "flink")


def validate_spark(result: LabResult, spark: Any) -> Verdict:
    """The Spark model of ``result`` against Spark on the same micro-batches."""
    sc = result.scenario
    st = result.strategies["spark"]
    assert isinstance(st, SparkStrategy)
    if st.inputs_added_late:
        return not_run(
            sc.name,
            "spark",
            "Spark",
            "spark_input: segment on a stream that scales: Spark's inputs are fixed when the query starts",
        )
    replay = replay_spark(
        spark,
        st.batches,
        st.inputs,
        delay_ms=lab_strategies(sc).spark_delay_ms,
        window_ms=scenario_window_ms(sc),
        policy=lab_strategies(sc).spark_policy,
        start_time_ms=sc.start_time_ms,
    )
    return spark_verdict(result, replay)


def validate_flink(
    result: LabResult,
    timing: FlinkTiming,
    python: str | None = None,
    max_pace_ms: int | None = None,
    echo: Callable[[str], None] = lambda _s: None,
    runner: str = "python",
) -> Verdict:
    """The Flink model of ``result`` against Flink: the driven Java job (``runner="java"``: one run,
    ``exact`` or ``differs``) or the paced PyFlink replay (``"python"``).

    A paced replay that left the regime (``out of regime``: a pacer, an emit or a move of the
    combined watermark too late for its margin, which grows with the pace) is run again at
    twice the pace while that stays within ``max_pace_ms`` (default: no second run). The
    verdict is the last run's, at its pace; its note names the runs before it and why each
    left the regime, so a table never hides a retry.
    """
    if runner == "java":
        return flink_verdict(result, replay_flink_java([result], python)[0])
    ceiling = timing.pace_ms if max_pace_ms is None else max_pace_ms
    if ceiling < timing.pace_ms:
        raise ValidateError(f"max_pace_ms {ceiling} is below the pace {timing.pace_ms} ms")
    earlier: list[str] = []
    while True:
        verdict = flink_verdict(result, replay_flink(result, timing, python))
        if verdict.verdict != OUT_OF_REGIME or timing.pace_ms * 2 > ceiling:
            break
        earlier.append(f"at {timing.pace_ms} ms out of regime ({verdict.note})")
        timing = replace(timing, pace_ms=timing.pace_ms * 2)
        echo(f"{result.scenario.name}: out of the regime; again at {timing.pace_ms} ms per emit")
    if not earlier:
        return verdict
    return replace(verdict, note=f"{verdict.note} [before: {'; '.join(earlier)}]")


def with_flink_source(sc: Scenario, source: str) -> Scenario:
    """``sc`` with its ``flink`` strategy in the topology ``source`` (``strategies.flink_source``)."""
    if source not in FLINK_SOURCES:
        raise ValidateError(f"no Flink topology {source!r}; topologies: {', '.join(FLINK_SOURCES)}")
    return replace(sc, strategies=replace(sc.strategies or StrategiesSpec(), flink_source=source))


def validate(
    names: Sequence[str],
    engines: Sequence[str],
    spark_session: Callable[[], Any],
    timing: FlinkTiming,
    flink_python: str | None = None,
    echo: Callable[[str], None] = lambda _s: None,
    flink_max_pace_ms: int | None = None,
    flink_sources: Sequence[str] = (),
    flink_runner: str = "auto",
) -> list[Verdict]:
    """Every scenario through every engine; an engine that cannot run: a ``not run`` row saying why.

    ``flink_sources``: the Flink topologies to check, each a row of its own (none given: the
    scenario's own ``strategies.flink_source``). ``flink_runner``: ``java`` (the driven job: a
    JDK and Flink's jars), ``python`` (the paced PyFlink replay: a JRE is enough) or ``auto``
    (``java`` where it can run, else ``python``). A ``flink_python`` in ingestwm's cache (a venv
    there) is held from start to end: ``ingestwm cache clear --venv`` keeps it meanwhile.
    """
    with user_cache.using_python(flink_python if "flink" in engines else None):
        return _validate(
            names,
            engines,
            spark_session,
            timing,
            flink_python,
            echo,
            flink_max_pace_ms,
            flink_sources,
            flink_runner,
        )


def _validate(
    names: Sequence[str],
    engines: Sequence[str],
    spark_session: Callable[[], Any],
    timing: FlinkTiming,
    flink_python: str | None,
    echo: Callable[[str], None],
    flink_max_pace_ms: int | None,
    flink_sources: Sequence[str],
    flink_runner: str,
) -> list[Verdict]:
    for e in engines:
        if e not in ENGINES:
            raise ValidateError(f"no engine {e!r}; engines: {', '.join(ENGINES)}")
    for src in flink_sources:
        if src not in FLINK_SOURCES:
            raise ValidateError(f"no Flink topology {src!r}; topologies: {', '.join(FLINK_SOURCES)}")
    if "flink" in engines and flink_max_pace_ms is not None and flink_max_pace_ms < timing.pace_ms:
        raise ValidateError(f"flink_max_pace_ms {flink_max_pace_ms} is below the pace {timing.pace_ms} ms")
    scenarios = [load_lab_scenario(n) for n in names]  # bad names fail before anything runs
    spark_why = spark_available() if "spark" in engines else None
    runner, flink_why = "python", None
    if "flink" in engines:
        runner, flink_why = choose_runner(flink_runner, flink_python)  # an unknown one: refused here
        if runner == "python":
            flink_why = flink_available(flink_python)
    session = None
    out: list[Verdict] = []
    for sc in scenarios:
        echo(f"{sc.name}: running the lab model")
        result = run_compare(sc)
        if "spark" in engines:
            if spark_why is not None:
                out.append(not_run(sc.name, "spark", "Spark", spark_why))
            else:
                batches = len(getattr(result.strategies["spark"], "batches", ()))
                echo(f"{sc.name}: replaying {batches} micro-batches in Spark")
                if session is None:
                    session = spark_session()
                out.append(
                    _guard(sc.name, "spark", "Spark", lambda r=result, s=session: validate_spark(r, s))
                )
                echo(_said(out[-1]))
        if "flink" not in engines:
            continue
        own = lab_strategies(sc).flink_source
        for src in flink_sources or (own,):
            name = f"flink ({src})"
            if flink_why is not None:
                out.append(not_run(sc.name, name, "Flink", flink_why))
                continue
            res = result if src == own else run_compare(with_flink_source(sc, src))
            how = "the driven Java job" if runner == "java" else f"pace {timing.pace_ms} ms per emit"
            echo(f"{sc.name}: replaying the {src} topology in Flink ({how})")
            out.append(
                _guard(
                    sc.name,
                    name,
                    "Flink",
                    lambda r=res: validate_flink(r, timing, flink_python, flink_max_pace_ms, echo, runner),
                )
            )
            echo(_said(out[-1]))
    return out


def _said(v: Verdict) -> str:
    """One line as a comparison ends (a whole run can take an hour): the verdict, and why if not exact."""
    at = "" if v.pace_ms is None else f" at {v.pace_ms} ms per emit"
    at = " (driven)" if v.runner == "java" else at
    why = "" if v.verdict == "exact" else f": {v.note}"
    return f"{v.scenario}: {v.engine} {v.verdict}{at}{why}"


def _guard(scenario: str, strategy: str, engine: str, run: Callable[..., Verdict]) -> Verdict:
    try:
        return run()
    except EngineUnavailableError as e:
        return not_run(scenario, strategy, engine, str(e))
    except ValidateError as e:
        return Verdict(scenario, strategy, engine, verdict="failed", note=str(e))

"""Run lab scenarios through the model and the engines; one ``Verdict`` per scenario and engine strategy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..lab import load_lab_scenario, run_compare
from ..lab.compare import LabResult
from ..lab.lab_scenario import lab_strategies
from ..lab.spark_model import SparkStrategy
from ..spec.scenario import FLINK_SOURCES, Scenario, StrategiesSpec
from . import user_cache
from .errors import EngineUnavailableError, ValidateError
from .flink_engine import FlinkReplay, FlinkTiming, flink_available, replay_flink, scenario_window_ms
from .flink_java import choose_runner, driven_spec, replay_flink_java
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
    replay: FlinkReplay | None = None,
) -> Verdict:
    """The Flink model of ``result`` against Flink: the driven Java job (``runner="java"``: one run,
    ``exact`` or ``differs``; ``replay``: its run, if already made) or the paced PyFlink replay
    (``"python"``).

    A paced replay that left the regime (``out of regime``: a pacer, an emit or a move of the
    combined watermark too late for its margin, which grows with the pace) is run again at
    twice the pace while that stays within ``max_pace_ms`` (default: no second run). The
    verdict is the last run's, at its pace; its note names the runs before it and why each
    left the regime, so a table never hides a retry.
    """
    if runner == "java":
        return flink_verdict(result, replay if replay is not None else replay_flink_java([result], python)[0])
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
    names: Sequence[str | Scenario],
    engines: Sequence[str],
    spark_session: Callable[[], Any],
    timing: FlinkTiming,
    flink_python: str | None = None,
    echo: Callable[[str], None] = lambda _s: None,
    flink_max_pace_ms: int | None = None,
    flink_sources: Sequence[str] = (),
    flink_runner: str = "auto",
    on_result: Callable[[LabResult], None] | None = None,
) -> list[Verdict]:
    """Every scenario (a name or path, or a ``Scenario``) through every engine; an engine that cannot
    run: a ``not run`` row saying why.

    ``flink_sources``: the Flink topologies to check, each a row of its own (none given: the
    scenario's own ``strategies.flink_source``). ``flink_runner``: ``java`` (the driven job: a
    JDK and Flink's jars; every scenario in one JVM), ``python`` (the paced PyFlink replay: a JRE
    is enough) or ``auto`` (``java`` where it can run, else ``python``). A ``flink_python`` in
    ingestwm's cache (a venv there) is held from start to end: ``ingestwm cache clear --venv``
    keeps it meanwhile. ``on_result`` sees each scenario's lab run (in its own topology).
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
            on_result,
        )


def _validate(
    names: Sequence[str | Scenario],
    engines: Sequence[str],
    spark_session: Callable[[], Any],
    timing: FlinkTiming,
    flink_python: str | None,
    echo: Callable[[str], None],
    flink_max_pace_ms: int | None,
    flink_sources: Sequence[str],
    flink_runner: str,
    on_result: Callable[[LabResult], None] | None,
) -> list[Verdict]:
    for e in engines:
        if e not in ENGINES:
            raise ValidateError(f"no engine {e!r}; engines: {', '.join(ENGINES)}")
    for src in flink_sources:
        if src not in FLINK_SOURCES:
            raise ValidateError(f"no Flink topology {src!r}; topologies: {', '.join(FLINK_SOURCES)}")
    if "flink" in engines and flink_max_pace_ms is not None and flink_max_pace_ms < timing.pace_ms:
        raise ValidateError(f"flink_max_pace_ms {flink_max_pace_ms} is below the pace {timing.pace_ms} ms")
    # bad names fail before anything runs
    scenarios = [n if isinstance(n, Scenario) else load_lab_scenario(n) for n in names]
    spark_why = spark_available() if "spark" in engines else None
    runner, flink_why = "python", None
    if "flink" in engines:
        runner, flink_why = choose_runner(flink_runner, flink_python)  # an unknown one: refused here
        if runner == "python":
            flink_why = flink_available(flink_python)
    session = None
    out: list[Verdict | None] = []
    driven: list[tuple[int, LabResult]] = []  # rows the driven Java job fills, all in one JVM
    for sc in scenarios:
        only = sc.strategies.only if sc.strategies is not None else ()
        left_out = {
            e: f"the scenario's strategies.only leaves {e} out" for e in ENGINES if only and e not in only
        }
        echo(f"{sc.name}: running the lab model")
        result = run_compare(sc)
        if on_result is not None:
            on_result(result)
        if "spark" in engines:
            why = left_out.get("spark") or spark_why
            if why is not None:
                out.append(not_run(sc.name, "spark", "Spark", why))
            else:
                batches = len(getattr(result.strategies["spark"], "batches", ()))
                echo(f"{sc.name}: replaying {batches} micro-batches in Spark")
                if session is None:
                    session = spark_session()
                row = _guard(sc.name, "spark", "Spark", lambda r=result, s=session: validate_spark(r, s))
                out.append(row)
                echo(_said(row))
        if "flink" not in engines:
            continue
        own = lab_strategies(sc).flink_source
        for src in flink_sources or (own,):
            name = f"flink ({src})"
            why = left_out.get("flink") or flink_why
            if why is not None:
                out.append(not_run(sc.name, name, "Flink", why))
                continue
            res = result if src == own else run_compare(with_flink_source(sc, src))
            if runner == "java":
                out.append(None)
                driven.append((len(out) - 1, res))
                continue
            echo(f"{sc.name}: replaying the {src} topology in Flink (pace {timing.pace_ms} ms per emit)")
            paced = _guard(
                sc.name,
                name,
                "Flink",
                lambda r=res: validate_flink(r, timing, flink_python, flink_max_pace_ms, echo, runner),
            )
            out.append(paced)
            echo(_said(paced))
    if driven:
        echo(f"replaying {len(driven)} Flink runs in one driven Java job")
        for (i, res), rep in zip(driven, _driven_replays([r for _, r in driven], flink_python), strict=True):
            src = lab_strategies(res.scenario).flink_source
            row = (
                rep
                if isinstance(rep, Verdict)
                else _guard(
                    res.scenario.name,
                    f"flink ({src})",
                    "Flink",
                    lambda r=res, p=rep: validate_flink(
                        r, timing, flink_python, flink_max_pace_ms, echo, "java", replay=p
                    ),
                )
            )
            out[i] = row
            echo(_said(row))
    return [v for v in out if v is not None]


def _driven_replays(results: list[LabResult], python: str | None) -> list[FlinkReplay | Verdict]:
    """The driven Java job's run of each result, all in one JVM; a result whose splits the job cannot
    take, or a job that could not run: a ``failed`` (or ``not run``) row instead."""
    out: list[FlinkReplay | Verdict | None] = []
    good: list[LabResult] = []
    for r in results:
        try:
            driven_spec(r)
        except ValidateError as e:
            out.append(_flink_row(r, "failed", str(e)))
            continue
        out.append(None)
        good.append(r)
    replays: list[FlinkReplay | Verdict]
    try:
        replays = list(replay_flink_java(good, python)) if good else []
    except EngineUnavailableError as e:
        replays = [_flink_row(r, "not run", str(e)) for r in good]
    except ValidateError as e:
        replays = [_flink_row(r, "failed", str(e)) for r in good]
    it = iter(replays)
    return [next(it) if v is None else v for v in out]


def _flink_row(result: LabResult, verdict: str, note: str) -> Verdict:
    src = lab_strategies(result.scenario).flink_source
    return Verdict(result.scenario.name, f"flink ({src})", "Flink", verdict=verdict, note=note)


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

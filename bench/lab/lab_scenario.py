"""The lab's view of the one scenario language (``bench.spec.scenario``).

A lab scenario is an ordinary scenario: ``compare`` runs its workload (writers,
readers, stream, scaling) through the watermark strategies at once, with the knobs of
its ``strategies`` section (the defaults if it has none). Shipped scenarios and files
are found by the one loader; errors are ``ScenarioError`` (``LabScenarioError`` is the
same class) naming the dotted field.

``LabStrategies`` is the resolved configuration the strategies are built from: the
``strategies`` section (with its ``custom`` strategies) plus the ingestion strategy's
``maxEventTimeLag``, which is the reader group's ``group.max_event_time_lag_ms``. The
stages after each strategy's reordering buffer are the scenario's ``pipeline.stages``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec.errors import ScenarioError
from ..spec.scenario import (
    BUILTIN_STRATEGIES,
    WHEN_IDLE,
    CustomStrategySpec,
    Scenario,
    StrategiesSpec,
    load_scenario,
    scenario_from_dict,
    shipped_scenarios,
)

__all__ = [
    "LabScenarioError",
    "LabScenario",
    "LabStrategies",
    "LabCustomStrategy",
    "BUILTIN_STRATEGIES",
    "WHEN_IDLE",
    "lab_scenarios",
    "load_lab_scenario",
    "lab_scenario_from_dict",
    "lab_strategies",
    "lab_ready",
]

LabScenarioError = ScenarioError
"""A scenario is malformed or not runnable by the lab; the message names the field."""

LabScenario = Scenario
"""The lab runs ordinary scenarios."""

LabCustomStrategy = CustomStrategySpec
"""A custom strategy of ``strategies.custom`` (docs/strategies.md)."""


@dataclass(frozen=True, slots=True)
class LabStrategies:
    """The strategies' resolved knobs (``strategies`` and ``group.max_event_time_lag_ms``).

    ``custom``: the custom strategies run after the four built-in ones, in this order.
    ``flink_source`` is the Flink job's topology: ``reader`` (a subtask per reader of the
    group, ``FlinkReaderStrategy``) or ``segment_union`` (a bounded source per segment,
    unioned, ``FlinkStrategy``).
    ``spark_policy`` is Spark's ``spark.sql.streaming.multipleWatermarkPolicy``: the global
    watermark is the ``min`` (Spark's default) or the ``max`` over inputs.
    """

    max_event_time_lag_ms: int = 1_000
    flink_bound_ms: int = 1_000
    flink_idle_timeout_ms: int = 5_000
    flink_interval_ms: int = 200
    flink_source: str = "reader"
    spark_delay_ms: int = 1_000
    spark_trigger_ms: int = 1_000
    spark_input: str = "stream"
    spark_policy: str = "min"
    custom: tuple[CustomStrategySpec, ...] = ()


def lab_strategies(sc: Scenario) -> LabStrategies:
    """The resolved strategy knobs of ``sc``."""
    st = sc.strategies or StrategiesSpec()
    return LabStrategies(
        max_event_time_lag_ms=sc.group.max_event_time_lag_ms,
        flink_bound_ms=st.flink_bound_ms,
        flink_idle_timeout_ms=st.flink_idle_timeout_ms,
        flink_interval_ms=st.flink_interval_ms,
        flink_source=st.flink_source,
        spark_delay_ms=st.spark_delay_ms,
        spark_trigger_ms=st.spark_trigger_ms,
        spark_input=st.spark_input,
        spark_policy=st.spark_policy,
        custom=st.custom,
    )


def lab_ready(sc: Scenario) -> Scenario:
    """``sc`` if the lab can run it, else ``ScenarioError`` naming the field it does not model."""
    if not sc.writers:
        raise ScenarioError("the lab needs at least one writer", "writers")
    if not sc.readers:
        raise ScenarioError("the lab needs at least one reader", "readers")
    if sc.pipeline.window_ms is None:
        raise ScenarioError("the lab fills windows: set it (and pipeline.ordering)", "pipeline.window_ms")
    st = sc.strategies or StrategiesSpec()
    for what, v in (
        ("metrics.sample_ms", sc.metrics.sample_ms),
        ("pipeline.window_ms", sc.pipeline.window_ms),
    ):
        if v % st.tick_ms:
            raise ScenarioError(f"must be a multiple of strategies.tick_ms {st.tick_ms}, got {v}", what)
    if sc.group.processes:
        raise ScenarioError("the lab runs its readers in-process", "group.processes")
    return sc


def lab_scenario_from_dict(data: dict[str, Any]) -> Scenario:
    """A scenario from a parsed YAML mapping, checked runnable by the lab."""
    return lab_ready(scenario_from_dict(data))


def lab_scenarios() -> dict[str, Path]:
    """The shipped scenarios with a ``strategies`` section (made for the lab) by name."""
    from ..spec.loader import read_mapping, shipped

    out = {}
    for name, path in shipped().items():
        if "strategies" in read_mapping(path, "scenario file", ScenarioError):
            out[name] = path
    return out


def load_lab_scenario(
    name_or_path: str | Path, overrides: Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Load a shipped scenario by name, or a YAML file by path, for the lab."""
    try:
        return lab_ready(load_scenario(name_or_path, overrides, seed))
    except ScenarioError as e:
        if "unknown scenario" in str(e):
            raise ScenarioError(
                f"no lab scenario {str(name_or_path)!r}: not a file, and not one of "
                f"{', '.join(shipped_scenarios())}"
            ) from None
        raise
